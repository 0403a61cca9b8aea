"""TreeWY deferred commit: the pending window per request and GDN layer is charged."""

from __future__ import annotations

import pytest

from capsim.config import EngineConfig, SpecDecodeConfig
from capsim.gpus import get_gpu
from capsim.memory.memory_plan import plan_memory
from capsim.memory.treewy_pending import PENDING_SETS, pending_bytes_per_layer
from capsim.models import get_model
from capsim.units import cdiv


def _kernel_pending_bytes_per_request(model, tp: int, w: int, batch: int = 3) -> float:  # type: ignore[no-untyped-def]
    """Bytes of the kernel's own PendingCommit buffers, per request (one layer)."""
    torch = pytest.importorskip("torch")  # only this helper needs it (not at collection)
    from capsim_kernels.gdn_verify.treewy_fused import PendingCommit

    hk, hv = model.linear_num_key_heads // tp, model.linear_num_value_heads // tp
    k_like = torch.empty(batch, w, hk, model.linear_key_head_dim, dtype=torch.bfloat16)
    v_like = torch.empty(batch, w, hv, model.linear_value_head_dim, dtype=torch.bfloat16)
    parent = torch.arange(-1, w - 1, dtype=torch.int32)
    p = PendingCommit.empty(k_like, v_like, parent)
    per_batch = sum(t.numel() * t.element_size() for t in (p.k, p.vt, p.log_gate, p.accepted))
    return per_batch / batch


@pytest.mark.parametrize(
    ("name", "tp", "w"), [("qwen3.5-35b-a3b", 1, 40), ("qwen3.5-397b-a17b", 8, 15)]
)
def test_pending_bytes_match_the_kernel_buffers(name: str, tp: int, w: int) -> None:
    model = get_model(name)
    assert pending_bytes_per_layer(model, tp, w) == _kernel_pending_bytes_per_request(model, tp, w)


def test_35b_w40_is_about_0_8_mb_per_layer() -> None:
    model = get_model("qwen3.5-35b-a3b")
    per_layer = pending_bytes_per_layer(model, 1, 40)
    fp32_state = 32 * 128 * 128 * 4
    assert per_layer == pytest.approx(0.82e6, rel=0.01)
    assert per_layer / fp32_state == pytest.approx(0.39, abs=0.01)


@pytest.mark.parametrize("tree", [None, (2, 2, 2), (3, 3, 3)])
def test_deferred_plan_charges_pending_blocks(tree) -> None:  # type: ignore[no-untyped-def]
    model, gpu = get_model("qwen3.5-35b-a3b"), get_gpu("B200")
    engine = EngineConfig(gmu=0.9)
    spec = SpecDecodeConfig(num_spec_tok=3, tree_widths=tree, commit="deferred")
    plan = plan_memory(model, gpu, engine, spec)
    pending = (
        PENDING_SETS * model.num_gdn_layers * pending_bytes_per_layer(model, 1, spec.window_tok)
    )
    assert plan.pending_bytes_per_request == pending
    assert plan.pending_blocks_per_request == cdiv(pending, plan.bytes_per_block)
    assert plan.gdn_blocks_per_request == plan.num_gdn_groups + plan.pending_blocks_per_request
    reconstruct = plan_memory(
        model, gpu, engine, SpecDecodeConfig(num_spec_tok=3, tree_widths=tree, commit="reconstruct")
    )
    assert reconstruct.pending_bytes_per_request == 0
    assert plan.max_concurrency(4096) < reconstruct.max_concurrency(4096)


def test_simulator_pool_holds_the_pending_blocks() -> None:
    from capsim.simulate import pool_layout

    model, gpu = get_model("qwen3.5-35b-a3b"), get_gpu("B200")
    plan = plan_memory(model, gpu, EngineConfig(gmu=0.9), SpecDecodeConfig(commit="deferred"))
    layout = pool_layout(plan)
    assert layout.gdn_blocks_per_request == plan.gdn_blocks_per_request
    assert plan.pending_blocks_per_request >= 1
