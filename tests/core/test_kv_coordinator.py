"""The KV coordinator: chosen once from the layout, one block rule for a request and a
batch, and one contract (``KVCacheBlocks`` or ``None`` with nothing changed)."""

from __future__ import annotations

import numpy as np
import pytest

from capsim.core.hybrid_coordinator import HybridKVCacheCoordinator
from capsim.core.kv_blocks import BlockRule, KVCacheBlocks
from capsim.core.kv_coordinator import KVCacheCoordinatorNoPrefixCache
from capsim.core.kv_manager import KVCacheManager, PoolLayout
from capsim.core.request import Request, RequestStore


def test_the_coordinator_is_chosen_by_the_layout() -> None:
    off = KVCacheManager(PoolLayout(block_size_tok=4, num_blocks=10))
    on = KVCacheManager(PoolLayout(block_size_tok=4, num_blocks=10, enable_caching=True))
    assert type(off.coordinator) is KVCacheCoordinatorNoPrefixCache
    assert type(on.coordinator) is HybridKVCacheCoordinator


@pytest.mark.parametrize(("bs", "groups", "max_len"), [(4, 1, 1 << 30), (16, 2, 40), (3, 3, 7)])
def test_one_block_rule_for_ints_and_arrays(bs: int, groups: int, max_len: int) -> None:
    rule = BlockRule(bs, groups, max_len)
    tok = np.arange(0, 60, dtype=np.int64)
    by_hand = [groups * -(-min(int(t), max_len) // bs) for t in tok]  # cdiv by hand
    assert [rule.attn_blocks(int(t)) for t in tok] == by_hand
    assert rule.attn_blocks(tok).tolist() == by_hand


def test_allocate_returns_the_blocks_or_none_and_changes_nothing() -> None:
    kv = KVCacheManager(PoolLayout(block_size_tok=4, num_blocks=6, num_gdn_groups=1))
    store = RequestStore()
    req = Request(req_id="a", prompt_tok=12, max_output_tok=4)
    store.add(req)
    got = kv.allocate_slots(req, 8, 0)  # 2 attention blocks + 1 GDN slot
    assert got == KVCacheBlocks(2, 1) and kv.num_free_blocks == 2
    assert kv.allocate_slots(req, 20, 0) is None  # 5 blocks: 3 more, 2 free
    assert (req.num_attn_blocks, req.num_gdn_blocks, kv.num_free_blocks) == (2, 1, 2)


def test_batch_form_has_the_same_contract() -> None:
    kv = KVCacheManager(PoolLayout(block_size_tok=4, num_blocks=8, num_gdn_groups=1))
    store = RequestStore()
    reqs = [Request(req_id=f"r{i}", prompt_tok=4, max_output_tok=4) for i in range(3)]
    for r in reqs:
        store.add(r)
    slots = np.arange(3, dtype=np.int64)
    got = kv.allocate_slots_batch(store.cols, slots, np.array([4, 4, 5]))
    assert got is not None and got.num_attn_blocks.tolist() == [1, 1, 2]
    assert kv.num_free_blocks == 7 - 4 - 3
    before = store.cols.num_attn_blocks.copy()
    assert kv.allocate_slots_batch(store.cols, slots, np.array([12, 12, 12])) is None
    assert (store.cols.num_attn_blocks == before).all() and kv.num_free_blocks == 0


def test_columns_are_named_arrays_and_stay_the_same_object_when_grown() -> None:
    store = RequestStore(capacity=1)
    cols = store.cols
    for i in range(5):
        store.add(Request(req_id=f"r{i}", prompt_tok=i + 1, max_output_tok=1))
    assert store.cols is cols and cols.prompt_tok[:5].tolist() == [1, 2, 3, 4, 5]
    assert cols["prompt_tok"] is cols.prompt_tok
    with pytest.raises(KeyError):
        cols["nope"]
