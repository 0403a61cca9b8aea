"""Session 8 (issue 25): two rules read from vLLM's source about the CUDA-graph figures.

1. The first FULL sample of ``profile_cudagraph_memory`` is taken after the PIECEWISE ones in
   the same profiling pool (0.19.0 v1/cudagraph_dispatcher.py:get_capture_descs, PIECEWISE
   first then FULL; v1/worker/gpu_model_runner.py:profile_cudagraph_memory, one
   graph_pool_handle for every wrapper), so it pays FlashAttention's split-KV accumulators and
   its own graph, not the forward's intermediates again. Checked on the 0.19.0 DEBUG lines of
   experiments/vllm_logs/excerpts/llama31-8b-h100-tp4-llmdplanner.log ("Estimated FULL CUDA
   graph memory: 70.00 MiB first-capture + (51-1) x 4.00 MiB per-graph") and
   qwen25-7b-h100-tp4-llmdplanner.log ("... 60.00 MiB first-capture").
2. Releases before 0.18.0 have no estimator (profile_cudagraph_memory is absent from the 0.10.2
   to 0.17.1 wheels): the graph figure such a log carries is the pool the captures took,
   "Graph capturing finished in 25 secs, took 2.37 GiB" in
   experiments/vllm_logs/excerpts/qwen3next-80b-h200-tp2-arxivconfi.log (vLLM 0.10.2).
3. A capture does not allocate the fused-MoE caches again: they are views of the persistent
   WorkspaceManager buffer profile_run grew (0.14.0-0.33.0 fused_moe/modular_kernel.py), so the
   first PIECEWISE sample of an MoE model holds only the stream, attention and shared-expert
   tensors (checked on the 0.19.0 MoE rows' and the 0.26.0 H200 row's DEBUG lines).
"""

from __future__ import annotations

from pathlib import Path

import pytest

from capsim.memory import cudagraph as cg
from capsim.memory.activation import captured_forward_bytes, forward_activation_bytes
from capsim.memory.log_validate import log_from_row, model_configs, resolve_model, validate_dir
from capsim.memory.release_rules import rule
from capsim.models import get_model

LOGS = Path(__file__).resolve().parents[2] / "experiments" / "vllm_logs"
MiB = 1024**2
# vLLM's samples are drops of the device's free memory: every DEBUG figure is a multiple of
# 2 MiB, so a modelled sample is checked to that granularity.
SAMPLE_GRANULARITY_BYTES = 2 * MiB


def _descs(full_graphs: bool = True) -> cg.CaptureDescs:
    # 0.19.0 defaults on an H100: max_num_seqs 1024 -> 51 sizes up to 512 in both modes
    return cg.capture_descs(
        vllm_version="0.19.0",
        max_num_seqs=1024,
        num_spec_tok=0,
        max_num_batched_tokens=8192,
        full_graphs=full_graphs,
    )


@pytest.mark.parametrize(
    ("q_heads_per_rank", "layers", "logged_full_first_mib"),
    [(32 // 4, 32, 70.0), (28 // 4, 28, 60.0)],  # Llama-3.1-8B TP4, Qwen2.5-7B TP4 (head 128)
)
def test_first_full_sample_pays_only_what_the_piecewise_pool_cannot_serve(
    q_heads_per_rank: int, layers: int, logged_full_first_mib: float
) -> None:
    descs = _descs()
    assert (
        descs.log_line()
        == "Profiling CUDA graph memory: PIECEWISE=51 (largest=512), FULL=51 (largest=512)"
    )
    samples = cg.modelled_samples(
        descs,
        lambda n: 20 * MiB,  # the forward's intermediates: no longer paid by the FULL sample
        attn_layers=layers,
        fa_split_at=lambda n: cg.fa_split_buffer_bytes(n, q_heads_per_rank, 128),
    )
    full = samples[cg.FULL]
    want = cg.fa_split_buffer_bytes(512, q_heads_per_rank, 128) + full.second_bytes
    assert full.first_bytes == want
    assert abs(full.first_bytes - logged_full_first_mib * MiB) <= SAMPLE_GRANULARITY_BYTES
    # before this rule: max(forward + first-capture overhead, split buffers) = 108 / 109 MiB
    assert full.first_bytes < 20 * MiB + cg.FIRST_CAPTURE_OVERHEAD_BYTES


def test_full_only_captures_start_from_an_empty_pool() -> None:
    piecewise_off = cg.CaptureDescs((), _descs().full_tok)
    samples = cg.modelled_samples(
        piecewise_off,
        lambda n: 20 * MiB,
        attn_layers=32,
        fa_split_at=lambda n: 0,
    )
    assert samples[cg.FULL].first_bytes == 20 * MiB + cg.FIRST_CAPTURE_OVERHEAD_BYTES


def test_estimator_exists_from_0_18_0() -> None:
    assert rule("cudagraph_estimator", "0.17.1") is False
    assert rule("cudagraph_estimator", "0.10.2") is False
    assert rule("cudagraph_estimator", "0.18.0") is True
    assert rule("cudagraph_estimator", "0.19.0") is True


def test_pre_0_18_graph_figure_is_the_captured_pool_not_an_estimate() -> None:
    old = log_from_row({"id": "x", "vllm_version": "0.10.2", "cudagraph_gib": "2.37"})
    assert old.cudagraph_estimate_gib is None
    assert old.cudagraph_actual_gib == pytest.approx(2.37)
    new = log_from_row({"id": "y", "vllm_version": "0.19.0", "cudagraph_gib": "0.91"})
    assert new.cudagraph_estimate_gib == pytest.approx(0.91)
    unknown = log_from_row({"id": "z", "vllm_version": "unknown (nightly)", "cudagraph_gib": "1"})
    assert unknown.cudagraph_estimate_gib == pytest.approx(1.0)


def test_qwen3_next_0_10_2_row_is_not_an_estimate_miss() -> None:
    row = next(r for r in validate_dir(LOGS) if r.row_id == "qwen3next-80b-h200-tp2-arxivconfi")
    assert row.err("cudagraph_estimate") is None


def test_capture_grid_steps_by_8_to_512_before_0_12() -> None:
    # qwen3next-80b-h200-tp2-arxivconfi (vLLM 0.10.2, max_num_seqs 1024): the source log
    # (tmp_memo.md at 4a05207) prints "Capturing CUDA graphs (mixed prefill-decode, PIECEWISE):
    # 67/67" and "Capturing CUDA graphs (decode, FULL): 67/67"; 0.12.0+ step by 16 from 256
    for version, n in (("0.10.2", 67), ("0.11.0", 67), ("0.12.0", 51), ("0.19.0", 51)):
        descs = cg.capture_descs(
            vllm_version=version, max_num_seqs=1024, num_spec_tok=0, max_num_batched_tokens=8192
        )
        assert (descs.count(cg.PIECEWISE), descs.count(cg.FULL)) == (n, n), version
    old = cg.capture_descs(
        vllm_version="0.10.2", max_num_seqs=1024, num_spec_tok=0, max_num_batched_tokens=8192
    )
    assert old.piecewise_tok[:3] == (512, 504, 496) and old.piecewise_tok[-4:] == (8, 4, 2, 1)


@pytest.mark.parametrize(
    ("hf_id", "tp", "logged_piecewise_first_mib"),
    [
        # "Estimated PIECEWISE CUDA graph memory: X MiB first-capture" in the 0.19.0 excerpts
        ("mistralai/Mixtral-8x7B-Instruct-v0.1", 2, 84.0),  # mixtral-8x7b-h100-tp2-llmdplanner
        ("Qwen/Qwen3-30B-A3B", 1, 108.0),  # qwen3-30b-a3b-h100-tp1-llmdplanner
        ("Qwen/Qwen1.5-MoE-A2.7B", 1, 96.0),  # qwen15-moe-a27b-h100-tp1-llmdplanner
    ],
)
def test_piecewise_first_sample_does_not_repay_the_moe_workspace(
    hf_id: str, tp: int, logged_piecewise_first_mib: float
) -> None:
    # the fused-MoE caches live in the WorkspaceManager buffer profile_run grew to 8192 tokens
    # (0.19.0 fused_moe/modular_kernel.py:_allocate_buffers, v1/worker/workspace.py), so the
    # capture at 512 tokens does not allocate them again
    model = resolve_model(hf_id, model_configs(LOGS))
    logged = logged_piecewise_first_mib * MiB
    new = captured_forward_bytes(model, tp, 512) + cg.FIRST_CAPTURE_OVERHEAD_BYTES
    old = forward_activation_bytes(model, tp, 512) + cg.FIRST_CAPTURE_OVERHEAD_BYTES
    assert abs(new - logged) < abs(old - logged)
    assert abs(new - logged) <= 16 * MiB


def test_h200_piecewise_first_sample_predicted() -> None:
    # excerpts/h200-35b-g090-k0-debug-s5call15.log line 21 (vLLM 0.26.0, Qwen3.5-35B-A3B TP1):
    # "Estimated PIECEWISE CUDA graph memory: 116.00 MiB first-capture"; the first-capture
    # overhead is fitted on a dense TP1 row (llama31-8b-h100-tp1-llmdplanner), not on this one
    model = get_model("qwen3.5-35b-a3b")
    first = captured_forward_bytes(model, 1, 512) + cg.FIRST_CAPTURE_OVERHEAD_BYTES
    assert abs(first - 116 * MiB) <= SAMPLE_GRANULARITY_BYTES


def test_dense_capture_still_pays_its_mlp() -> None:
    model = resolve_model("meta-llama/Llama-3.1-8B-Instruct", model_configs(LOGS))
    assert captured_forward_bytes(model, 1, 512) == forward_activation_bytes(model, 1, 512)
