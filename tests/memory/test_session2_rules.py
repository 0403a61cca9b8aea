"""Session 2 rules of the memory plan (issue 25), each with the log lines it reproduces.

- The tensors ``profile_run`` holds beside the dummy sampler (hidden states of the dummy
  forward, its last rows and their ``rand_like`` copy) and vLLM's Triton top-k/top-p buffer
  (0.19.0-0.33.0 ``v1/worker/gpu_model_runner.py``, ``v1/sample/ops/topk_topp_triton.py``).
- The runner's persistent buffers are charged to no term (allocated before
  ``memory_profiling``; 0.19.0-0.33.0 ``v1/worker/gpu_worker.py``).
"""

from __future__ import annotations

import csv
from pathlib import Path

from capsim.config import EngineConfig, SpecDecodeConfig
from capsim.gpus import get_gpu
from capsim.memory.activation import triton_topk_buffer_bytes
from capsim.memory.log_validate import validate_dir
from capsim.memory.memory_plan import plan_memory
from capsim.memory.terms import Source
from capsim.models import get_model

LOGS = Path(__file__).resolve().parents[2] / "experiments" / "vllm_logs"
# stock vLLM 0.19.0 H100 DEBUG start-ups (llm-d-planner) that log "X GiB for peak activation";
# all of them are prediction rows except the two named fits of the non-torch term
H100_019 = (
    "llama31-8b-h100-tp1-llmdplanner",
    "llama31-8b-h100-tp4-llmdplanner",
    "qwen3-8b-h100-tp1-llmdplanner",
    "qwen3-30b-a3b-h100-tp1-llmdplanner",
    "qwen25-72b-h100-tp2-llmdplanner",
    "llama33-70b-fp8dyn-h100-tp4-llmdplanner",
)


def _peak_rows() -> dict[str, tuple[float, float]]:
    out = {}
    for r in validate_dir(LOGS):
        if r.row_id in H100_019 and r.comparison is not None:
            for t in r.comparison.rows:
                if t.term.startswith("peak activation") and t.log is not None:
                    out[r.row_id] = (t.log, t.capsim)
    return out


def test_sampler_peak_with_held_tensors_reproduces_the_h100_019_logs() -> None:
    # logged 1.89 (Llama-3.1-8B), 2.21 (Qwen3-8B), 2.68 (Qwen3-30B-A3B), 2.29 (Qwen2.5-72B),
    # 1.97 GiB (Llama-3.3-70B): before session 2 capsim was 0.12-0.26 GiB under on each
    rows = _peak_rows()
    assert set(rows) == set(H100_019)
    for rid, (logged, mine) in rows.items():
        assert abs(mine - logged) / logged < 0.03, (rid, logged, mine)


def test_triton_topk_buffer_rows() -> None:
    m = get_model("qwen3.5-35b-a3b")
    # min(next_power_of_2(min(SMs, n)), SMs) rows of fp32 vocab; unused under 8 rows
    assert triton_topk_buffer_bytes(m, 4, 132) == 0
    assert triton_topk_buffer_bytes(m, 100, 132) == 128 * m.vocab_size * 4
    assert triton_topk_buffer_bytes(m, 1024, 132) == 132 * m.vocab_size * 4


def test_runner_buffers_are_not_charged_before_0_27() -> None:
    # vLLM's logged parts add up to gmu x total without them, e.g. the H100 row
    # llama31-8b-h100-tp1-llmdplanner: 14.99 + 1.89 + 0.25 + 58.11 = 75.24 = 0.95 x 79.19
    with (LOGS / "startups.csv").open() as fh:
        row = next(r for r in csv.DictReader(fh) if r["id"] == "llama31-8b-h100-tp1-llmdplanner")
    parts = sum(
        float(row[c]) for c in ("weights_gib", "peak_activation_gib", "non_torch_gib")
    ) + float(row["available_kv_gib"])
    assert abs(parts - 0.95 * float(row["gpu_total_gib"])) < 0.02
    plan = plan_memory(
        get_model("qwen3.5-35b-a3b"),
        get_gpu("H200"),
        EngineConfig(gmu=0.9, vllm_version="0.26.0"),
        SpecDecodeConfig(),
    )
    t = plan.terms["runner_buffers"]
    assert t.bytes == 0 and t.source is Source.NOT_CHARGED and "GiB" in t.detail


def test_engine_config_line_gives_prefix_caching() -> None:
    # "Initializing a V1 LLM engine (v0.26.0) with config: ... enable_prefix_caching=False"
    # (experiments/vllm_logs/excerpts/h200-35b-g090-k0-s2call4.log): the resolved setting
    from capsim.memory.vllm_log import read_vllm_log

    log = read_vllm_log(LOGS / "excerpts" / "h200-35b-g090-k0-s2call4.log")
    assert log.enable_prefix_caching is False
    assert log.num_speculative_tokens is None or log.num_speculative_tokens == 0
    assert log.vllm_version == "0.26.0" and log.gmu == 0.9


def test_rope_cache_is_in_the_logged_weights() -> None:
    # "Model loading took X GiB" includes the RoPE cos_sin_cache (rotary_embedding/base.py,
    # mrope.py: 4 x positions for multimodal RoPE). Qwen3.5-35B-A3B on the H200, k=0:
    # 65.53 GiB logged (h200-35b-g090-k0-s2call4); Llama-3.1-8B on the H100: 14.99 GiB
    from capsim.memory.weights import rotary_cache_bytes

    m = get_model("qwen3.5-35b-a3b")
    assert rotary_cache_bytes(m) == 4 * 262144 * 64 * 2  # 128 MiB
    plan = plan_memory(
        m,
        get_gpu("H200"),
        EngineConfig(gmu=0.9, vllm_version="0.26.0", enable_prefix_caching=False),
        SpecDecodeConfig(num_spec_tok=0),
    )
    assert abs(plan.weights_bytes / 2**30 - 65.53) < 0.02  # was 0.14 GiB under
    rows = {}
    for r in validate_dir(LOGS):
        for t in r.comparison.rows if r.comparison else ():
            if t.term.startswith("weights") and t.log is not None:
                rows[r.row_id] = (t.log, t.capsim)
    logged, mine = rows["llama31-8b-h100-tp1-llmdplanner"]
    assert abs(mine - logged) < 0.006
