"""Out-of-sample live timing, recomputed from the committed runs (no vLLM needed).

Every run in experiments/live/runs/ was recorded on the 2-core machine only when the
1-min load average was below 1.0 (``loadavg.json``). Each predicted run is simulated from
its requests, server arguments and load only; the step time comes from its fit run's
step log (``c16_b512_sharegpt`` without speculation, ``mtp_c16_b512_sharegpt`` with MTP
k=2, whose acceptance is also taken from that fit run). THRESHOLDS are the errors
claimed, per kind of run and metric; KNOWN_GAPS are misses beyond the repeat noise, with
their cause, bounded so that a worse model still fails. Reasons: experiments/live/README.md
("Out-of-sample timing"). A step-time model 30% too slow must break the thresholds.
"""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pandas as pd
import pytest

from capsim.live.outofsample import (
    fit_acceptance,
    out_of_sample_table,
    predict_run,
    step_log,
)
from capsim.live.steptime import fit_step_time

RUNS = Path(__file__).resolve().parents[2] / "experiments" / "live" / "runs"
FIT, MTP_FIT = "c16_b512_sharegpt", "mtp_c16_b512_sharegpt"
THRU, TTFT, TTFT99, TPOT, TPOT99 = (
    "output_throughput_tok_per_s", "ttft_mean_s", "ttft_p99_s", "tpot_mean_s", "tpot_p99_s",
)  # fmt: skip
# predicted run -> (its fit run, kind)
PREDICTED: dict[str, tuple[str, str]] = {
    "c16_b512_sharegpt_repeat": (FIT, "stalled"),
    "c16_b512_sharegpt_repeat2": (FIT, "queued"),
    "c16_b128_sharegpt": (FIT, "queued"),
    "c8_b512_spec-bench": (FIT, "queued"),
    "c4_b512_sharegpt": (FIT, "light"),
    "r0.8_b512_sharegpt": (FIT, "open"),
    "r1.4_b512_sharegpt": (FIT, "open"),
    "r1.4_b512_sharegpt_repeat": (FIT, "open"),
    "r2.0_b512_sharegpt": (FIT, "open_stalled"),
    "mtp_c4_b512_sharegpt": (MTP_FIT, "spec_light"),
    "mtp_r1.0_b512_sharegpt": (MTP_FIT, "spec_open"),
}
# Quiet repeats of the fit configuration vs the fit run (repeat2 / repeat): throughput
# +2.3% / -5.3%, mean TTFT -1.9% / +9.0%, p99 TTFT +1.2% / +119%, mean TPOT -4.3% / +6.0%,
# p99 TPOT +21% / +308% (repeat: three requests streamed at 40-80 ms/token while the
# engine stepped every ~10 ms: a stall outside the engine). Open loop at 1.4 req/s
# recorded twice: throughput -1.6%, mean TPOT +20%, mean TTFT 2.2x, p99 TTFT 4.4x.
# Claimed: about twice the typical closed-loop repeat difference for means, 25% for p99s.
BASE = {THRU: 0.10, TTFT: 0.15, TTFT99: 0.25, TPOT: 0.10, TPOT99: 0.25}
THRESHOLDS: dict[str, dict[str, float]] = {
    "queued": BASE,
    "stalled": {THRU: 0.10, TTFT: 0.15, TPOT: 0.10},
    "light": {THRU: 0.10, TPOT: 0.10, TPOT99: 0.25},
    "open": {THRU: 0.10, TPOT99: 0.25},
    "open_stalled": {THRU: 0.10, TPOT: 0.15},
    "spec_light": {THRU: 0.10, TPOT: 0.12, TPOT99: 0.25},
    "spec_open": {THRU: 0.10, TPOT: 0.12, TTFT99: 0.25, TPOT99: 0.25},
}
# Misses beyond the repeat noise: (kind, metric) -> (bound, cause). Bounds are the
# measured misses rounded up, so that the test still fails if they grow.
LOW_LOAD_TTFT = (
    "TTFT at low load is 60-120 ms and predicted 25-55 ms short: time the step log does not"
    " see (most likely the HTTP/API-server path before the engine; not measured separately)"
)
FAST_SMALL_BATCH = (
    "machine speed drift: r0.8 and r1.4 (recorded 19:58-20:06) stepped 15-20% faster at"
    " equal batch and context than every other run (1 request: 6.5 vs 7.9-8.2 ms); the"
    " r1.4 repeat (20:48) has the usual speed and is predicted within 3%"
)
TAIL_STALL = (
    "p99 of 64-96 requests is the worst 1-2 requests: single 0.4-1.9 s TTFT outliers at low load"
)
STALL = "the stall outside the engine in this repeat (see above)"
KNOWN_GAPS: dict[tuple[str, str], tuple[float, str]] = {
    ("stalled", TTFT99): (0.55, STALL),
    ("stalled", TPOT99): (0.80, STALL),
    ("light", TTFT): (0.55, LOW_LOAD_TTFT),
    ("light", TTFT99): (0.80, TAIL_STALL),
    ("open", TTFT): (0.60, LOW_LOAD_TTFT),
    ("open", TTFT99): (3.00, TAIL_STALL + "; at 1.4 req/s the slower simulated steps queue more"),
    ("open", TPOT): (0.35, FAST_SMALL_BATCH),
    ("open_stalled", TTFT): (0.40, LOW_LOAD_TTFT + "; the r1.4 repeats differ 2.2x"),
    ("open_stalled", TTFT99): (0.30, TAIL_STALL),
    ("open_stalled", TPOT99): (
        0.50,
        "two requests' tokens all arrived at the same instant after 6 s: a delivery stall",
    ),
    ("spec_light", TTFT): (0.45, LOW_LOAD_TTFT),
    ("spec_light", TTFT99): (0.35, LOW_LOAD_TTFT),
    ("spec_open", TTFT): (
        0.60,
        "at 1.0 req/s the MTP server runs near saturation (~95%): mean queueing is very sensitive",
    ),
}


def _error(rows: pd.DataFrame, metric: str) -> float:
    col = "err_spread" if metric == TPOT99 else "err_mean"  # p99 TPOT: step-time spread
    return float(rows.loc[metric, col])


@pytest.fixture(scope="module")
def table() -> pd.DataFrame:
    plan = [(FIT, FIT), (MTP_FIT, MTP_FIT)] + [(r, f) for r, (f, _) in PREDICTED.items()]
    return out_of_sample_table(RUNS, plan)


def test_every_run_was_recorded_quiet(table: pd.DataFrame) -> None:
    assert (table["load_before"] < 1.0).all()
    assert (table["others_cores"] < 0.5).all()  # other processes' mean CPU while it ran


def test_fit_runs_in_sample(table: pd.DataFrame) -> None:
    for fit in (FIT, MTP_FIT):
        rows = table[table["run"] == fit].set_index("metric")
        assert rows["in_sample"].all()
        for metric in (THRU, TTFT, TPOT):
            assert abs(_error(rows, metric)) < 0.03, (fit, metric)


@pytest.mark.parametrize("run", sorted(PREDICTED))
def test_predicted_run_within_thresholds(table: pd.DataFrame, run: str) -> None:
    fit, kind = PREDICTED[run]
    rows = table[table["run"] == run].set_index("metric")
    assert not rows["in_sample"].any() and (rows["fit"] == fit).all()
    for metric in (THRU, TTFT, TTFT99, TPOT, TPOT99):
        err = _error(rows, metric)
        if metric in THRESHOLDS[kind]:
            limit, why = THRESHOLDS[kind][metric], "threshold"
        else:
            limit, why = KNOWN_GAPS[(kind, metric)]
        assert abs(err) <= limit, f"{run} {metric}: {err:+.1%} (limit {limit:.0%}: {why})"


def test_every_metric_has_a_threshold_or_a_stated_gap() -> None:
    for kind, limits in THRESHOLDS.items():
        for metric in (THRU, TTFT, TTFT99, TPOT, TPOT99):
            assert (metric in limits) != ((kind, metric) in KNOWN_GAPS), (kind, metric)


def test_spec_runs_use_the_fit_runs_acceptance(table: pd.DataFrame) -> None:
    fit_summary = json.loads((RUNS / MTP_FIT / "summary.json").read_text())["summary"]
    acc = fit_acceptance(fit_summary, 2)
    assert 0.0 <= acc.conditional[0] < 0.01  # random-weight MTP head: ~0.2% accepted
    for run in ("mtp_c4_b512_sharegpt", "mtp_r1.0_b512_sharegpt"):
        row = table[(table["run"] == run) & (table["metric"] == "mean_acceptance_len_tok")]
        assert abs(float(row["err_mean"].iloc[0])) < 0.01


def test_a_slower_step_model_fails_the_thresholds() -> None:
    fitted = fit_step_time(step_log(RUNS / FIT))
    slow = dataclasses.replace(fitted, coef=tuple(1.3 * c for c in fitted.coef))
    run = RUNS / "c16_b128_sharegpt"
    observed = json.loads((run / "summary.json").read_text())["summary"]
    pred = predict_run(run, slow)
    err = pred[THRU] / observed[THRU] - 1
    assert abs(err) > THRESHOLDS["queued"][THRU], f"{err:+.1%}"


def test_fit_acceptance_from_counters() -> None:
    acc = fit_acceptance({"spec_num_drafts": 10, "spec_accepted_per_pos": [5, 2]}, 2)
    assert acc.conditional == pytest.approx((0.5, 0.4))
    with pytest.raises(ValueError, match="spec_num_drafts=0"):
        fit_acceptance({"spec_num_drafts": 0, "spec_accepted_per_pos": []}, 2)


def test_table_is_deterministic(table: pd.DataFrame) -> None:
    again = out_of_sample_table(RUNS, [(FIT, FIT), ("c4_b512_sharegpt", FIT)])
    first = table[table["run"].isin([FIT, "c4_b512_sharegpt"])].reset_index(drop=True)
    pd.testing.assert_frame_equal(first, again)
