"""End-to-end behaviour of the SimPy engine with a constant step time."""

from __future__ import annotations

import dataclasses

import numpy as np
import pandas as pd
import pytest
from factories import ConstantStepTime, synthetic_table

from capsim.config import EngineConfig, LoadConfig, SimConfig, SpecDecodeConfig
from capsim.core.acceptance import expected_tokens_per_step
from capsim.simulate import simulate
from capsim.traces.table import RequestTable


def _cfg(**kw) -> SimConfig:  # type: ignore[no-untyped-def]
    engine = kw.pop("engine", EngineConfig(gmu=0.9))
    spec = kw.pop("spec", SpecDecodeConfig(num_spec_tok=0))
    load = kw.pop("load", LoadConfig(concurrency=4, num_requests=3))
    kw.setdefault("gpu", "B200")  # the published GPU these cases were sized on
    return SimConfig(engine=engine, spec=spec, load=load, **kw)


def test_three_request_timeline() -> None:
    """k=0, 10 ms steps, closed loop of 2: r0 (prompt 5, 3 out) and r1 (prompt 5, 2 out)
    are sent at t=0 and prefilled together in step 1 (first tokens at 10 ms); r1
    finishes at 20 ms, which sends r2 at 20 ms; r2 is prefilled in step 3 (t 20-30 ms)
    while r0 takes its last token at 30 ms; r2 finishes at 40 ms."""
    table = RequestTable(name="t", prompt_tok=[5, 5, 5], output_tok=[3, 2, 2])
    res = simulate(
        _cfg(
            engine=EngineConfig(gmu=0.9, async_scheduling=False),
            load=LoadConfig(concurrency=2, num_requests=3),
        ),
        workload=table,
        cost=ConstantStepTime(0.01),
    )
    r = res.requests.set_index("req_id")
    timeline = [
        (rid, event, round(float(r.loc[rid, col]), 6))
        for rid in ("r0", "r1", "r2")
        for event, col in (
            ("send", "send_s"),
            ("first_token", "first_token_s"),
            ("finish", "finish_s"),
        )
    ]
    assert timeline == [
        ("r0", "send", 0.0),
        ("r0", "first_token", 0.01),
        ("r0", "finish", 0.03),
        ("r1", "send", 0.0),
        ("r1", "first_token", 0.01),
        ("r1", "finish", 0.02),
        ("r2", "send", 0.02),
        ("r2", "first_token", 0.03),
        ("r2", "finish", 0.04),
    ]
    assert r.loc["r0", "tpot_s"] == pytest.approx(0.01)
    assert res.summary["duration_s"] == pytest.approx(0.04)
    assert res.summary["output_throughput_tok_per_s"] == pytest.approx(7 / 0.04)


def test_three_request_timeline_async() -> None:
    """The same three requests with vLLM's async scheduling (two batches in flight):
    step 3 was scheduled (at 10 ms, after step 1's output) before r1's finish in step 2 was
    seen, and step 4 (at 20 ms, right after step 2's output) before r2, sent at 20 ms,
    reached the engine; r0 certainly finishes in step 3, so step 4 has nothing; r2 is
    scheduled once step 3's output is back (30 ms): first token at 40 ms, finish at 50 ms."""
    table = RequestTable(name="t", prompt_tok=[5, 5, 5], output_tok=[3, 2, 2])
    res = simulate(
        _cfg(
            engine=EngineConfig(gmu=0.9, async_scheduling=True),
            load=LoadConfig(concurrency=2, num_requests=3),
        ),
        workload=table,
        cost=ConstantStepTime(0.01),
    )
    r = res.requests.set_index("req_id")
    got = {
        rid: tuple(round(float(r.loc[rid, c]), 6) for c in ("send_s", "first_token_s", "finish_s"))
        for rid in ("r0", "r1", "r2")
    }
    assert got == {"r0": (0.0, 0.01, 0.03), "r1": (0.0, 0.01, 0.02), "r2": (0.02, 0.04, 0.05)}


def test_async_replacement_waits_two_steps() -> None:
    """Closed loop of 16 on a pool that holds them all, 5 ms steps: sync admits a
    replacement in the step after its predecessor's finish (no queueing); async in the step
    after next (vLLM has scheduled the next step before the finish is processed, and the
    one after before the client's new request arrives): 2 steps (10 ms) of queue."""
    table = synthetic_table(200, seed=1)
    for async_on, want in ((False, 0.0), (True, 0.01)):
        res = simulate(
            _cfg(
                engine=EngineConfig(gmu=0.9, async_scheduling=async_on),
                spec=SpecDecodeConfig(),
                load=LoadConfig(concurrency=16, num_requests=200),
            ),
            workload=table,
            cost=ConstantStepTime(0.005),
        )
        queue = (res.requests["first_scheduled_s"] - res.requests["send_s"]).round(9)
        assert float(queue.max()) == want
        assert float(queue.iloc[:16].max()) == 0.0  # the first 16 meet an idle engine
        assert res.summary["peak_running"] == 16


def test_huge_pool_closed_loop_has_no_queueing() -> None:
    table = synthetic_table(200, seed=1)
    res = simulate(
        _cfg(
            engine=EngineConfig(gmu=0.9, async_scheduling=False),
            spec=SpecDecodeConfig(),
            load=LoadConfig(concurrency=16, num_requests=200),
            gpu="B200",  # the 178 GiB GPU: the pool holds all 16 requests
        ),
        workload=table,
        cost=ConstantStepTime(0.005),
    )
    queue = res.requests["first_scheduled_s"] - res.requests["send_s"]
    assert float(queue.max()) == 0.0
    assert res.summary["num_preemptions"] == 0
    assert res.summary["peak_running"] == 16
    # acceptance draws follow the configured model (3.2 tokens/step for k=3)
    assert res.summary["mean_acceptance_len_tok"] == pytest.approx(
        expected_tokens_per_step(SpecDecodeConfig()), rel=0.03
    )


def test_open_loop_single_server_matches_md1_queue() -> None:
    """max_num_seqs=1, k=0, L output tokens, constant step tau: each request holds the
    server for exactly L steps (1 prefill + L-1 decodes), so the engine is an M/D/1
    queue with D = L * tau. Pollaczek-Khinchine: Wq = rho * D / (2 (1 - rho)).
    Tolerance 10% on the mean wait over 6000 Poisson arrivals."""
    n, out_len, tau, rho = 6000, 4, 0.01, 0.7
    service_s = out_len * tau
    rate = rho / service_s
    table = RequestTable(name="md1", prompt_tok=np.full(n, 8), output_tok=np.full(n, out_len))
    res = simulate(
        _cfg(
            engine=EngineConfig(gmu=0.9, max_num_seqs=1),
            load=LoadConfig(mode="rate", rate_req_per_s=rate, num_requests=n),
            seed=3,
        ),
        workload=table,
        cost=ConstantStepTime(tau),
    )
    wait = (res.requests["first_scheduled_s"] - res.requests["send_s"]).mean()
    theory = rho * service_s / (2 * (1 - rho))
    assert wait == pytest.approx(theory, rel=0.10)
    assert res.summary["peak_running"] == 1


def _tight_point(commit: str, gmu: float, seed: int = 0) -> dict:  # type: ignore[type-arg]
    table = synthetic_table(300, seed=seed, prompt=(500, 4000), output=(100, 600))
    res = simulate(
        _cfg(
            engine=EngineConfig(gmu=gmu),
            spec=SpecDecodeConfig(commit=commit),  # type: ignore[arg-type]
            load=LoadConfig(concurrency=256, num_requests=300),
            seed=seed,
        ),
        workload=table,
    )
    return res.summary


def test_monotone_in_gmu_and_commit_mode() -> None:
    """Higher gmu never admits fewer; reconstruct never admits fewer than store-all."""
    peaks = {}
    for commit in ("storeall", "reconstruct"):
        for gmu in (0.6, 0.75, 0.9):
            peaks[commit, gmu] = _tight_point(commit, gmu)["peak_running"]
    for commit in ("storeall", "reconstruct"):
        seq = [peaks[commit, g] for g in (0.6, 0.75, 0.9)]
        assert seq == sorted(seq), (commit, seq)
    for gmu in (0.6, 0.75, 0.9):
        assert peaks["reconstruct", gmu] >= peaks["storeall", gmu]
    assert peaks["storeall", 0.6] < 256  # the point is memory-bound for store-all


def test_same_seed_same_parquet(tmp_path) -> None:  # type: ignore[no-untyped-def]
    from capsim.io.result_files import write_result

    table = synthetic_table(150, seed=2)
    cfg = _cfg(
        spec=SpecDecodeConfig(),
        load=LoadConfig(mode="rate", rate_req_per_s=20.0, num_requests=150),
        seed=7,
    )
    for name in ("a", "b"):
        write_result(tmp_path / name, simulate(cfg, workload=table))
    for f in ("requests.parquet", "steps.parquet"):
        pd.testing.assert_frame_equal(
            pd.read_parquet(tmp_path / "a" / f), pd.read_parquet(tmp_path / "b" / f)
        )
        assert (tmp_path / "a" / f).read_bytes() == (tmp_path / "b" / f).read_bytes()
    other = simulate(dataclasses.replace(cfg, seed=8), workload=table)
    first = pd.read_parquet(tmp_path / "a" / "requests.parquet")
    assert not other.requests["send_s"].equals(first["send_s"])


def test_matched_points_share_arrivals_and_acceptance() -> None:
    table = synthetic_table(100, seed=4)
    load = LoadConfig(mode="rate", rate_req_per_s=50.0, num_requests=100)
    a = simulate(_cfg(spec=SpecDecodeConfig(commit="storeall"), load=load), workload=table)
    b = simulate(_cfg(spec=SpecDecodeConfig(commit="reconstruct"), load=load), workload=table)
    assert a.requests["release_s"].equals(b.requests["release_s"])
    assert a.summary["mean_acceptance_len_tok"] == pytest.approx(
        b.summary["mean_acceptance_len_tok"], rel=0.02
    )


@pytest.mark.parametrize("k", [0, 3])
def test_priced_tokens_are_the_scheduled_tokens(k: int) -> None:
    """The step-time model is handed exactly the tokens the scheduler scheduled: a 1-token
    prompt is a 1-token chunk (not a k+1 verify window) and a window clipped by the budget
    is the chunk it is. Regression for 'tok: 16456 is above the measured grid' (issue 15)."""
    rng = np.random.default_rng(1)
    n = 300
    prompts = np.where(rng.random(n) < 0.3, 1, rng.integers(2, 200, n))
    table = RequestTable(name="t", prompt_tok=prompts, output_tok=rng.integers(1, 40, n))
    budget = 97  # not a multiple of the window: verify windows get clipped
    cost = ConstantStepTime(0.01)
    res = simulate(
        _cfg(
            engine=EngineConfig(gmu=0.9, max_num_batched_tokens=budget, max_num_seqs=64),
            spec=SpecDecodeConfig(num_spec_tok=k),
            load=LoadConfig(concurrency=64, num_requests=n),
        ),
        workload=table,
        cost=cost,
    )
    w = k + 1
    priced = [s.num_decode_req * w + s.num_prefill_tok for s in cost.shapes]
    steps = res.steps
    assert priced == steps["num_scheduled_tok"].tolist()
    assert max(priced) <= budget
    assert (steps["num_scheduled_tok"] == budget).any()  # the budget binds somewhere
