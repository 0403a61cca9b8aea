"""experiments/engine/host_band_study.py (PLAN.md 2026-12-04 04:23): recomputed from the committed
step logs, equal to the committed table, and the counts it states."""

from __future__ import annotations

import pandas as pd
import pytest
from engine_modules import ENGINE as ROOT
from engine_modules import load_engine_experiment


@pytest.fixture(scope="module")
def band() -> pd.DataFrame:
    mod = load_engine_experiment("host_band_study")
    df = mod.study(ROOT / "runs", ROOT / "manifest.json")
    assert (ROOT / "host_band_study.md").read_text() == mod.markdown(df)
    return df


def test_recomputes_to_the_committed_table(band: pd.DataFrame) -> None:
    old = pd.read_csv(ROOT / "host_band_study.csv")
    assert list(old["run"]) == list(band["run"]) and list(old["metric"]) == list(band["metric"])
    for col in ("real", "fast", "slow"):
        pd.testing.assert_series_equal(old[col], band[col], rtol=1e-5, check_names=False)


def test_the_band_does_not_hold_the_real_engine(band: pd.DataFrame) -> None:
    """46 predict runs on 14 machines (session 15: call 46's two runs on a new machine; session
    14: the client round trip and the pipeline recurrence on, the round trip's four fit runs
    out, calls 43 and 45 in; 43 on 11 before, inside 14 / 17 / 16 / 17): the measured spread of
    host costs across the other machines holds throughput on 22, mean TPOT on 22, mean TTFT on
    18, p99 TTFT on 18 (open-loop runs replaying the real send times, PLAN.md 2026-12-04 22:04;
    20 / 22 / 18 / 18 with capsim's own draws; 44 runs: 18 / 21 / 17 / 17). Where it misses, capsim's TPOT is mostly
    low even at the slowest machine's host cost (real TPOT below the band on 7 runs, above it on
    17; 15 / 11 before the recurrence): the host cost is not the only error."""
    assert band["run"].nunique() == 46 and band["boot_id"].nunique() == 14
    want = {"throughput_tok_per_s": 22, "tpot_mean_ms": 22, "ttft_mean_ms": 18, "ttft_p99_ms": 18}
    for m, n in want.items():
        assert int(band[band["metric"] == m]["inside"].sum()) == n, m
    t = band[(band["metric"] == "tpot_mean_ms") & ~band["inside"]]
    below = int((t["real"] < t[["fast", "slow"]].min(axis=1)).sum())
    assert (below, len(t) - below) == (7, 17)
