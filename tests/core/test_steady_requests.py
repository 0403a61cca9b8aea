"""Steady requests with prefix caching on (``HybridKVCacheCoordinator.steady_mask``): a
running request the mask calls steady is one whose ``align_split`` passes its chunk
through and whose ``allocate`` changes nothing (no block taken, freed, moved or hashed,
no per-request memo touched). Checked on every allocation of reference-path runs
(sequential loop, one step at a time), where every request is still allocated."""

from __future__ import annotations

import numpy as np
import pytest
from factories import reference_paths, synthetic_table

from capsim.config import EngineConfig, LoadConfig, SimConfig, SpecDecodeConfig
from capsim.core.block_pool import BlockPool
from capsim.core.hybrid_coordinator import HybridKVCacheCoordinator
from capsim.core.kv_blocks import NO_HIT
from capsim.core.request import Status
from capsim.engine import EngineSim
from capsim.simulate import simulate


def _state(coord: HybridKVCacheCoordinator, slot: int) -> tuple:  # type: ignore[type-arg]
    """Everything ``allocate`` may change for ``slot`` (the pool: see ``_count_pool_writes``)."""
    pool = coord.pool
    per_mgr = [
        (
            list(m.req_blocks.get(slot, [])),
            m.num_cached.get(slot),
            getattr(m, "retired", {}).get(slot),
            getattr(m, "last_state_idx", {}).get(slot),
            slot in getattr(m, "allocated", ()),
            frozenset(getattr(m, "cached_this_step", ())),
        )
        for m in (*coord._gdn_mgrs, *coord._attn_mgrs)
    ]
    gauges = (pool.num_free_blocks, pool.num_cached_free, pool.num_evictions)
    return per_mgr, list(coord._pending.get(slot, [])), gauges


def _count_pool_writes(monkeypatch: pytest.MonkeyPatch, writes: list[str]) -> None:
    """Every pool method that changes a block (a call with no block is not a write)."""
    for name in ("get_new_blocks", "free_blocks", "touch", "cache_block"):
        real = getattr(BlockPool, name)

        def wrapped(self, arg, *rest, _real=real, _name=name):  # type: ignore[no-untyped-def]
            if _name in ("free_blocks", "touch"):
                arg = list(arg)
                if not any(arg):  # empty, or the null block only
                    return _real(self, arg, *rest)
            elif _name == "get_new_blocks" and arg == 0:
                return _real(self, arg, *rest)
            writes.append(_name)
            return _real(self, arg, *rest)

        monkeypatch.setattr(BlockPool, name, wrapped)


def _cfg(
    workload: str, engine: EngineConfig, spec: SpecDecodeConfig, n: int, conc: int
) -> SimConfig:
    return SimConfig(
        gpu="B200",
        workload=workload,
        engine=engine,
        spec=spec,
        load=LoadConfig(concurrency=conc, num_requests=n),
        step_time="calibrated",
        seed=4,
    )


CASES = {
    # a small pool: preemptions, evictions, hits on a shared 2,500-token system prompt
    "system-prompt-small-pool": _cfg(
        "sharegpt+sys=4,2500",
        EngineConfig(gmu=0.9, enable_prefix_caching=True, num_gpu_blocks_override=150),
        SpecDecodeConfig(commit="storeall"),
        120,
        48,
    ),
    # conversation turns restart from their history's checkpoints; pending blocks
    "multiturn-deferred": _cfg(
        "sharegpt-multiturn+sys=2,2500",
        EngineConfig(gmu=0.9, enable_prefix_caching=True),
        SpecDecodeConfig(commit="deferred"),
        120,
        24,
    ),
    # running requests still prefilling (the align split cuts their chunks)
    "chunked-no-spec": _cfg(
        "sharegpt",
        EngineConfig(
            gmu=0.9, enable_prefix_caching=True, max_num_batched_tokens=512, max_num_seqs=64
        ),
        SpecDecodeConfig(num_spec_tok=0),
        100,
        32,
    ),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_a_steady_request_is_left_unchanged(monkeypatch: pytest.MonkeyPatch, case: str) -> None:
    seen = {"steady": 0, "changed": 0}
    writes: list[str] = []
    _count_pool_writes(monkeypatch, writes)
    real_allocate = HybridKVCacheCoordinator.allocate
    real_split = HybridKVCacheCoordinator.align_split

    def steady(self, req, num_new: int) -> bool:  # type: ignore[no-untyped-def]
        slots, new = np.array([req.slot]), np.array([num_new])
        return bool(self.steady_mask(req._store.cols, slots, new, self.layout.lookahead_tok)[0])

    def split(self, req, num_new_tok, hit_tok=0):  # type: ignore[no-untyped-def]
        got = real_split(self, req, num_new_tok, hit_tok)
        if hit_tok == 0 and req.status == Status.RUNNING and steady(self, req, num_new_tok):
            assert got == num_new_tok, (req, num_new_tok, got)
        return got

    def allocate(self, req, num_new, la, hit=NO_HIT):  # type: ignore[no-untyped-def]
        if hit is not NO_HIT or req.status != Status.RUNNING:
            return real_allocate(self, req, num_new, la, hit)
        is_steady = steady(self, req, num_new)
        before = _state(self, req.slot)
        counts = (req.num_attn_blocks, req.num_gdn_blocks)
        del writes[:]
        added = real_allocate(self, req, num_new, la, hit)
        if is_steady:
            assert added is not None and (added.num_attn_blocks, added.num_gdn_blocks) == (0, 0)
            assert not writes, (req, writes)
            assert _state(self, req.slot) == before, req
            assert (req.num_attn_blocks, req.num_gdn_blocks) == counts
            seen["steady"] += 1
        else:
            seen["changed"] += 1
        return added

    monkeypatch.setattr(HybridKVCacheCoordinator, "allocate", allocate)
    monkeypatch.setattr(HybridKVCacheCoordinator, "align_split", split)
    reference_paths(monkeypatch)
    res = simulate(CASES[case])
    # the mask is not trivially False: most running allocations are steady
    assert seen["steady"] > 2 * seen["changed"] > 0, seen
    if case != "chunked-no-spec":
        assert res.summary["prefix_cache_hits_tok"] > 0
    if case == "system-prompt-small-pool":
        assert res.summary["num_preemptions"] > 0


def test_steady_caps_are_reset_when_a_row_is_freed(monkeypatch: pytest.MonkeyPatch) -> None:
    """A freed (finished or preempted) request's row is never steady, so a request later
    stored in the same row is allocated on its first steps."""
    table = synthetic_table(40, seed=1, prompt=(50, 3000), output=(5, 300))
    cfg = _cfg(
        "sharegpt",
        EngineConfig(gmu=0.9, enable_prefix_caching=True),
        SpecDecodeConfig(commit="storeall"),
        40,
        8,
    )
    seen = {}
    real_run = EngineSim.run

    def run(self):  # type: ignore[no-untyped-def]
        real_run(self)
        seen["sim"] = self

    monkeypatch.setattr(EngineSim, "run", run)
    simulate(cfg, workload=table)
    coord = seen["sim"].scheduler.kv.coordinator
    assert (coord._steady == -1).all()  # every request finished: every row freed


def test_nothing_is_steady_without_prefix_caching() -> None:
    """The caching-off coordinator keeps no caps: it reports no steady request and no steady
    decode window, so a caller would allocate every request (the conservative answer)."""
    from capsim.core.kv_coordinator import KVCacheCoordinatorNoPrefixCache

    coord = KVCacheCoordinatorNoPrefixCache.__new__(KVCacheCoordinatorNoPrefixCache)
    slots = np.array([3, 5, 8])
    mask = coord.steady_mask(None, slots, np.ones(3, dtype=np.int64), 3)  # type: ignore[arg-type]
    assert mask.dtype == bool and mask.shape == (3,) and not mask.any()
    ctx = coord.steady_context_tok(slots, 4, 3)
    assert ctx.tolist() == [-1, -1, -1]
