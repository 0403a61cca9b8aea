"""Bounded memory (issue 20): what a run keeps does not grow with its request count beyond
what was asked for, and the exact path's results are unchanged.

- streaming acceptance draws are the pre-drawn ones, value for value;
- quantiles from (value, count) runs are numpy's, bit for bit;
- a streaming run's summary equals the exact run's (the ITL mean to the last bits);
- after a run the request store holds the requests in flight, not all of them, the
  acceptance window is freed, and a streaming run keeps no step or request table;
- the up-front estimate refuses, with the numbers, a run that cannot fit.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
from factories import run_keeping_engine

from capsim.acceptance_stream import StreamingAcceptanceDraws
from capsim.config import EngineConfig, LoadConfig, SimConfig, SpecDecodeConfig
from capsim.core.acceptance import AcceptanceDraws
from capsim.simulate import simulate
from capsim.streaming_metrics import ItlRuns, weighted_median, weighted_percentile


def _cfg(n: int, **load) -> SimConfig:  # type: ignore[no-untyped-def]
    return SimConfig(
        model="qwen3.5-35b-a3b",
        gpu="h200",
        # prefix caching off (the published setup; vLLM 0.33's default turns it on)
        engine=load.pop("engine", EngineConfig(enable_prefix_caching=False)),
        spec=SpecDecodeConfig(),
        workload="sharegpt",
        load=LoadConfig(num_requests=n, **load),
        seed=5,
    )


@pytest.mark.parametrize("chunk", [1, 7, 300, 10_000])
def test_streaming_draws_are_the_predrawn_ones(chunk: int) -> None:
    rng = np.random.default_rng(0)
    out = rng.integers(1, 400, size=1500)
    spec = SpecDecodeConfig(tree_widths=(2, 2, 1))
    a = AcceptanceDraws(spec, out, np.random.default_rng(9))
    b = StreamingAcceptanceDraws(spec, out, np.random.default_rng(9), chunk_requests=chunk)
    used = np.zeros(out.size, dtype=np.int64)
    for lo in range(0, 1500, 100):
        idx = np.arange(lo, lo + 100)
        steps = rng.integers(0, 300, size=100)
        grid = steps[None, :] + np.arange(4)[:, None]
        assert np.array_equal(a.draw_many(idx, steps), b.draw_many(idx, steps))
        assert np.array_equal(a.draw_many(idx[None, :], grid), b.draw_many(idx[None, :], grid))
        if lo >= 200:  # requests finish some time after they start
            fin = np.arange(lo - 200, lo - 100)
            used[fin] = rng.integers(0, 250, size=100)
            b.finished(fin, used[fin])
    fin = np.arange(1300, 1500)
    used[fin] = rng.integers(0, 250, size=200)
    b.finished(fin, used[fin])
    assert a.mean_tokens_over_used(used) == b.mean_tokens_over_used()
    assert b._window.size == 0  # every chunk freed


@pytest.mark.parametrize("seed", range(12))
def test_run_quantiles_are_numpys(seed: int) -> None:
    rng = np.random.default_rng(seed)
    n = int(rng.integers(1, 60))
    values = np.round(rng.exponential(size=n), int(rng.integers(1, 4)))
    counts = rng.integers(1, 50, size=n)
    expanded = np.repeat(values, counts)
    order = np.argsort(values, kind="stable")
    v, c = values[order], counts[order]
    for q in (50.0, 90.0, 99.0, 99.9, 0.0, 100.0):
        assert weighted_percentile(v, c, q) == float(np.percentile(expanded, q)), q
    assert weighted_median(v, c) == float(np.median(expanded))
    runs = ItlRuns()
    for chunk in np.array_split(rng.permutation(expanded), 7):
        runs.add(chunk)
    stats = runs.stats("itl")
    assert stats["itl_p99_s"] == float(np.percentile(expanded, 99))
    assert stats["itl_median_s"] == float(np.median(expanded))
    assert math.isclose(stats["itl_mean_s"], float(expanded.mean()), rel_tol=1e-12)


@pytest.mark.parametrize(
    "load",
    [
        {"mode": "rate", "rate_req_per_s": 40.0},
        {
            "mode": "concurrency",
            "concurrency": 300,
            "engine": EngineConfig(gmu=0.62, max_num_seqs=256, enable_prefix_caching=False),
        },
        {
            "mode": "rate",
            "rate_req_per_s": 30.0,
            "engine": EngineConfig(enable_prefix_caching=True),
        },
    ],
    ids=["open-loop", "preempting", "prefix-caching"],
)
def test_streaming_summary_equals_the_exact_one(load) -> None:  # type: ignore[no-untyped-def]
    cfg = _cfg(300, **load)
    exact = simulate(cfg)
    stream = simulate(cfg, streaming=True)
    a, b = exact.summary, stream.summary
    assert set(b) - set(a) == {"mean_prompt_tok", "mean_output_tok", "total_input_tok"}
    for key, value in a.items():
        if key == "itl_mean_s":
            assert math.isclose(b[key], value, rel_tol=1e-12)
        elif isinstance(value, float) and math.isnan(value):
            assert math.isnan(b[key]), key
        else:
            assert b[key] == value, key
    assert stream.requests.empty and stream.steps.empty  # nothing kept unless asked
    kept = simulate(cfg, streaming=True, keep_requests=True, keep_steps=True)
    assert kept.requests.equals(exact.requests) and kept.steps.equals(exact.steps)


def test_state_after_a_run_is_the_requests_in_flight(monkeypatch) -> None:  # type: ignore[no-untyped-def]
    cfg = _cfg(1500, mode="rate", rate_req_per_s=60.0)
    res, sim = run_keeping_engine(monkeypatch, cfg, streaming=True)
    in_flight = int(res.summary["peak_running"]) + int(res.summary["peak_waiting"])
    # every request had its own row before issue 20 (1500 here)
    assert len(sim.scheduler.store.handles) <= in_flight + 64
    assert sim.recorder.num_steps == res.summary["num_steps"] and res.steps.empty
    assert sim.acceptance._window.size == 0


def test_estimate_refuses_a_run_that_cannot_fit() -> None:
    cfg = _cfg(10_000_000, mode="rate", rate_req_per_s=60.0)
    with pytest.raises(
        ValueError,
        match=r"simulate -n 10000000 needs at least [0-9.]+ GiB .* 0\.50 GiB is available",
    ):
        simulate(cfg, streaming=False, memory_limit_bytes=2**29)
