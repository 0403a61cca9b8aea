"""Rules read from vLLM release sources in session 4 (issue 25, round 2), each with the log
line or the source it reproduces."""

from __future__ import annotations

from pathlib import Path

import pytest

from capsim.config import EngineConfig, SpecDecodeConfig
from capsim.gpus import get_gpu
from capsim.memory import cudagraph as cg
from capsim.memory.memory_plan import plan_memory
from capsim.models import get_model

LOGS = Path(__file__).resolve().parents[2] / "experiments" / "vllm_logs"


def _plan(gpu: str, version: str = "0.26.0", k: int = 3, kv: str = "bfloat16"):  # type: ignore[no-untyped-def]
    return plan_memory(
        get_model("qwen3.5-35b-a3b"),
        get_gpu(gpu),
        EngineConfig(gmu=0.9, vllm_version=version, kv_cache_dtype=kv),
        SpecDecodeConfig(num_spec_tok=k),
    )


@pytest.mark.parametrize(
    ("cc", "kv", "backend"),
    [
        ((9, 0), "bfloat16", "FLASH_ATTN"),  # H100/H200: FA3
        ((9, 0), "fp8", "FLASH_ATTN"),  # FA3 holds fp8 (e4m3) KV on SM90
        ((9, 0), "fp8_e5m2", "FLASHINFER"),  # never on FlashAttention
        ((10, 0), "bfloat16", "FLASHINFER"),  # SM100: FLASHINFER first in the priority list
        ((8, 6), "bfloat16", "FLASH_ATTN"),  # RTX 3090: FA2
        ((8, 6), "fp8_e5m2", "FLASHINFER"),  # FA2 holds no fp8 KV
        ((12, 0), "fp8", "FLASHINFER"),  # RTX 5090: FA2, no fp8 KV
    ],
)
def test_attention_backend_by_gpu_and_kv_dtype(cc: tuple[int, int], kv: str, backend: str) -> None:
    # platforms/cuda.py:_get_backend_priorities; fa_utils.py flash_attn_supports_fp8 (0.20.1)
    # / flash_attn_supports_kv_cache_dtype (0.27.1)
    assert cg.attention_backend(cc, kv) == backend


def test_fa_split_buffers_only_where_fa3_runs() -> None:
    # flash_attn.py: max_num_splits is fixed for FULL graphs only when aot_schedule, i.e.
    # get_flash_attn_version() == 3 (SM90). The H100 0.19.0 rows' "Estimated FULL CUDA graph
    # memory: 260.00 MiB first-capture" is these buffers; a GPU without FA3 has none.
    assert cg.flash_attn_split_buffers((9, 0), "bfloat16")
    assert not cg.flash_attn_split_buffers((9, 0), "fp8_e5m2")
    for cc in ((8, 0), (8, 6), (8, 9), (10, 0), (12, 0)):
        assert not cg.flash_attn_split_buffers(cc, "bfloat16")


def test_flashinfer_drops_full_graphs_with_drafts_off_sm100() -> None:
    # club-3090 #104 (RTX 3090, fp8_e5m2 KV, MTP 3): "CUDAGraphMode.FULL_AND_PIECEWISE is not
    # supported with spec-decode for attention backend FlashInferBackend (support:
    # AttentionCGSupport.UNIFORM_SINGLE_TOKEN_DECODE); setting cudagraph_mode=PIECEWISE"
    assert not cg.full_graphs_with_drafts((8, 6), "fp8_e5m2")
    assert cg.full_graphs_with_drafts((8, 6), "bfloat16")  # FA2: UNIFORM_BATCH
    assert cg.full_graphs_with_drafts((10, 0), "bfloat16")  # trtllm-gen: UNIFORM_BATCH
    assert cg.full_graphs_with_drafts((9, 0), "bfloat16")
    from capsim.memory.log_validate import validate_dir

    res = {r.row_id: r for r in validate_dir(LOGS)}
    # club-3090 PR #1139: RTX 3090, fp8 KV, MTP 3, vLLM 0.27.1 (no capture line in the copy)
    plan = res["qwen38-27b-fp8-2x3090-c3090pr1139"].comparison.plan  # type: ignore[union-attr]
    assert plan is not None and plan.cudagraph_full_graphs == 0
    assert plan.cudagraph_piecewise_graphs > 0


def test_h200_estimate_unchanged_and_b200_loses_the_fa_buffers() -> None:
    # H200 0.26.0 k=3: "Estimated CUDA graph memory: 0.74 GiB total" (the fit row) stays
    h200 = _plan("H200")
    assert round(h200.cudagraph_bytes / 2**30, 2) == 0.74
    # B200 0.33 (FlashInfer): the FULL first capture holds no FA split buffers, so the
    # estimate is smaller than the same plan with them (32 splits x 1024 tok x 16 heads x 257 x 4)
    b200 = _plan("B200", version="0.33.0")
    with_fa = 32 * 1024 * 16 * 257 * 4
    assert b200.cudagraph_bytes < with_fa + 0.5 * 2**30
    assert "no FA3 split buffers" in b200.terms["cudagraph"].detail


def test_vision_peak_per_patch_from_the_source_reading() -> None:
    # Qwen3.5/3.6 vision tower (hidden 1152, intermediate 4304, patch 16, temporal 2, 3
    # channels): held = the dummy pixels in bf16 (1536 x 2: call_hf_processor casts them, no
    # second copy; session 8) + pos_embeds and the residual stream (2 x 1152 x 2); the
    # attention half at its output projection (norm1 + qkv + qk pair + rotated pair + context =
    # 1152 + 8 x 1152 / tp, + the projection's output 1152, + at tp > 1 its out-of-place
    # all-reduce 1152) beats the MLP half (1152 + 2 x 4304 / tp)
    from capsim.memory.activation import vision_bytes_per_patch

    m = get_model("qwen3.5-35b-a3b")
    held = 1536 * 2 + 2 * 1152 * 2
    assert vision_bytes_per_patch(m, 1) == held + (1152 + 8 * 1152 + 1152) * 2
    assert vision_bytes_per_patch(m, 2) == held + (1152 + 4 * 1152 + 2 * 1152) * 2


@pytest.mark.parametrize(
    "row", ["qwen38-27b-fp8-2x3090-c3090pr1139", "qwen38-27b-fp8-2x5090-c3090i1087"]
)
def test_qwen38_torch_peak_is_the_vision_pass(row: str) -> None:
    # 0.27.1 accounting lines: "1.66 GiB for peak activation" with "0.2 GiB (estimated)"
    # (PR #1139, mnbt 8192, 2 seqs) and "1.59 GiB ... " with "0.13 GiB (estimated)" (#1087;
    # read as mnbt default until session 8, its thread's turn-0 args say mnbt 8192, 2 seqs too):
    # the same 1.46 GiB torch peak, which capsim places in the encoder profile pass (one
    # largest image), not the decoder forward or the sampler. capsim's vision peak from the
    # source reading lands within 10 % of it (nothing fitted; session 8 re-read the pass, bf16
    # pixels + the projection output + its out-of-place all-reduce at TP2, after seeing these
    # rows: 1.55 -> 1.45 GiB).
    from capsim.memory.log_validate import validate_dir

    res = {r.row_id: r for r in validate_dir(LOGS)}
    c = res[row].comparison
    assert c is not None
    peak = next(t for t in c.rows if t.term.startswith("peak activation"))
    assert peak.log == 1.46
    assert peak.capsim is not None and abs(peak.capsim / peak.log - 1) < 0.10
    assert c.plan is not None
    parts = c.plan.activation_parts_bytes
    assert parts["encoder_forward"] >= max(parts["forward"], parts["sampler"])


@pytest.mark.parametrize(
    ("row", "tol"),
    [
        ("qwen36-27b-fp8-2x3090-c3090pr594", 0.001),  # "GPU KV cache size: 300,220 tokens"
        ("qwen36-27b-ar4-2x3090-c3090i642", 0.005),  # "GPU KV cache size: 623,873 tokens"
        ("qwen36-27b-ar4-4x3090-c3090i584", 0.005),  # "GPU KV cache size: 1,774,963 tokens"
    ],
)
def test_recipe_settings_reproduce_the_size_line(row: str, tol: float) -> None:
    # the settings these rows take from their recipe's full args (startups.csv notes) make
    # vLLM 0.24.0's size line (int(max_concurrency x max_model_len), align-mode 2 + k GDN
    # pages) come out of the logged pool; with vLLM's defaults they missed by 1.5-11.4 %
    from capsim.memory.log_validate import validate_dir

    res = {r.row_id: r for r in validate_dir(LOGS)}
    err = res[row].err("kv_cache_tokens_pinned")
    assert err is not None and abs(err) <= tol
