"""Prefix caching on tiny pools, block ids checked by hand (as vLLM's own tests do).

Pools have 4-token blocks; block 0 is the null block, the free queue starts 1, 2, ...
Group ids: GDN groups first (0..g-1), then the attention group.
"""

from __future__ import annotations

import numpy as np

from capsim.core.block_pool import BlockPool
from capsim.core.kv_manager import KVCacheManager, PoolLayout
from capsim.core.request import Request
from capsim.core.scheduler import Scheduler, SchedulerConfig


def make(num_blocks: int = 11, gdn: int = 0, k: int = 0, budget: int = 64) -> Scheduler:
    layout = PoolLayout(
        block_size_tok=4,
        num_blocks=num_blocks,
        num_gdn_groups=gdn,
        gdn_slots_per_request=1 + k,
        lookahead_tok=k,
        enable_caching=True,
    )
    cfg = SchedulerConfig(max_num_seqs=8, max_num_batched_tokens=budget, num_spec_tok=k)
    return Scheduler(cfg, KVCacheManager(layout))


def req(i: int, prompt: int, out: int, *segs: tuple[int, int]) -> Request:
    return Request(req_id=f"r{i}", prompt_tok=prompt, max_output_tok=out, index=i, segments=segs)


def drain(s: Scheduler) -> None:
    while s.has_work:
        s.update(s.schedule(), {})


def test_pool_lru_free_queue_and_eviction() -> None:
    pool = BlockPool(6, enable_caching=True)
    a = pool.get_new_blocks(3)
    assert a == [1, 2, 3]
    pool.cache_block(1, "x")
    pool.cache_block(2, "y")
    pool.free_blocks(reversed(a))  # tail first: unhashed 3 to the front, 2 and 1 at the back
    assert pool.free_queue() == [3, 4, 5, 2, 1]
    assert (pool.num_free_blocks, pool.num_cached_free) == (5, 2)
    pool.touch([pool.get_cached_block("x")])  # a hit leaves the free queue
    assert pool.free_queue() == [3, 4, 5, 2]
    assert pool.get_new_blocks(4) == [3, 4, 5, 2]  # 2 was cached: evicted
    assert pool.get_cached_block("y") is None and pool.num_evictions == 1
    assert pool.get_cached_block("x") == 1 and pool.num_free_blocks == 0


def test_attention_hit_partial_hit_and_stats() -> None:
    s = make()
    r0 = req(0, 10, 2, (1, 8), (100, 4))
    s.add_request(r0)
    out = s.schedule()
    assert s.kv.block_ids(r0) == {0: [1, 2, 3]}
    s.update(out, {})
    drain(s)  # r0 finished: blocks freed tail first, 1 and 2 hashed, 3 not
    assert s.kv.pool.free_queue() == [3, 4, 5, 6, 7, 8, 9, 10, 2, 1]
    assert s.kv.num_cached_free_blocks == 2
    # r1 shares the first 8 tokens: 2 blocks hit, only the last 2 tokens are computed
    r1 = req(1, 10, 2, (1, 8), (200, 4))
    s.add_request(r1)
    out = s.schedule()
    assert out.num_scheduled_tok == {"r1": 2}
    assert out.computed_before.tolist() == [8]
    assert s.kv.block_ids(r1) == {0: [1, 2, 3]}
    # r2 shares only the first 6 tokens: partial hit of 1 block (4 tokens)
    r2 = req(2, 10, 2, (1, 6), (300, 6))
    s.add_request(r2)
    out = s.schedule()
    assert r2.num_cached_tok == 4 and s.kv.block_ids(r2) == {0: [1, 4, 5]}
    st = s.kv.prefix_stats
    assert (st.requests, st.queries_tok, st.hits_tok) == (3, 30, 12)


def test_eviction_order_is_lru_tail_first() -> None:
    s = make(num_blocks=6)  # 5 usable
    for i, seg in enumerate((1, 2)):
        s.add_request(req(i, 8, 1, (seg, 9)))
        drain(s)
    assert s.kv.pool.free_queue() == [5, 2, 1, 4, 3]  # r0 had [1, 2], r1 [3, 4]
    r2 = req(2, 12, 1, (3, 13))
    s.add_request(r2)
    s.schedule()
    assert s.kv.block_ids(r2) == {0: [5, 2, 1]}  # r0's tail block goes first
    assert s.kv.pool.num_evictions == 2
    drain(s)
    assert s.kv.pool.free_queue() == [4, 3, 1, 2, 5]
    # r1's content: max hit = 7 tokens -> 1 block (id 3); its new block 4 evicts r1's
    # second block
    r4 = req(4, 8, 1, (2, 9))
    s.add_request(r4)
    s.schedule()
    assert r4.num_cached_tok == 4 and s.kv.block_ids(r4) == {0: [3, 4]}
    drain(s)
    r3 = req(3, 8, 1, (1, 9))  # r0's content: evicted by r2, no hit
    s.add_request(r3)
    s.schedule()
    assert r3.num_cached_tok == 0 and s.kv.block_ids(r3) == {0: [1, 2]}


def test_align_mode_checkpoint_blocks() -> None:
    """1 GDN group, k=0: the prefill chunk is cut at the last block boundary (8), the
    GDN running block [null, 1] holds the state at 8 and is hashed; the next step moves
    the running state to block 4, the step after frees block 1 as a cached checkpoint."""
    s = make(gdn=1)
    r0 = req(0, 10, 3, (1, 8), (100, 5))
    s.add_request(r0)
    out = s.schedule()
    assert out.num_scheduled_tok == {"r0": 8}
    assert s.kv.block_ids(r0) == {0: [0, 1], 1: [2, 3]}
    s.update(out, {})
    out = s.schedule()
    assert out.num_scheduled_tok == {"r0": 2}
    assert s.kv.block_ids(r0) == {0: [0, 1, 4], 1: [2, 3, 5]}
    assert r0.num_gdn_blocks == 2  # running + previous state, transient
    s.update(out, {})
    out = s.schedule()
    assert s.kv.block_ids(r0) == {0: [0, 0, 4], 1: [2, 3, 5]}
    assert s.kv.pool.free_queue()[-1] == 1 and s.kv.num_cached_free_blocks == 1
    s.update(out, {})
    # r1 shares 8 tokens: attention blocks 2, 3 (in use by r0) and checkpoint 1 (free)
    r1 = req(1, 10, 2, (1, 8), (200, 4))
    s.add_request(r1)
    out = s.schedule()
    assert out.num_scheduled_tok["r1"] == 2 and r1.num_cached_tok == 8
    assert s.kv.block_ids(r1) == {0: [0, 1, 6], 1: [2, 3, 7]}


def test_align_mode_with_mtp_drops_a_block_and_short_prompts_never_hit() -> None:
    """k=1 MTP: store-all keeps 1 speculative GDN block; the attention hit drops its last
    block and the chunk split stops one block early (8 for a 13-token prompt). A 7-token
    prompt (< 2 blocks) is never cut, so no GDN checkpoint exists: zero hits."""
    s = make(gdn=1, k=1, num_blocks=30)
    r0 = req(0, 13, 1, (1, 12), (100, 2))
    s.add_request(r0)
    out = s.schedule()
    assert out.num_scheduled_tok == {"r0": 8}
    assert s.kv.block_ids(r0) == {0: [0, 1, 2], 1: [3, 4, 5]}  # 1 + k GDN, 8+1 slots attn
    drain(s)
    r1 = req(1, 14, 1, (1, 12), (200, 3))
    s.add_request(r1)
    s.schedule()
    assert r1.num_cached_tok == 8  # 3 cached attention blocks, 1 dropped for MTP
    short = [req(2, 7, 1, (7, 6), (300, 2)), req(3, 7, 1, (7, 6), (301, 2))]
    for r in short:
        s.add_request(r)
        drain(s)
    assert [r.num_cached_tok for r in short] == [0, 0]


def test_store_all_vs_reconstruct_gdn_blocks_per_request() -> None:
    """Align mode: the first allocation takes 1 + k GDN blocks per group (store-all k=2),
    1 for reconstruct (k=0 speculative blocks, lookahead still 2)."""
    held = []
    for spec_blocks in (2, 0):
        layout = PoolLayout(
            block_size_tok=4,
            num_blocks=40,
            num_gdn_groups=3,
            gdn_slots_per_request=1 + spec_blocks,
            lookahead_tok=2,
            enable_caching=True,
        )
        s = Scheduler(SchedulerConfig(num_spec_tok=2), KVCacheManager(layout))
        r = req(0, 6, 4, (1, 10))
        s.add_request(r)
        s.schedule()
        held.append(r.num_gdn_blocks)
    assert held == [9, 3]


def test_deferred_pending_blocks_are_charged_with_caching_on() -> None:
    """TreeWY deferred: the pending window's 2 blocks are taken once, on the first
    allocation, held through every later chunk and decode step (never cached), and come
    back when the request is freed; caching on and off alike. Checked as the difference
    in free blocks against the same run without a pending window."""
    for caching in (False, True):
        free: dict[int, list[int]] = {}
        for pending in (0, 2):
            layout = PoolLayout(
                block_size_tok=4,
                num_blocks=40,
                num_gdn_groups=3,
                pending_blocks_per_request=pending,
                enable_caching=caching,
            )
            s = Scheduler(SchedulerConfig(max_num_batched_tokens=4), KVCacheManager(layout))
            r = req(0, 8, 6, (1, 14))
            s.add_request(r)
            trace = []
            while s.has_work:
                out = s.schedule()
                trace.append(s.kv.num_free_blocks)
                s.update(out, {})
            trace.append(s.kv.num_free_blocks)
            free[pending] = trace
        # 2 prefill chunks + 5 decode steps, then the request finishes and frees all
        assert len(free[0]) == len(free[2]) == 8, caching
        assert [a - b for a, b in zip(free[0], free[2], strict=True)] == [2] * 7 + [0]
        assert free[0][-1] == free[2][-1] == 39


def test_deferred_pending_blocks_gate_admission_with_caching_on() -> None:
    """5 usable blocks hold the first step of an 8-token prompt (caching off: 2 attention
    + 3 GDN blocks; caching on, align mode: a 4-token chunk, 1 + 3) but not with the
    2-block pending window on top: the request then waits, caching on and off alike."""
    for caching in (False, True):
        admitted = {}
        for pending in (0, 2):
            layout = PoolLayout(
                block_size_tok=4,
                num_blocks=6,
                num_gdn_groups=3,
                pending_blocks_per_request=pending,
                enable_caching=caching,
            )
            s = Scheduler(SchedulerConfig(), KVCacheManager(layout))
            r = req(0, 8, 2, (1, 10))
            s.add_request(r)
            admitted[pending] = len(s.schedule().admitted)
            assert s.kv.num_free_blocks == (5 if admitted[pending] == 0 else 5 - (2 + 3 - caching))
        assert admitted == {0: 1, 2: 0}, caching


def test_caching_off_path_unchanged_by_segments() -> None:
    """Caching off: segments are ignored and block counts follow the counting rule."""
    layout = PoolLayout(block_size_tok=4, num_blocks=20, num_gdn_groups=3)
    s = Scheduler(SchedulerConfig(), KVCacheManager(layout))
    for i in range(2):
        s.add_request(req(i, 8, 1, (1, 9)))
    s.schedule()
    assert s.kv.num_free_blocks == 19 - 2 * (2 + 3)
    assert np.all(s.store.cols["num_cached_tok"][:2] == 0)


def test_checkpoint_hashed_this_step_is_usable_next_step() -> None:
    """r0 and r1 share 8 tokens and arrive together (1 GDN group, k=0, budget 8). Step 0:
    r0's first chunk (8 tokens) hashes the GDN checkpoint at 8; r1 would hit it, but a
    checkpoint made in this step is refused (vLLM ``cached_blocks_this_step``), and FCFS
    stops. Step 1: r0's last 2 tokens, then r1 restarts from the checkpoint."""
    s = make(gdn=1, budget=10)
    r0 = req(0, 10, 3, (1, 8), (100, 5))
    r1 = req(1, 10, 3, (1, 8), (200, 5))
    s.add_request(r0)
    s.add_request(r1)
    out = s.schedule()
    assert out.num_scheduled_tok == {"r0": 8} and [r.req_id for r in s.waiting] == ["r1"]
    s.update(out, {})
    out = s.schedule()
    assert out.num_scheduled_tok == {"r0": 2, "r1": 2}
    assert r1.num_cached_tok == 8
    assert s.kv.block_ids(r1)[0][:2] == [0, 1]  # r0's checkpoint, block 1


def test_shared_prefix_junction_stops_the_prefill_for_a_checkpoint() -> None:
    """Attention hits 2 blocks of a shared prefix that has no GDN checkpoint there (r0
    ran its prefill in one chunk up to 12), so the GDN hit is only 0; r1's prefill then
    stops at the junction (8) to store a checkpoint other requests can use."""
    s = make(gdn=1, budget=64)
    r0 = req(0, 13, 1, (1, 9), (100, 5))  # last cacheable boundary 12: chunk 0..12
    s.add_request(r0)
    out = s.schedule()
    assert out.num_scheduled_tok == {"r0": 12}
    drain(s)
    r1 = req(1, 14, 1, (1, 9), (200, 6))  # shares 9 tokens: attention hits 2 blocks
    s.add_request(r1)
    out = s.schedule()
    assert r1.num_cached_tok == 0
    assert out.num_scheduled_tok == {"r1": 8}  # junction at 8, not the boundary at 12


def test_simulated_prefix_metrics_and_hit_rate_over_time() -> None:
    """End to end on the 35B plan: step columns add up to the summary counters, the
    cached-evictable blocks are part of the free blocks, and a per-window hit rate."""
    from capsim.config import EngineConfig, LoadConfig, SimConfig, SpecDecodeConfig
    from capsim.metrics import hit_rate_over_time
    from capsim.simulate import simulate

    cfg = SimConfig(
        gpu="B200",
        workload="synthetic-balanced+sys=2,4096,1.0",
        engine=EngineConfig(gmu=0.9, enable_prefix_caching=True),
        spec=SpecDecodeConfig(num_spec_tok=3),
        load=LoadConfig(concurrency=16, num_requests=48),
    )
    res = simulate(cfg)
    s, steps = res.summary, res.steps
    assert s["prefix_cache_queries_tok"] == int(res.requests["prompt_tok"].sum())
    assert s["prefix_cache_hits_tok"] == int(res.requests["cached_tok"].sum()) > 0
    assert (steps["num_cached_free_blocks"] <= steps["num_free_blocks"]).all()
    over = hit_rate_over_time(steps, window_s=5.0)
    assert over["queries_tok"].sum() == s["prefix_cache_queries_tok"]
    assert over["hit_rate"].dropna().between(0, 1).all()
