"""Model presets and loading an HF-style config.json."""

from __future__ import annotations

import json

import pytest

from capsim.models import PRESETS, get_model


def test_hf_config_round_trip(tmp_path) -> None:  # type: ignore[no-untyped-def]
    """A nested Qwen3.5-style config with the 35B's numbers loads as the preset does."""
    p = PRESETS["qwen3.5-35b-a3b"]
    cfg = {
        "architectures": ["Qwen3_5MoeForConditionalGeneration"],
        "text_config": {
            "num_hidden_layers": 40,
            "full_attention_interval": 4,
            "hidden_size": p.hidden_size,
            "num_attention_heads": p.num_attention_heads,
            "num_key_value_heads": p.num_kv_heads,
            "head_dim": p.head_dim,
            "linear_num_key_heads": 16,
            "linear_num_value_heads": 32,
            "linear_key_head_dim": 128,
            "linear_value_head_dim": 128,
            "linear_conv_kernel_dim": 4,
            "num_experts": 256,
            "num_experts_per_tok": 8,
            "moe_intermediate_size": 512,
            "shared_expert_intermediate_size": 512,
            "vocab_size": 248320,
            "mtp_num_hidden_layers": 1,
            "mamba_ssm_dtype": "float32",
        },
    }
    path = tmp_path / "config.json"
    path.write_text(json.dumps(cfg))
    m = get_model(str(path))
    assert (m.num_gdn_layers, m.num_attn_layers) == (30, 10)
    for field in ("hidden_size", "num_experts", "conv_dim", "ssm_state_dtype", "num_mtp_layers"):
        assert getattr(m, field) == getattr(p, field), field


def test_bad_hf_config_names_missing_field(tmp_path) -> None:  # type: ignore[no-untyped-def]
    path = tmp_path / "config.json"
    path.write_text(json.dumps({"num_hidden_layers": 4}))
    with pytest.raises(ValueError, match="'hidden_size' is missing"):
        get_model(str(path))
    path.write_text("{not json")
    with pytest.raises(ValueError, match="not valid JSON"):
        get_model(str(path))


def test_presets_are_hybrids_with_three_gdn_per_attention() -> None:
    for m in PRESETS.values():
        assert m.num_gdn_layers == 3 * m.num_attn_layers
        assert m.sources, m.name
