import pytest

from capsim.calibration.shapes import step_shapes
from capsim.models import PRESETS


def test_35b_tp1_shapes_follow_the_config():
    s = step_shapes(PRESETS["qwen3.5-35b-a3b"], 1)
    assert s.linear("gdn_in_qkvz").n == 2 * 16 * 128 + 2 * 32 * 128
    assert s.linear("attn_qkv").n == 16 * 256 * 2 + 2 * 2 * 256
    assert s.linear("lm_head").n == 248320
    assert s.kv_bytes_per_tok == 2 * 2 * 256 * 2
    assert (s.num_gdn_layers, s.num_attn_layers) == (30, 10)


def test_397b_tp8_replicates_kv_heads_and_splits_the_rest():
    s = step_shapes(PRESETS["qwen3.5-397b-a17b"], 8)
    assert (s.attn_hq, s.attn_hkv, s.gdn_hv, s.gdn_hk) == (4, 1, 8, 2)
    assert s.moe_inter == 1024 // 8


def test_indivisible_tp_is_refused():
    with pytest.raises(ValueError, match="num_attention_heads=16 is not divisible by tp=3"):
        step_shapes(PRESETS["qwen3.5-35b-a3b"], 3)
