from __future__ import annotations

import warnings

import numpy as np
import pandas as pd
import pytest

from capsim.traces import (
    BurstgptStandin,
    TraceFormatError,
    burstgpt_standin,
    read_burstgpt,
    sample_burstgpt,
)
from capsim.traces.burstgpt import BURSTGPT_6_COLUMNS, BURSTGPT_8_COLUMNS


def _six_column_file(tmp_path, n=200, seed=3):
    """A synthetic file in the 6-column schema (real BurstGPT rows are not available)."""
    rng = np.random.default_rng(seed)
    ts = np.sort(rng.integers(0, 10_000, n))
    model = rng.choice(["ChatGPT", "GPT-4"], n)
    req = rng.integers(1, 3000, n)
    resp = rng.integers(0, 800, n)
    resp[::17] = 0  # failures
    log = rng.choice(["Conversation log", "API log"], n)
    frame = pd.DataFrame(
        dict(zip(BURSTGPT_6_COLUMNS, [ts, model, req, resp, req + resp, log], strict=True))
    )
    path = tmp_path / "BurstGPT_test.csv"
    frame.to_csv(path, index=False)
    return path, frame


def test_six_column_file(tmp_path):
    path, frame = _six_column_file(tmp_path)
    rows = read_burstgpt(path)
    assert rows.schema == "6-column"
    assert rows.num_rows == len(frame)
    assert rows.request_tok.tolist() == frame["Request tokens"].tolist()
    assert rows.lines[0] == 2  # header is line 1


def test_sample_matches_vllm_burstgpt_dataset(tmp_path):
    """Same rows as vLLM's BurstGPTDataset: GPT-4, Response > 0, DataFrame.sample(seed)."""
    path, _ = _six_column_file(tmp_path)
    rows = read_burstgpt(path)
    df = pd.read_csv(path)
    gpt4 = df[(df["Model"] == "GPT-4") & (df["Response tokens"] > 0)]
    for n, seed in ((20, 0), (20, 7), (len(gpt4) + 50, 1)):
        want = gpt4.sample(n=n, random_state=seed, replace=n > len(gpt4)).values.tolist()
        got = sample_burstgpt(rows, num_requests=n, seed=seed)
        assert got.prompt_tok.tolist() == [int(r[2]) for r in want]
        assert got.output_tok.tolist() == [int(r[3]) for r in want]
        assert got.arrival_s is None


def test_eight_column_file_uses_columns_by_name(tmp_path):
    text = (
        ",".join(BURSTGPT_8_COLUMNS)
        + "\n"
        + (
            "19440110.5,,,GPT-4,100,20,120,API log\n"
            "19440111.25,s1,3.5,GPT-4,7,9,16,Conversation log\n"
            "19440112.0,,,ChatGPT,5,5,10,API log\n"
        )
    )
    path = tmp_path / "BurstGPT_3.csv"
    path.write_text(text)
    rows = read_burstgpt(path)
    assert rows.schema == "8-column"
    t = sample_burstgpt(rows, num_requests=2, seed=0)
    assert sorted(zip(t.prompt_tok.tolist(), t.output_tok.tolist(), strict=True)) == [
        (7, 9),
        (100, 20),
    ]


def test_broken_rows_and_files(tmp_path):
    text = (
        ",".join(BURSTGPT_6_COLUMNS)
        + "\n"
        + (
            "5,ChatGPT,472,18,490,Conversation log\n"
            "x,GPT-4,1,1,2,API log\n"
            "7,GPT-4,-3,1,-2,API log\n"
            "8,GPT-4,10,10,25,API log\n"
            "9,GPT-4,10,10\n"
            "10,,10,10,20,API log\n"
        )
    )
    path = tmp_path / "b.csv"
    path.write_text(text)
    with pytest.raises(TraceFormatError) as info:
        read_burstgpt(path)
    assert [i.line for i in info.value.issues] == [3, 4, 5, 6, 7]
    assert "Timestamp='x'" in info.value.issues[0].reason
    assert "Total tokens=25" in info.value.issues[2].reason
    wrong = tmp_path / "w.csv"
    wrong.write_text("Timestamp,Model,Request tokens\n1,GPT-4,3\n")
    with pytest.raises(TraceFormatError, match="header"):
        read_burstgpt(wrong)


def test_zero_request_rows_are_dropped_loudly(tmp_path):
    text = ",".join(BURSTGPT_6_COLUMNS) + "\n5,GPT-4,0,18,18,API log\n6,GPT-4,3,4,7,API log\n"
    path = tmp_path / "z.csv"
    path.write_text(text)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        t = sample_burstgpt(read_burstgpt(path), num_requests=3, seed=0)
    assert any("0 request tokens" in str(w.message) and "line 2" in str(w.message) for w in caught)
    assert t.prompt_tok.tolist() == [3, 3, 3]


def test_standin_is_labelled_seeded_and_bounded():
    a = burstgpt_standin(num_requests=5000, seed=1)
    b = burstgpt_standin(num_requests=5000, seed=1)
    c = burstgpt_standin(num_requests=5000, seed=2)
    assert a.name == "burstgpt-standin" and "standin" in a.source_id[0]
    np.testing.assert_array_equal(a.prompt_tok, b.prompt_tok)
    assert not np.array_equal(a.prompt_tok, c.prompt_tok)
    assert a.prompt_tok.max() < 1024 and a.output_tok.max() < 1024 and a.prompt_tok.min() >= 1
    # Zipf(1.1) below 1024: P(1) = 1 / sum_{k<1024} k^-1.1
    p1 = 1.0 / np.sum(np.arange(1, 1024, dtype=float) ** -1.1)
    assert np.mean(a.prompt_tok == 1) == pytest.approx(p1, abs=0.02)
    short = burstgpt_standin(num_requests=100, seed=0, params=BurstgptStandin(max_output_tok=10))
    assert short.output_tok.max() < 10
    with pytest.raises(ValueError, match="zipf_a"):
        BurstgptStandin(zipf_a=1.0)
