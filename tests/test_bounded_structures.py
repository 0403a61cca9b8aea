"""Bounded memory, structure by structure (issue 20): in a compact streaming run (no
requests table) nothing but ``RequestResults`` (33 bytes per request, the floor for exact
quantiles) and the per-step columns is sized by the request count; with prefix caching on
and in the fleet, store rows are reused too. Sizes are counted (array lengths, objects),
not timed, and compared between runs of different lengths at the same load."""

from __future__ import annotations

import numpy as np
import pytest
from factories import run_keeping_engine

from capsim.acceptance_stream import StreamingAcceptanceDraws
from capsim.config import EngineConfig, LoadConfig, SimConfig, SpecDecodeConfig
from capsim.loadgen import release_times_s
from capsim.simulate import simulate


def _cfg(
    n: int, engine: EngineConfig | None = None, workload: str = "sharegpt", **load
) -> SimConfig:  # type: ignore[no-untyped-def]
    return SimConfig(
        model="qwen3.5-35b-a3b",
        gpu="h200",
        engine=engine or EngineConfig(),
        spec=SpecDecodeConfig(),
        workload=workload,
        load=LoadConfig(num_requests=n, **(load or {"mode": "rate", "rate_req_per_s": 50.0})),
        seed=2,
    )


def _sizes(sim) -> dict[str, int]:  # type: ignore[no-untyped-def]
    """Every per-run structure of the engine except RequestResults and the step columns."""
    acc = sim.acceptance
    return {
        "store_rows": sim.scheduler.store.cols.capacity,
        "handles": len(sim.scheduler.store.handles),
        "stamps": max(getattr(sim, k).size for k in sim._STAMPS),
        "per_index_counters": sim.num_preemptions.size + sim.num_accept_draws_used.size,
        "done_flags": sim._done.size,
        "acceptance_rows": acc.num_held_requests,
        "acceptance_window": acc._window.size,
        "release_block": sim.release_s._block.size,
    }


def test_compact_run_structures_do_not_grow_with_the_request_count(monkeypatch) -> None:  # type: ignore[no-untyped-def]
    from capsim.loadgen import RELEASE_CHUNK

    _, sim_s = run_keeping_engine(monkeypatch, _cfg(800), streaming=True)
    large, sim_l = run_keeping_engine(monkeypatch, _cfg(2400), streaming=True)
    a, b = _sizes(sim_s), _sizes(sim_l)
    in_flight = int(large.summary["peak_running"]) + int(large.summary["peak_waiting"])
    for key in ("store_rows", "handles", "stamps"):
        # a row per request in flight (the store doubles when it grows), never per request
        assert b[key] <= 2 * in_flight + 64, (key, b[key])
        assert b[key] < 2400 // 2, (key, b[key])
    assert b["per_index_counters"] == b["done_flags"] == 0
    assert a["acceptance_rows"] == b["acceptance_rows"] == 0  # every chunk freed
    assert b["release_block"] <= RELEASE_CHUNK
    # the only per-request arrays: RequestResults, 33 bytes per request
    assert sim_l.results.nbytes == 33 * 2400 and sim_s.results.nbytes == 33 * 800
    # per step: duration and pool usage only (16 bytes), the phases' tokens summed
    cols = sim_l.recorder.columns
    assert len(cols.t_start_s) == len(cols.num_emitted_tok) == 0
    assert cols.nbytes == 16 * large.summary["num_steps"]


def test_compact_run_drops_the_workload_table(monkeypatch) -> None:  # type: ignore[no-untyped-def]
    import capsim.simulate as sim_mod

    seen = {}
    real = sim_mod.prepare

    def prepare(*args, **kw):  # type: ignore[no-untyped-def]
        seen["p"] = real(*args, **kw)
        return seen["p"]

    monkeypatch.setattr(sim_mod, "prepare", prepare)
    from capsim.loadgen import ChunkedReleaseTimes

    simulate(_cfg(300), streaming=True)
    p = seen["p"]
    assert p.table is None and p.prompt.dtype == np.int16 and p.output.dtype == np.int16
    assert isinstance(p.release, ChunkedReleaseTimes)
    simulate(_cfg(300), streaming=True, keep_requests=True)
    assert seen["p"].table is not None and seen["p"].prompt.dtype == np.int64


@pytest.mark.parametrize(
    ("workload", "load"),
    [
        ("sharegpt", {"mode": "rate", "rate_req_per_s": 50.0}),
        ("shared-prefix", {"mode": "concurrency", "concurrency": 48}),
    ],
)
def test_prefix_caching_store_is_bounded_by_the_requests_in_flight(
    monkeypatch, workload, load
) -> None:  # type: ignore[no-untyped-def]
    eng = EngineConfig(enable_prefix_caching=True)
    res, sim = run_keeping_engine(monkeypatch, _cfg(1500, eng, workload, **load), streaming=True)
    in_flight = int(res.summary["peak_running"]) + int(res.summary["peak_waiting"])
    # before issue 20's last round every request kept its row (1500 here)
    assert len(sim.scheduler.store.handles) <= 2 * in_flight + 64
    coord = sim.scheduler.kv.coordinator
    assert len(coord._hashes) == len(coord._junction) == 0  # memos dropped at finish
    if workload == "sharegpt":
        # unshared content keyed by add order: a reused row inherits no cached blocks
        assert res.summary["prefix_cache_hits_tok"] == 0


def _coordinator_sizes(coord) -> dict[str, int]:  # type: ignore[no-untyped-def]
    """Per-request memos of the prefix-caching coordinator and its managers."""
    mgrs = (*coord._gdn_mgrs, *coord._attn_mgrs)
    return {
        "memos": len(coord._hashes) + len(coord._junction) + len(coord._pending),
        "block_tables": sum(len(m.req_blocks) + len(m.num_cached) for m in mgrs),
        "gdn_memos": sum(
            len(g.allocated) + len(g.last_state_idx) + len(g.retired) for g in coord._gdn_mgrs
        ),
        "steady_rows": coord._steady.shape[1],
        "cached_keys": len(coord.pool._cached),
    }


def test_compact_prefix_caching_run_is_bounded(monkeypatch) -> None:  # type: ignore[no-untyped-def]
    """Caching on, compact streaming path: the same counts as caching off, and every
    per-request memo of the coordinator and its managers freed at finish."""
    eng = EngineConfig(enable_prefix_caching=True)
    _, sim_s = run_keeping_engine(monkeypatch, _cfg(800, eng), streaming=True)
    large, sim_l = run_keeping_engine(monkeypatch, _cfg(2400, eng), streaming=True)
    b = _sizes(sim_l)
    in_flight = int(large.summary["peak_running"]) + int(large.summary["peak_waiting"])
    for key in ("store_rows", "handles", "stamps"):
        assert b[key] <= 2 * in_flight + 64, (key, b[key])
        assert b[key] < 2400 // 2, (key, b[key])
    assert b["per_index_counters"] == b["done_flags"] == b["acceptance_rows"] == 0
    assert sim_l.results.nbytes == 33 * 2400
    assert sim_l.recorder.columns.nbytes == 16 * large.summary["num_steps"]
    cs, cl = (_coordinator_sizes(s.scheduler.kv.coordinator) for s in (sim_s, sim_l))
    assert cs["memos"] == cl["memos"] == cs["block_tables"] == cl["block_tables"] == 0
    assert cs["gdn_memos"] == cl["gdn_memos"] == 0
    assert cl["steady_rows"] <= max(2 * b["store_rows"], 64)
    assert cl["cached_keys"] <= sim_l.scheduler.kv.pool.num_blocks  # one key per block at most


def test_fleet_reuses_store_rows(monkeypatch) -> None:  # type: ignore[no-untyped-def]
    import capsim.fleet.sim as fleet_mod

    seen = {}
    real = fleet_mod._collect

    def collect(cfg, p, engines, *rest):  # type: ignore[no-untyped-def]
        seen["engines"] = engines
        return real(cfg, p, engines, *rest)

    monkeypatch.setattr(fleet_mod, "_collect", collect)
    res = fleet_mod.simulate_fleet(_cfg(1200), 2, "round_robin")
    assert len(res.requests) == 1200
    for e in seen["engines"]:
        peak = int(
            e.recorder.frame()["num_running"].max() + e.recorder.frame()["num_waiting"].max()
        )
        # every request routed to a replica kept its row before (600 each here)
        assert len(e.scheduler.store.handles) <= 2 * peak + 64 < 600


@pytest.mark.parametrize("n", [1, 9, 1000, 70_000])
@pytest.mark.parametrize("mode", ["rate", "concurrency"])
def test_chunked_release_times_are_release_times_s(n: int, mode: str) -> None:
    from capsim.loadgen import ChunkedReleaseTimes

    load = LoadConfig(
        mode=mode,
        num_requests=n,
        burstiness=0.7,
        **({"rate_req_per_s": 33.0} if mode == "rate" else {"concurrency": 4}),
    )
    want = release_times_s(load, n, np.random.default_rng(11), None)
    got = ChunkedReleaseTimes(load, n, np.random.default_rng(11), chunk=4096)
    assert np.array_equal(np.array([got[i] for i in range(n)]), want)
    assert got._block.size <= 4096


def test_streaming_acceptance_holds_only_its_window() -> None:
    rng = np.random.default_rng(0)
    out = rng.integers(1, 300, size=5000)
    b = StreamingAcceptanceDraws(
        SpecDecodeConfig(), out, np.random.default_rng(1), chunk_requests=500
    )
    for lo in range(0, 5000, 250):
        idx = np.arange(lo, lo + 250)
        b.draw_many(idx, np.zeros(250, dtype=np.int64))
        if lo >= 500:
            b.finished(np.arange(lo - 500, lo - 250), np.ones(250, dtype=np.int64))
        # bookkeeping for the chunks in the window only (before: one offset per request)
        assert b.num_held_requests <= 3 * 500
    b.finished(np.arange(4500, 5000), np.ones(500, dtype=np.int64))
    assert b.num_held_requests == 0 and b._window.size == 0


@pytest.mark.parametrize(
    "load",
    [
        {"mode": "rate", "rate_req_per_s": 50.0},
        {"mode": "concurrency", "concurrency": 64},
        {"mode": "concurrency", "concurrency": 400},  # every request sent at t=0
    ],
)
def test_summed_phase_windows_equal_the_step_tables(load) -> None:  # type: ignore[no-untyped-def]
    """The warm-up/load/cool-down tokens summed while steps are recorded (compact run)
    equal ``phases``' selection over the kept step table, figure for figure."""
    cfg = _cfg(300, **load)
    summed = simulate(cfg, streaming=True).summary
    tabled = simulate(cfg, streaming=True, keep_steps=True).summary
    assert repr(list(summed.items())) == repr(list(tabled.items()))
