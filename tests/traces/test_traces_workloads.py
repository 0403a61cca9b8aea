from __future__ import annotations

import shutil

import numpy as np
import pandas as pd
import pytest

from capsim.traces import WORKLOADS, load_workload, tokenizer_family
from capsim.traces.compact import DATA_DIR

GRID = [
    "sharegpt",
    "spec-bench",
    "synthetic-balanced",
    "synthetic-prefill-heavy",
    "synthetic-generation-heavy",
    "burstgpt-standin",
    "azure-conv",
    "azure-code",
]


def test_names():
    assert set(GRID) <= set(WORKLOADS)
    assert "STAND-IN" in WORKLOADS["burstgpt-standin"]
    with pytest.raises(ValueError, match=r"'nope'.*azure-code.*sharegpt"):
        load_workload("nope", num_requests=1, seed=0)


@pytest.mark.parametrize("name", GRID)
def test_deterministic_and_seed_sensitive(name):
    a = load_workload(name, num_requests=300, seed=5)
    b = load_workload(name, num_requests=300, seed=5)
    c = load_workload(name, num_requests=300, seed=6)
    assert a.num_requests == 300 and a.name == name
    np.testing.assert_array_equal(a.prompt_tok, b.prompt_tok)
    np.testing.assert_array_equal(a.output_tok, b.output_tok)
    assert a.source_id == b.source_id
    closed = not name.startswith("azure")
    assert (a.arrival_s is None) == closed
    if not name.startswith("synthetic"):  # presets with range ratio 0 have constant lengths
        assert not np.array_equal(a.prompt_tok, c.prompt_tok)


def test_sharegpt_matches_upstream_emulation():
    """NOTES.md §3: vLLM's sampler on the subset, seed 0, 1000 requests."""
    q3 = load_workload("sharegpt", num_requests=1000, seed=0, model="qwen3-next-80b-a3b")
    assert q3.prompt_tok.mean() == pytest.approx(232.6, abs=0.05)
    assert np.median(q3.prompt_tok) == 125
    assert q3.output_tok.mean() == pytest.approx(191.6, abs=0.05)
    q35 = load_workload("sharegpt", num_requests=1000, seed=0, model="qwen3.5-397b-a17b")
    assert q35.prompt_tok.mean() == pytest.approx(237.1, abs=0.05)
    assert q35.output_tok.mean() == pytest.approx(196.2, abs=0.05)
    assert q35.prompt_tok.max() <= 1024 and (q35.prompt_tok + q35.output_tok).max() <= 2048


def test_sharegpt_oversamples_beyond_valid_entries():
    t = load_workload("sharegpt", num_requests=16000, seed=0)
    assert t.num_requests == 16000
    assert len(set(t.source_id)) == 15418  # NOTES.md: 15,418 Qwen3.5-valid entries


def test_spec_bench():
    t = load_workload("spec-bench", num_requests=480, seed=0, model="qwen3-next-80b-a3b")
    assert len(set(t.source_id)) == 480
    assert set(t.output_tok.tolist()) == {256}
    # NOTES.md §4: templated Qwen3 prompt mean over all 480 questions is 279.7
    assert t.prompt_tok.mean() == pytest.approx(279.7, abs=0.05)
    big = load_workload("spec-bench", num_requests=1000, seed=0)
    assert big.source_id[:480] == load_workload("spec-bench", num_requests=480, seed=0).source_id
    assert len(set(big.source_id)) == 480


def test_azure_windows():
    t = load_workload("azure-conv", num_requests=500, seed=3)
    assert t.arrival_s[0] == 0.0 and np.all(np.diff(t.arrival_s) >= 0)
    full = load_workload("azure-code", num_requests=8819, seed=9)
    assert full.arrival_s[-1] == pytest.approx(3435.9, abs=0.05)
    tiled = load_workload("azure-code", num_requests=8819 * 2 + 5, seed=0)
    assert np.all(np.diff(tiled.arrival_s) > -1e-9)
    np.testing.assert_array_equal(tiled.prompt_tok[:8819], tiled.prompt_tok[8819 : 2 * 8819])
    assert tiled.arrival_s[-1] > 2 * 3435.9


def test_model_selects_tokenizer_family():
    assert tokenizer_family("qwen3.5-35b-a3b") == "qwen35"
    assert tokenizer_family("qwen3-next-80b-a3b") == "qwen3"
    with pytest.raises(ValueError, match="llama"):
        tokenizer_family("llama-3")
    a = load_workload("spec-bench", num_requests=480, seed=0, model="qwen3.5-35b-a3b")
    b = load_workload("spec-bench", num_requests=480, seed=0, model="qwen3-next-80b-a3b")
    assert not np.array_equal(a.prompt_tok, b.prompt_tok)


def test_root_override(tmp_path):
    for f in DATA_DIR.glob("*.parquet"):
        shutil.copy(f, tmp_path / f.name)
    frame = pd.read_parquet(tmp_path / "spec_bench.parquet")
    frame["qwen35_prompt_tok"] = np.int32(7)
    frame.to_parquet(tmp_path / "spec_bench.parquet", index=False)
    t = load_workload("spec-bench", num_requests=10, seed=0, root=tmp_path)
    assert set(t.prompt_tok.tolist()) == {7}
    with pytest.raises(FileNotFoundError, match=r"derive\.py"):
        load_workload("sharegpt", num_requests=10, seed=0, root=tmp_path / "empty")
