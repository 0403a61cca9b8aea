"""Session 8 (issue 25): the GeForce / workstation rows of the CUDA-graph estimate.

Only one row's inputs changed: c3090 #1087 (2x RTX 5090, vLLM 0.27.1) now carries the settings
of its own thread's turn 0 (the args line and the v0.27.1 engine line, in the excerpt). The
per-graph and first-capture samples were not changed: on these rows they depend on the
driver, PyTorch's allocator and NCCL, which vLLM's source does not determine (report of
session 8; the rows' notes say what was checked).
"""

from __future__ import annotations

import csv
import json
from pathlib import Path

from capsim.memory.log_validate import validate_dir
from capsim.memory.vllm_log import read_vllm_log

LOGS = Path(__file__).resolve().parents[2] / "experiments" / "vllm_logs"
ROW = "qwen38-27b-fp8-2x5090-c3090i1087"


def _row(row_id: str) -> dict[str, str]:
    with (LOGS / "startups.csv").open(newline="") as fh:
        return next(r for r in csv.DictReader(fh) if r["id"] == row_id)


def test_i1087_settings_are_the_excerpts_args_line() -> None:
    # excerpt: "(APIServer pid=1) INFO 08-22 04:39:00 [api_utils.py:273] non-default args: {...
    # 'tensor_parallel_size': 2, 'kv_cache_dtype': 'fp8', 'enable_prefix_caching': True,
    # 'max_num_batched_tokens': 8192, 'max_num_seqs': 2, ... 'speculative_config': {'method':
    # 'mtp', 'num_speculative_tokens': 3}}" (club-3090 #1087 turn 0) and "Initializing a V1 LLM
    # engine (v0.27.1)"; the CSV columns must say the same
    ex = read_vllm_log(LOGS / "excerpts" / f"{ROW}.log")
    row = _row(ROW)
    assert ex.vllm_version == row["vllm_version"] == "0.27.1"
    assert ex.tp == int(row["tp"]) == 2
    assert ex.max_num_seqs == int(row["max_num_seqs"]) == 2
    assert ex.max_num_batched_tokens == int(row["max_num_batched_tokens"]) == 8192
    assert ex.max_model_len == int(row["max_model_len"]) == 262144
    assert ex.kv_cache_dtype == row["kv_cache_dtype"] == "fp8"
    assert ex.enable_prefix_caching is True and row["enable_prefix_caching"] == "True"
    spec = json.loads(row["speculative_config"])
    assert ex.num_speculative_tokens == spec["num_speculative_tokens"] == 3


def test_i1087_captures_what_the_flashinfer_warning_says() -> None:
    # excerpt: "CUDAGraphMode.FULL_AND_PIECEWISE is not supported with spec-decode for attention
    # backend FlashInferBackend ... setting cudagraph_mode=PIECEWISE" (fp8 KV on sm_120 selects
    # FlashInfer: cudagraph.attention_backend); with 2 sequences at k=3 the capture ceiling is
    # 2 x 4 x 2 = 16 tokens: PIECEWISE [16, 8, 4, 2, 1], as the same recipe logs on 2x3090 at
    # 0.24.0 ("Profiling CUDA graph memory: PIECEWISE=5 (largest=16)", club-3090 #104 / #584).
    # With vLLM's defaults (k=0, 256 sequences) capsim planned PIECEWISE=51 + FULL=35.
    res = {r.row_id: r for r in validate_dir(LOGS)}
    plan = res[ROW].comparison.plan  # type: ignore[union-attr]
    assert plan is not None
    assert plan.cudagraph_piecewise_graphs == 5
    assert plan.cudagraph_full_graphs == 0
    assert plan.cudagraph_capture_max == 16
