"""One TP rank's shapes as a TP1 config (capsim/live/tp_shape.py) and the committed emulation
of Qwen3.5-397B-A17B at TP8 (experiments/memory_plan/h200/qwen3.5-397b-tp8shape.config.json)."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from capsim.config import EngineConfig, SpecDecodeConfig
from capsim.gpus import get_gpu
from capsim.live.tp_shape import full_text_config, per_rank_text_config, tp_shape_config
from capsim.memory.memory_plan import plan_memory
from capsim.models import PRESETS, get_model

REPO = Path(__file__).resolve().parents[2]
EMULATED = REPO / "experiments" / "memory_plan" / "h200" / "qwen3.5-397b-tp8shape.config.json"
BASE = REPO / "experiments" / "vllm_logs" / "models" / "qwen3.5-35b-a3b.json"


def test_397b_at_tp8_per_rank_counts():
    text = per_rank_text_config(full_text_config(PRESETS["qwen3.5-397b-a17b"]), 8)
    got = {k: text[k] for k in ("num_attention_heads", "num_key_value_heads")}
    got |= {k: text[k] for k in ("linear_num_key_heads", "linear_num_value_heads")}
    got |= {k: text[k] for k in ("moe_intermediate_size", "shared_expert_intermediate_size")}
    assert got == {
        "num_attention_heads": 4,
        "num_key_value_heads": 1,  # 2 KV heads < tp 8: replicated, one per rank
        "linear_num_key_heads": 2,
        "linear_num_value_heads": 8,
        "moe_intermediate_size": 128,
        "shared_expert_intermediate_size": 128,
    }
    assert text["num_experts"] == 512 and text["hidden_size"] == 4096
    assert text["num_hidden_layers"] == 60 and len(text["layer_types"]) == 60
    assert text["layer_types"].count("full_attention") == 15 and text["vocab_size"] == 248320


def test_per_rank_errors_name_the_field_and_value():
    text = full_text_config(PRESETS["qwen3.5-35b-a3b"])
    with pytest.raises(ValueError, match=r"text_config.linear_num_key_heads=16 is not divisible"):
        per_rank_text_config({**text, "num_attention_heads": 32}, 32)
    with pytest.raises(ValueError, match=r"text_config.num_key_value_heads=2: vLLM needs"):
        per_rank_text_config({**text, "num_attention_heads": 48}, 3)
    with pytest.raises(ValueError, match=r"tp=0 must be an int >= 1"):
        per_rank_text_config(text, 0)
    with pytest.raises(ValueError, match="text_config is missing"):
        tp_shape_config({}, PRESETS["qwen3.5-35b-a3b"], 1)


def test_the_committed_emulation_is_what_the_script_writes(tmp_path):
    sys.path.insert(0, str(REPO / "scripts"))
    try:
        import engine_tp_shape
    finally:
        sys.path.remove(str(REPO / "scripts"))
    out = tmp_path / "c.json"
    argv = ["--preset", "qwen3.5-397b-a17b", "--tp", "8", "--base", str(BASE), "--out", str(out)]
    assert engine_tp_shape.main(argv) == 0
    assert out.read_bytes() == EMULATED.read_bytes()
    cfg = json.loads(out.read_text())
    assert cfg["vision_config"]["out_hidden_size"] == 4096
    assert cfg["text_config"]["rope_parameters"]["mrope_section"] == [11, 11, 10]
    assert not [k for k in cfg if k.startswith("_")]  # what vLLM reads: no capsim keys


def test_capsim_plans_the_emulation_at_tp1_with_the_tp8_rank_pages():
    """The KV and GDN state pages of one TP8 rank equal the emulated TP1 model's."""
    gpu = get_gpu("h200")
    spec = SpecDecodeConfig(num_spec_tok=3)
    plans = [
        plan_memory(model, gpu, EngineConfig(tp=tp, gmu=0.9, vllm_version="0.26"), spec)
        for model, tp in ((get_model(str(EMULATED)), 1), (PRESETS["qwen3.5-397b-a17b"], 8))
    ]
    keys = ("attn_bytes_per_tok_per_layer", "conv_state_bytes", "ssm_state_bytes")
    keys += ("page_bytes", "block_size_tok", "group_size", "gdn_padding_layers")
    emulated, tp8 = ({k: getattr(p, k) for k in keys} for p in plans)
    assert emulated == tp8
    assert (
        plans[0].weights_breakdown_bytes["ffn_routed_experts"]
        == (plans[1].weights_breakdown_bytes["ffn_routed_experts"])
    )
