"""The memory plan reproduces VLLM.md section 2.7's worked numbers.

They are the published setup's: prefix caching off (mamba_cache_mode "none"), which vLLM
0.33 (capsim's default release) turns on for hybrids unless told not to."""

from __future__ import annotations

import pytest

from capsim.config import EngineConfig, SpecDecodeConfig
from capsim.gpus import get_gpu
from capsim.memory.memory_plan import group_layout, plan_memory
from capsim.models import get_model
from capsim.units import MiB

# model, tp, k, block_size, page bytes, group_size, MiB/block, store-all GDN blocks/req
VLLM_2_7 = [
    ("qwen3.5-35b-a3b", 1, 0, 1056, 2_162_688, 10, 20.63, 3),
    ("qwen3.5-35b-a3b", 1, 3, 1072, 2_195_456, 11, 23.03, 12),
    ("qwen3.5-397b-a17b", 8, 0, 528, 540_672, 15, 7.73, 3),
    ("qwen3.5-397b-a17b", 8, 3, 544, 557_056, 16, 8.50, 12),
    ("qwen3-next-80b-a3b", 1, 0, 544, 1_114_112, 12, 12.75, 3),
    ("qwen3-next-80b-a3b", 1, 3, 560, 1_146_880, 13, 14.22, 12),
]


@pytest.mark.parametrize(("model", "tp", "k", "bs", "page", "group", "mib", "gdn"), VLLM_2_7)
def test_worked_numbers(model, tp, k, bs, page, group, mib, gdn) -> None:  # type: ignore[no-untyped-def]
    gpu = get_gpu("B200")
    # Next-80B's 151 GiB of weights do not fit one GPU at gmu 0.9: fix the block count.
    override = 1000 if model == "qwen3-next-80b-a3b" else None
    engine = EngineConfig(
        tp=tp, gmu=0.9, num_gpu_blocks_override=override, enable_prefix_caching=False
    )
    plan = plan_memory(get_model(model), gpu, engine, SpecDecodeConfig(num_spec_tok=k))
    assert plan.block_size_tok == bs
    assert plan.page_bytes == page
    assert plan.group_size == group
    assert plan.bytes_per_block / MiB == pytest.approx(mib, abs=0.006)
    assert plan.gdn_blocks_per_request == gdn
    assert plan.num_attn_groups == 1 and plan.num_gdn_groups == 3
    assert plan.usable_blocks == plan.num_blocks - 1
    reconstruct = plan_memory(
        get_model(model),
        gpu,
        engine,
        SpecDecodeConfig(num_spec_tok=k, commit="reconstruct"),
    )
    assert reconstruct.gdn_blocks_per_request == 3
    assert reconstruct.page_bytes == page  # same page: conv keeps K-1+k columns


def test_bf16_state_block_sizes() -> None:
    """VLLM.md 2.7: with --mamba-ssm-cache-dtype bfloat16, 560 (35B TP1) and 288 (397B TP8)."""
    spec = SpecDecodeConfig(num_spec_tok=3)
    b200 = get_gpu("B200")
    p35 = plan_memory(
        get_model("qwen3.5-35b-a3b"),
        b200,
        EngineConfig(gmu=0.9, ssm_state_dtype="bfloat16", enable_prefix_caching=False),
        spec,
    )
    p397 = plan_memory(
        get_model("qwen3.5-397b-a17b"),
        b200,
        EngineConfig(tp=8, gmu=0.9, ssm_state_dtype="bfloat16", enable_prefix_caching=False),
        spec,
    )
    assert (p35.block_size_tok, p397.block_size_tok) == (560, 288)


def test_kv_replicated_at_tp8() -> None:
    """2 KV heads at TP8 -> 1 head per GPU: 16 attention layers * 1 KiB = 16 KiB/token."""
    plan = plan_memory(
        get_model("qwen3.5-397b-a17b"),
        get_gpu("B200"),
        EngineConfig(tp=8, gmu=0.9),
        SpecDecodeConfig(num_spec_tok=3),
    )
    assert plan.kv_heads_per_rank == 1
    assert plan.attn_bytes_per_tok_per_layer * plan.num_attn_layers == 16 * 1024


def test_group_layout_rule() -> None:
    assert group_layout(13, 36) == (13, 1, 3, 3)  # "Add 3 padding layers"
    assert group_layout(10, 30) == (10, 1, 3, 0)
    assert group_layout(10, 14) == (14, 1, 1, 0)  # max < 1.5 * min -> max


def test_higher_gmu_never_fewer_blocks() -> None:
    model, gpu, spec = get_model("qwen3.5-35b-a3b"), get_gpu("B200"), SpecDecodeConfig()
    blocks = [
        plan_memory(model, gpu, EngineConfig(gmu=g), spec).num_blocks
        for g in (0.6, 0.7, 0.75, 0.8, 0.9, 0.95)
    ]
    assert blocks == sorted(blocks) and blocks[0] < blocks[-1]


def test_gmu_below_weights_is_a_clear_error() -> None:
    with pytest.raises(ValueError, match=r"engine\.gmu=0\.3.*cannot hold weights"):
        plan_memory(
            get_model("qwen3.5-35b-a3b"), get_gpu("B200"), EngineConfig(gmu=0.3), SpecDecodeConfig()
        )


def test_weights_match_parameter_count() -> None:
    """35B-A3B: about 35-36 B parameters in bf16 incl. the MTP layer (66 GiB)."""
    plan = plan_memory(
        get_model("qwen3.5-35b-a3b"), get_gpu("B200"), EngineConfig(gmu=0.9), SpecDecodeConfig()
    )
    params_b = plan.weights_bytes / 2 / 1e9
    assert 34.0 < params_b < 37.0
