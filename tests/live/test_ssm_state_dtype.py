"""vLLM 0.32 CPU's GDN state dtype for "auto" depends on the host (AVX-512 BF16 or not).

No vLLM needed: the rule is checked on its own and on the recorded Qwen3-Next trace,
re-labelled as if it had come from an AVX2-only host.
"""

from __future__ import annotations

import copy
import gzip
import json
from pathlib import Path

import pytest

from capsim.live.scenarios import get_scenario
from capsim.live.stepcheck import derive_layout, vllm_cpu_ssm_state_dtype

DATA = Path(__file__).parent / "data"


def _trace(name: str) -> dict:
    with gzip.open(DATA / f"{name}.trace.json.gz", "rt") as f:
        return json.load(f)


@pytest.mark.parametrize(
    ("requested", "avx512_bf16", "expected"),
    [
        ("auto", True, "float32"),  # platforms/cpu.py resets it for the accelerated GDN path
        ("auto", False, "bfloat16"),  # mamba_utils: "auto" = the conv state's (model) dtype
        ("bfloat16", True, "bfloat16"),  # explicit bf16 is kept by the accelerated backend
        ("float16", True, "float16"),
        ("float32", False, "float32"),
    ],
)
def test_the_cpu_rule(requested: str, avx512_bf16: bool, expected: str) -> None:
    assert vllm_cpu_ssm_state_dtype(requested, avx512_bf16=avx512_bf16) == expected


def test_an_unknown_dtype_is_one_line_naming_it() -> None:
    with pytest.raises(ValueError, match="mamba_ssm_cache_dtype='fp8'"):
        vllm_cpu_ssm_state_dtype("fp8", avx512_bf16=True)


def test_the_recorded_trace_is_an_avx512_host() -> None:
    derived = derive_layout(_trace("qwen3next_preempt"), DATA / "qwen3next_config.json")
    assert derived.capsim["block_size_tok"] == derived.vllm["block_size_tok"] == 544
    assert "ssm_state_dtype" not in derived.vllm  # recorded before trace_vllm reported it


def _avx2_trace(state_dtype: str) -> dict:
    """The recorded trace as an AVX2-only host would report it (bf16 state: 288 tokens)."""
    trace = copy.deepcopy(_trace("qwen3next_preempt"))
    trace["cpu_avx512_bf16"] = False
    for g in trace["groups"]:
        g["page_size_bytes"] = 288 * 512
        if g["kind"] == "FullAttentionSpec":
            g["block_size"] = 288
        else:
            g["dtypes"] = ["bfloat16", state_dtype]
    return trace


def test_an_avx2_host_gives_the_bf16_page() -> None:
    derived = derive_layout(_avx2_trace("bfloat16"), DATA / "qwen3next_config.json")
    # 288 = 32 * cdiv(3*1024*2 + 4*128*128*2, 32 * 512)
    assert derived.capsim["block_size_tok"] == 288
    assert derived.capsim["ssm_state_dtype"] == derived.vllm["ssm_state_dtype"] == "bfloat16"
    assert derived.agrees


def test_a_reported_dtype_that_disagrees_is_caught() -> None:
    derived = derive_layout(_avx2_trace("float32"), DATA / "qwen3next_config.json")
    assert derived.vllm["ssm_state_dtype"] == "float32"
    assert not derived.agrees


def test_a_pinned_dtype_ignores_the_host() -> None:
    trace = _avx2_trace("float32")
    trace["scenario"]["engine"]["mamba_ssm_cache_dtype"] = "float32"
    derived = derive_layout(trace, DATA / "qwen3next_config.json")
    assert derived.capsim["block_size_tok"] == 544
    assert derived.capsim["ssm_state_dtype"] == "float32"
    assert get_scenario("qwen3next_mtp").engine.mamba_ssm_cache_dtype == "float32"
