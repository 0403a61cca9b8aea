"""experiments/engine/ingest_queue_study.py (session 15): the API server's ingest queue, a study
(the shipped model has it off); recomputed from the committed files, its counts asserted."""

from __future__ import annotations

import pandas as pd
import pytest
from engine_modules import ENGINE as ROOT
from engine_modules import load_engine_experiment


@pytest.fixture(scope="module")
def result():
    mod = load_engine_experiment("ingest_queue_study")
    a_s, b_s, fits = mod.fit(ROOT / "runs")
    oos = pd.read_csv(ROOT / "out_of_sample.csv")
    df = mod.study(pd.read_csv(ROOT / "burst_study.csv"), oos, a_s, b_s, ROOT / "runs")
    assert (ROOT / "ingest_queue_study.md").read_text() == mod.markdown(df, a_s, b_s, fits)
    assert (ROOT / "ingest_queue_study.csv").read_text() == df.to_csv(index=False)
    return mod, a_s, b_s, df


def test_the_fit_is_the_rules(result) -> None:
    mod, a_s, b_s, df = result
    assert len(mod.FIT_RUNS) == 7 and not set(mod.FIT_RUNS) & set(df["run"])
    assert 4e-3 < a_s < 7e-3 and 1e-6 < b_s < 3e-6


def test_the_queue_fixes_the_burst_not_the_tails(result) -> None:
    """Burst mean TTFT within 20%: 10 -> 20 of 36; mean TTFT 25 -> 25, p99 28 -> 28."""
    _, _, _, df = result
    assert df["run"].nunique() == 36
    got = {m: (int(x["pass_without"].sum()), int(x["pass_with_queue"].sum()))
           for m, x in df.groupby("metric")}  # fmt: skip
    assert got["burst_ttft_ms"] == (10, 20)
    assert got["ttft_mean_ms"] == (25, 25) and got["ttft_p99_ms"] == (28, 28)


def test_the_queue_is_off_in_the_shipped_model() -> None:
    from capsim.cost.engine_period import AsyncStepPeriod

    fields = AsyncStepPeriod.__dataclass_fields__
    assert fields["api_ingest_s"].default == 0.0 and fields["api_ingest_s_per_tok"].default == 0.0
