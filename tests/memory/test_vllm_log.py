"""Parsing real vLLM start-up logs (excerpts in experiments/vllm_logs/excerpts/, each with
its public source on its first line) and comparing them with capsim's plan."""

from __future__ import annotations

from pathlib import Path

import pytest
from click.testing import CliRunner

from capsim.commands.main import main
from capsim.memory.vllm_log import parse_vllm_log, read_vllm_log

EXCERPTS = Path(__file__).resolve().parents[2] / "experiments" / "vllm_logs" / "excerpts"


def test_gh50722_v026_actual_usage_line() -> None:
    """vllm issue #50722 (Qwen3.5-35B-A3B, TP4, 0.26.0): the pre-0.27 'Actual usage' form."""
    log = read_vllm_log(EXCERPTS / "qwen35-35b-tp4-gh50722.log")
    assert log.vllm_version == "0.26.0"
    assert (log.tp, log.gmu, log.max_model_len, log.max_num_batched_tokens) == (
        4,
        0.85,
        183872,
        40000,
    )
    assert log.served_model_name == "Qwen/Qwen3.5-35B-A3B"
    assert (log.gpu_free_gib, log.gpu_total_gib, log.requested_gib) == (77.78, 79.33, 67.43)
    assert (log.weights_gib, log.peak_activation_gib, log.non_torch_gib) == (16.92, 5.66, 0.13)
    assert (log.cudagraph_actual_gib, log.cudagraph_estimate_gib) == (1.34, 1.32)
    assert log.available_kv_gib == 43.4  # "Current kv cache memory in use is 43.4 GiB"
    assert "kv_cache_tokens" in log.missing() and "weights_gib" not in log.missing()


def test_club3090_i104_truncated_args_padding_and_graph_estimate() -> None:
    """noonghunna/club-3090 #104 (Qwen3.6-27B AutoRound, 2x3090): a cut args dict."""
    log = read_vllm_log(EXCERPTS / "qwen36-27b-ar4-2x3090-c3090i104.log")
    assert (log.tp, log.max_num_seqs, log.max_num_batched_tokens) == (2, 2, 8192)
    assert (log.kv_cache_dtype, log.quantization) == ("fp8_e5m2", "auto_round")
    assert (log.num_speculative_tokens, log.speculative_method) == (3, "mtp")
    assert log.enable_prefix_caching is True
    assert log.padding_layers == [3]
    assert log.cudagraph_estimate_gib == 0.13 and log.available_kv_gib == 11.06
    assert log.gmu == 0.92  # from the CUDA-graph line ("--gpu-memory-utilization=0.9200 is ...")


def test_engine_init_line_gives_version_tp_and_spec() -> None:
    """club-3090 #642: settings from 'Initializing a V1 LLM engine (v0.24.0) with config'."""
    log = read_vllm_log(EXCERPTS / "qwen36-27b-ar4-2x3090-c3090i642.log")
    assert log.vllm_version == "0.24.0"
    assert (log.tp, log.max_model_len, log.enforce_eager) == (2, 262144, False)
    assert (log.kv_cache_tokens, log.max_concurrency, log.max_concurrency_tokens) == (
        623873,
        2.38,
        262144,
    )


def test_v033_consumed_memory_form_splits_the_graph_estimate() -> None:
    """0.33's wording (gpu_worker.py: 'X GiB for consumed memory (weights + non-torch), A GiB
    for peak activation' where A includes the charged graph estimate). Synthetic line in
    that format; the figures are made up."""
    text = (
        "INFO [gpu_model_runner.py] Model loading took 16.40 GiB memory and 20.1 seconds\n"
        "INFO [gpu_model_runner.py] Estimated CUDA graph memory: 0.50 GiB total\n"
        "INFO [gpu_worker.py] Free memory on device (139.0/139.8 GiB) on startup. Desired GPU "
        "memory utilization is (0.9, 125.82 GiB). Actual usage is 16.60 GiB for consumed "
        "memory (weights + non-torch), 3.50 GiB for peak activation, and 0.55 GiB for "
        "CUDAGraph memory. Replace gpu_memory_utilization config with ...\n"
    )
    log = parse_vllm_log(text)
    assert log.weights_gib == 16.40 and log.consumed_gib == 16.60
    assert log.non_torch_gib == pytest.approx(0.20)
    assert log.peak_activation_incl_graph_gib == 3.50
    assert log.peak_activation_gib == pytest.approx(3.00)
    assert log.cudagraph_actual_gib == 0.55 and log.gmu == 0.9


def test_a_log_without_memory_lines_is_refused(tmp_path: Path) -> None:
    p = tmp_path / "empty.log"
    p.write_text("hello\nworld\n")
    with pytest.raises(ValueError, match="no vLLM start-up line"):
        read_vllm_log(p)


def test_from_log_names_what_is_missing_and_compares(tmp_path: Path) -> None:
    res = CliRunner().invoke(
        main,
        [
            "memory",
            "--from-log",
            str(EXCERPTS / "qwen35-35b-tp4-gh50722.log"),
            "--gpu",
            "H100",
            "-k",
            "0",
        ],
    )
    assert res.exit_code == 0, res.output
    assert "the log lacks: kv_cache_tokens, attention_block_size" in res.output
    assert "weights (GiB)" in res.output and "16.92" in res.output
    assert "differs:" in res.output
    assert "pool pinned to the log's available KV" in res.output


def test_from_log_unknown_model_asks_for_one(tmp_path: Path) -> None:
    p = tmp_path / "x.log"
    p.write_text("INFO [gpu_worker.py] Available KV cache memory: 10.00 GiB\n")
    res = CliRunner().invoke(main, ["memory", "--from-log", str(p)])
    assert res.exit_code != 0
    assert "give --model" in res.output


def test_capture_sizes_match_the_logged_graph_counts() -> None:
    """'Profiling CUDA graph memory: PIECEWISE=5 (largest=16)' (club-3090 #104: max_num_seqs
    2, MTP k=3) and 'PIECEWISE=51 (largest=512), FULL=35 (largest=256)' (LMCache #3430:
    max_num_seqs 256, no drafts, A5000 tier) against capsim's capture_descs."""
    from capsim.memory.cudagraph import capture_descs

    log = read_vllm_log(EXCERPTS / "qwen36-27b-ar4-2x3090-c3090i104.log")
    assert (log.cudagraph_piecewise, log.cudagraph_largest) == (5, 16)
    assert log.full_graphs is False  # PIECEWISE only: the FlashInfer fallback
    d = capture_descs(
        vllm_version="0.24",
        max_num_seqs=2,
        num_spec_tok=3,
        max_num_batched_tokens=8192,
        full_graphs=False,
    )
    assert (len(d.piecewise_tok), d.largest_tok) == (5, 16)
    log = read_vllm_log(EXCERPTS / "qwen3-8b-a5000-lmcache3430.log")
    assert (log.cudagraph_piecewise, log.cudagraph_full, log.cudagraph_largest) == (51, 35, 512)
    d = capture_descs(
        vllm_version="0.21", max_num_seqs=256, num_spec_tok=0, max_num_batched_tokens=2048
    )
    assert (len(d.piecewise_tok), len(d.full_tok), d.largest_tok, d.full_tok[0]) == (
        51,
        35,
        512,
        256,
    )
