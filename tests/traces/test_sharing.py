"""Shared-prefix workloads: system prompts, multi-turn replay, ideal hit rate vs simulation."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
from factories import ConstantStepTime

from capsim.config import SpecDecodeConfig
from capsim.core.acceptance import AcceptanceDraws
from capsim.core.kv_manager import KVCacheManager, PoolLayout
from capsim.core.request import Request
from capsim.core.scheduler import Scheduler, SchedulerConfig
from capsim.engine import EngineSim
from capsim.traces import load_workload
from capsim.traces.multiturn import END_TOK, multiturn_table
from capsim.traces.sharing import (
    attach_system_prompt,
    ideal_hit_rate,
    ideal_prefix_hits,
    parse_sys_suffix,
)
from capsim.traces.table import RequestTable


def _frame() -> pd.DataFrame:
    # two conversations: 3 turns and 2 turns
    rows = [(7, 0, 10, 20, 11, 21), (7, 1, 5, 30, 6, 31), (7, 2, 8, 9, 9, 10)]
    rows += [(9, 0, 40, 3, 41, 4), (9, 1, 12, 7, 13, 8)]
    cols = ["entry_index", "turn", "qwen3_user_tok", "qwen3_asst_tok"]
    cols += ["qwen35_user_tok", "qwen35_asst_tok"]
    return pd.DataFrame(rows, columns=cols).astype("int32")


def test_multiturn_prompt_is_history_plus_new_message() -> None:
    t = multiturn_table(_frame(), family="qwen3", num_requests=5, seed=1)
    conv7 = [i for i, s in enumerate(t.source_id) if "entry7" in s]
    p = t.prompt_tok[conv7].tolist()
    assert p == [10, 10 + 20 + END_TOK + 5, 10 + 20 + END_TOK + 5 + 30 + END_TOK + 8]
    assert t.output_tok[conv7].tolist() == [20, 30, 9]
    assert t.parent[conv7].tolist() == [-1, conv7[0], conv7[1]]
    # turn 2's prompt starts with turn 1's prompt and output
    assert t.segments[conv7[1]][:2] == t.segments[conv7[0]]


def test_ideal_hits_of_a_conversation_are_its_history() -> None:
    t = multiturn_table(_frame(), family="qwen3", num_requests=5, seed=1)
    hits = ideal_prefix_hits(t)
    for i in range(t.num_requests):
        par = int(t.parent[i])
        # everything the previous turn computed: its prompt + output - 1 tokens
        want = 0 if par < 0 else int(t.prompt_tok[par] + t.output_tok[par] - 1)
        assert hits[i] == want
    assert ideal_prefix_hits(t, 16).tolist() == (hits // 16 * 16).tolist()


def test_system_prompt_zipf_and_suffix() -> None:
    base = RequestTable(name="b", prompt_tok=np.full(4000, 10), output_tok=np.full(4000, 5))
    t = attach_system_prompt(base, num_prompts=4, prompt_tok=100, zipf_a=1.0, seed=3)
    assert (t.prompt_tok == 110).all()
    first = np.array([s[0][0] for s in t.segments])
    counts = np.bincount(first - first.min(), minlength=4)
    # Zipf(1): shares 12/25, 6/25, 4/25, 3/25
    assert np.allclose(counts / 4000, [0.48, 0.24, 0.16, 0.12], atol=0.03)
    # every request after the first of its prompt hits the 100 system tokens
    assert ideal_prefix_hits(t).sum() == 100 * (4000 - 4)
    assert parse_sys_suffix("sharegpt+sys=8,512") == ("sharegpt", (8, 512, 1.0))
    with pytest.raises(ValueError, match="system-prompt suffix"):
        parse_sys_suffix("sharegpt+sys=8")
    w = load_workload("synthetic-balanced+sys=2,64,0", num_requests=10, seed=0)
    assert (w.prompt_tok == 1024 + 64).all()


def test_shipped_multiturn_workload_loads() -> None:
    t = load_workload("sharegpt-multiturn", num_requests=300, seed=0)
    assert t.num_requests == 300 and (t.parent >= -1).all()
    assert 0.5 < ideal_hit_rate(t) < 1.0


def _run(t: RequestTable, layout: PoolLayout, k: int) -> Scheduler:
    """Replay ``t`` at concurrency 2 with ``k`` drafts per step; the scheduler holds the stats."""
    sched = Scheduler(SchedulerConfig(max_num_seqs=4, num_spec_tok=k), KVCacheManager(layout))
    reqs = [
        Request(req_id=f"r{i}", prompt_tok=int(p), max_output_tok=int(o), index=i, segments=s)
        for i, (p, o, s) in enumerate(zip(t.prompt_tok, t.output_tok, t.segments, strict=True))
    ]
    spec = SpecDecodeConfig(num_spec_tok=k)
    EngineSim(
        scheduler=sched,
        cost=ConstantStepTime(),
        acceptance=AcceptanceDraws(spec, t.output_tok, np.random.default_rng(0)),
        requests=reqs,
        release_s=np.zeros(t.num_requests),
        max_concurrency=2,
        window_tok=1 + k,
        parent=t.parent,
    ).run()
    return sched


def test_simulated_hit_rate_equals_shared_fraction_without_eviction() -> None:
    """Attention only, 1-token blocks, a pool that never evicts: vLLM's hit counter over
    its query counter equals the workload's shared-token fraction."""
    t = multiturn_table(_frame(), family="qwen35", num_requests=5, seed=4)
    layout = PoolLayout(block_size_tok=1, num_blocks=5000, num_gdn_groups=0, enable_caching=True)
    sched = _run(t, layout, 0)
    st = sched.kv.prefix_stats
    assert sched.kv.pool.num_evictions == 0
    assert st.hits_tok / st.queries_tok == pytest.approx(ideal_hit_rate(t), abs=1e-12)
    assert st.hits_tok == int(ideal_prefix_hits(t).sum()) > 0


def _run_hybrid(t: RequestTable, k: int) -> Scheduler:
    layout = PoolLayout(
        block_size_tok=4,
        num_blocks=5000,
        num_gdn_groups=3,
        gdn_slots_per_request=1 + k,
        lookahead_tok=k,
        enable_caching=True,
    )
    return _run(t, layout, k)


def test_align_mode_hits_equal_block_granular_ideal_without_speculation() -> None:
    """GDN hybrid in align mode, no drafts: every turn restarts from the checkpoint at the
    last block boundary of the history (prefill cut or decode crossing), so hits equal the
    ideal at block granularity. With MTP (EAGLE drop) they fall short of it."""
    t = multiturn_table(_frame(), family="qwen35", num_requests=5, seed=4)
    ideal = int(ideal_prefix_hits(t, 4).sum())
    plain = _run_hybrid(t, 0).kv.prefix_stats.hits_tok
    mtp = _run_hybrid(t, 2).kv.prefix_stats.hits_tok
    assert plain == ideal > 0
    assert mtp < ideal
