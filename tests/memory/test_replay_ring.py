"""Replay commit mode: the ring per request and GDN layer is charged, as the kernel allocates it."""

from __future__ import annotations

import pytest

from capsim.commit_modes import get_mode
from capsim.config import EngineConfig, SpecDecodeConfig
from capsim.gpus import get_gpu
from capsim.memory.memory_plan import plan_memory
from capsim.memory.treewy_pending import pending_bytes_per_layer
from capsim.models import get_model
from capsim.units import cdiv


@pytest.mark.parametrize(
    ("name", "tp", "w"), [("qwen3.5-35b-a3b", 1, 4), ("qwen3.5-397b-a17b", 8, 15)]
)
def test_ring_bytes_match_the_kernel_buffers(name: str, tp: int, w: int) -> None:
    torch = pytest.importorskip("torch")
    from capsim_kernels.gdn_verify.replay import ReplayRing, replay_memory_bytes

    model = get_model(name)
    hk, hv = model.linear_num_key_heads // tp, model.linear_num_value_heads // tp
    dk, dv = model.linear_key_head_dim, model.linear_value_head_dim
    r = get_mode("replay").ring_tok(w)
    k_like = torch.empty(2, w, hk, dk, dtype=torch.bfloat16)
    v_like = torch.empty(2, w, hv, dv, dtype=torch.bfloat16)
    ring = ReplayRing.empty(k_like, v_like, torch.arange(-1, w - 1, dtype=torch.int32), r)
    held = sum(t[0].numel() * t.element_size() for t in (ring.k, ring.vt, ring.log_gate)) + 4
    assert pending_bytes_per_layer(model, tp, r) == held
    kernel = replay_memory_bytes(
        num_v_heads=hv, num_k_heads=hk, dk=dk, dv=dv, capacity=r, state_bytes=4
    )
    assert kernel["ring_bytes"] == held


@pytest.mark.parametrize("tree", [None, (2, 2, 2)])
def test_replay_plan_charges_one_ring_and_writes_a_quarter_state(tree) -> None:  # type: ignore[no-untyped-def]
    model, gpu = get_model("qwen3.5-35b-a3b"), get_gpu("B200")
    spec = SpecDecodeConfig(num_spec_tok=3, tree_widths=tree, commit="replay")
    plan = plan_memory(model, gpu, EngineConfig(gmu=0.9), spec)
    ring = model.num_gdn_layers * pending_bytes_per_layer(model, 1, 4 * (spec.depth + 1))
    assert plan.pending_bytes_per_request == ring  # 16 entries: a depth-3 path, chain or tree
    assert plan.pending_blocks_per_request == cdiv(ring, plan.bytes_per_block)
    assert get_mode("replay").decode_state_rw(spec.window_tok) == (1, 0.25)
    assert get_mode("deferred").decode_state_rw(spec.window_tok) == (1, 1)
