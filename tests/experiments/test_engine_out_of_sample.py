"""Real vLLM 0.26 on the H200 vs capsim (issue 21): recomputed from the committed files.

What holds is asserted against issue 21's thresholds; where capsim misses, the miss is
asserted as the stated gap (so the table cannot silently turn into a pass or a worse miss
without this test and experiments/engine/README.md being updated). No run is re-fitted here:
the one fitted constant (per-step engine overhead) comes from the one PLAN.md fit run.
"""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd
import pytest

from capsim.live.engine_oos import FIT_RUNS, THRESHOLDS, table, within

ROOT = Path(__file__).resolve().parents[2] / "experiments" / "engine"
G09 = ("g090_k3_rand_c16", "g090_k3_rand_c64")
G06 = ("g060_k3_rand_c64", "g060_k3_rand_c128", "g060_k3_rand_c256", "g060_k3_sg_c256")


@pytest.fixture(scope="module")
def computed() -> tuple[pd.DataFrame, float]:
    return table(ROOT / "runs", ROOT / "startups.csv")


def _row(df: pd.DataFrame, run: str, metric: str) -> pd.Series:
    hit = df[(df["run"] == run) & (df["metric"] == metric)]
    assert len(hit) == 1, (run, metric)
    return hit.iloc[0]


def test_table_recomputes_to_the_committed_numbers(computed):
    df, _ = computed
    old = pd.read_csv(ROOT / "out_of_sample.csv")
    assert list(old["run"]) == list(df["run"]) and list(old["metric"]) == list(df["metric"])
    for col in ("real", "capsim", "capsim_delta", "capsim_delta_real_blocks"):
        pd.testing.assert_series_equal(old[col], df[col], rtol=1e-5, check_names=False)


def test_fit_is_one_run_one_constant(computed):
    df, delta_s = computed
    assert FIT_RUNS == ("g090_k3_rand_c1",)
    assert 0 < delta_s < 2e-3  # 0.43 ms per step; a sign or unit slip would leave this range
    fit = _row(df, "g090_k3_rand_c1", "tpot_mean_ms")
    assert abs(fit["capsim_delta"] - fit["real"]) < 1e-3 * fit["real"]
    assert set(df[df["role"] == "fit"]["run"]) == set(FIT_RUNS)


def test_what_holds(computed):
    df, _ = computed
    for run in G09:  # closed loop, memory not binding: admitted = concurrency
        r = _row(df, run, "peak_running")
        assert within("peak_running", r["real"], r["capsim_delta"])
    for run in ("g090_k3_rand_c64", "g060_k3_rand_c64"):
        r = _row(df, run, "ttft_p99_ms")
        assert within("ttft_p99_ms", r["real"], r["capsim_delta"])
    # the scheduler given the real pool: admitted requests at the memory-bound knee match
    for run in G06:
        r = _row(df, run, "peak_running")
        assert r["real"] == 44 and r["capsim_delta_real_blocks"] == r["real"]
    # the memory plan (issue 25's wing: 596 blocks where vLLM has 580, was 704): capsim's own
    # pool admits 45 requests at the knee, real 44, within issue 21's 5 %
    for run in G06:
        r = _row(df, run, "peak_running")
        assert r["capsim_delta"] == 45 and within("peak_running", r["real"], r["capsim_delta"])


def test_stated_gaps(computed):
    """The misses experiments/engine/README.md states, each still a miss of that sign."""
    df, _ = computed
    pred = df[df["role"] == "predict"]
    for run in pred["run"].unique():
        thr = _row(df, run, "throughput_tok_per_s")  # capsim too fast: +25..+73%
        assert not within("throughput_tok_per_s", thr["real"], thr["capsim_delta"])
        assert thr["err_delta_pct"] > 10
        ttft = _row(df, run, "ttft_mean_ms")  # prefill: real 145 ms for 1024 tok at c=1
        assert ttft["err_delta_pct"] < -20 and ttft["capsim_delta"] + 15 < ttft["real"]
        tpot = _row(df, run, "tpot_mean_ms")  # decode under load: -11..-32%
        assert tpot["err_delta_pct"] < -10
    c1 = _row(df, "g090_k3_rand_c1", "ttft_mean_ms")
    assert c1["real"] > 3 * c1["capsim"]


def test_synthetic_acceptance_matches_the_rates_given():
    rates = (0.8522, 0.726245, 0.618906)
    for d in sorted((ROOT / "runs").iterdir()):
        s = json.loads((d / "bench_summary.json").read_text())
        got = s["spec_decode_per_position_acceptance_rates"]  # fractions
        assert all(abs(g - r) < 0.03 for g, r in zip(got, rates, strict=True)), (d.name, got)


def test_thresholds_are_the_issues():
    assert THRESHOLDS == {
        "throughput_tok_per_s": (0.10, 0.0),
        "tpot_mean_ms": (0.10, 0.0),
        "ttft_mean_ms": (0.20, 15.0),
        "ttft_p99_ms": (0.30, 0.0),
        "peak_running": (0.05, 0.0),
    }
