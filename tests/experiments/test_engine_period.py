"""The async step-period model (capsim.cost.engine_period) and its fit (PLAN.md 2026-12-02
05:20 and 05:44): the shipped constants are the fit of the committed step logs, the model
is max(host, GPU) under async scheduling and the sync engine term is untouched."""

from __future__ import annotations

from dataclasses import asdict, replace
from pathlib import Path

import numpy as np
import pytest
from factories import decode_shape, prefill_shape

from capsim.config import EngineConfig, SimConfig, SpecDecodeConfig
from capsim.cost.engine_overhead import HostBoundStepTime
from capsim.cost.engine_period import (
    CLIENT_ROUND_TRIP_S,
    MEASURED_H200_VLLM026_ASYNC,
    AsyncPeriodFit,
    AsyncStepPeriod,
    get_async_period,
)
from capsim.live.engine_period_fit import FIT_RUNS, fit_async_period, run_periods

RUNS = Path(__file__).resolve().parents[2] / "experiments" / "engine" / "runs"
FIT = MEASURED_H200_VLLM026_ASYNC


def _cfg(k: int, async_scheduling: bool) -> SimConfig:
    eng = EngineConfig(
        vllm_version="0.26",
        engine_overhead="measured-h200-vllm0.26",
        async_scheduling=async_scheduling,
    )
    return SimConfig(
        model="qwen3.5-35b-a3b",
        gpu="H200",
        engine=eng,
        spec=SpecDecodeConfig(num_spec_tok=k),
        step_time="calibrated",
    )


def _model(k: int, async_scheduling: bool = True):  # type: ignore[no-untyped-def]
    from capsim.cost.factory import build_step_time_model
    from capsim.gpus import get_gpu

    cfg = _cfg(k, async_scheduling)
    return build_step_time_model(cfg, cfg.model_spec(), get_gpu(cfg.gpu))


def test_shipped_constants_are_the_fit_of_the_committed_step_logs():
    got = fit_async_period(RUNS)
    assert asdict(got) == pytest.approx(asdict(FIT), rel=1e-9)
    assert FIT.fit_runs == FIT_RUNS
    assert len(FIT_RUNS) == 4  # PLAN.md 05:20: 4 of the 20 committed runs


def test_fit_reproduces_its_runs_mean_periods():
    """In sample: a one-request FULL step at k = 0, 1, 3 costs its fit run's mean period."""
    for run, k in (("g090_k0_rand_c1", 0), ("g090_k1_rand_c1", 1), ("g090_k3_rand_c1_steps", 3)):
        df = run_periods(RUNS / run)
        full = df[df["mode"] == "FULL"]
        m = _model(k)
        if k:
            assert m.host_s(decode_shape(1, k)) == pytest.approx(full["period_s"].mean(), rel=1e-9)
        else:  # no host floor at k = 0: the kernel price less the excess
            got = np.mean([m.base.step_time_s(decode_shape(1, 0))]) - FIT.kernel_excess_s
            assert 3.5e-3 < got < 5.5e-3  # the real k=0 one-request period: 4.42 ms mean


def test_async_period_is_max_of_host_and_gpu_not_their_sum():
    m = _model(3)
    assert isinstance(m, AsyncStepPeriod)
    big = decode_shape(128, 3)  # 512 tokens: FULL, GPU-bound
    assert m.step_time_s(big) == pytest.approx(m.base.step_time_s(big) - FIT.kernel_excess_s)
    one = decode_shape(1, 3)  # host-bound: the MTP FULL floor
    assert m.step_time_s(one) == pytest.approx(FIT.full_host_s(3))
    assert m.step_time_s(prefill_shape(1024, 3)) == pytest.approx(FIT.eager_host_s)
    assert m.step_time_s(prefill_shape(128, 3)) == pytest.approx(FIT.piecewise_host_s)
    # no delta on top: a loaded step is never above its kernel price
    for r in (16, 64, 128):
        assert m.step_time_s(decode_shape(r, 3)) <= max(
            m.base.step_time_s(decode_shape(r, 3)), 0.0111
        )


def test_sync_keeps_the_additive_engine_term():
    m = _model(3, async_scheduling=False)
    assert isinstance(m, HostBoundStepTime)
    assert not getattr(m, "output_deferred", False)
    s = decode_shape(64, 3)
    assert m.step_time_s(s) == max(m.base.step_time_s(s), 0.0) + m.fit.delta_s


def test_full_host_floor_is_a_line_in_k():
    assert FIT.full_host_s(0) == 0.0
    assert FIT.full_host_s(2) == pytest.approx(FIT.full_spec_host_s + FIT.full_spec_host_s_per_k)
    assert 7e-3 < FIT.full_host_s(1) < FIT.full_host_s(3) < 12e-3
    with pytest.raises(ValueError, match="num_spec_tok=-1"):
        FIT.full_host_s(-1)


def test_bad_constants_and_names_are_refused():
    with pytest.raises(ValueError, match=r"eager_host_s=-1\.0"):
        replace(FIT, eager_host_s=-1.0)
    with pytest.raises(ValueError, match="kernel_excess_s=nan"):
        AsyncPeriodFit(**{**asdict(FIT), "kernel_excess_s": float("nan")})
    with pytest.raises(ValueError, match=r"engine\.engine_overhead='x'"):
        get_async_period("x")


def test_deferred_output_shifts_first_tokens_by_one_step():
    """A lone request at concurrency 1: TTFT is the client round trip, the prefill period
    and the next decode period (the real logs' t_done_s - t_sched_s); ITLs stay one period
    each. The second request is sent when the first one's last output is handed over and
    reaches the idle engine one round trip later. With the two-batch pipeline recurrence the
    decode step right after the host-bound prefill is hidden under it (its period is its own
    host floor, 0 at k = 0): the first token is out when the prefill's host work ends."""
    from capsim.simulate import simulate
    from capsim.traces.table import RequestTable

    cfg = _cfg(0, True)
    cfg = replace(cfg, load=replace(cfg.load, mode="concurrency", concurrency=1, num_requests=2))
    wl = RequestTable(name="t", prompt_tok=np.array([1024, 1024]), output_tok=np.array([16, 16]))
    res = simulate(cfg, workload=wl)
    steps = res.steps
    first = res.requests.iloc[0]
    prefill_s, next_s = float(steps["step_s"].iloc[0]), float(steps["step_s"].iloc[1])
    r = CLIENT_ROUND_TRIP_S
    assert r > 0
    assert next_s == 0.0 and prefill_s > 0.1  # eager 1024-token prefill, then a k = 0 decode
    assert first["ttft_s"] == pytest.approx(r + prefill_s + next_s, rel=1e-9)
    second = res.requests.iloc[1]
    assert second["send_s"] == pytest.approx(first["finish_s"], rel=1e-12)
    assert second["first_scheduled_s"] == pytest.approx(second["send_s"] + r, rel=1e-9)
    a, b = simulate(cfg, workload=wl).summary, res.summary
    assert repr(sorted(a.items())) == repr(sorted(b.items()))  # deterministic
