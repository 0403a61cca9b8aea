# ruff: noqa: E501
"""capsim engine record on start-up logs: a DEBUG-level start-up to the KV line (session 5's
``s_g090_k*_debug_kv`` jobs) and an INFO one, from what vLLM 0.26.0 prints."""

from __future__ import annotations

import json
from pathlib import Path

from capsim.live.engine_record import excerpt_lines, record_startup

# Lines as vLLM 0.26.0 prints them at DEBUG level (format of gpu_model_runner.py
# profile_cudagraph_memory's logger.debug, the INFO lines of a kv-only start-up around it)
DEBUG_LOG = """\
(APIServer pid=1) DEBUG 12-02 08:30:01 [utils/import_utils.py:80] torch version 2.11.0 Error-free import
(APIServer pid=1) INFO 12-02 08:30:01 [api_utils.py:345]  version 0.26.0
(APIServer pid=1) DEBUG 12-02 08:30:01 [plugins/__init__.py:40] No plugins for group vllm.platform_plugins found.
(APIServer pid=1) INFO 12-02 08:30:02 [scheduler.py:252] Chunked prefill is enabled with max_num_batched_tokens=8192.
(EngineCore pid=2) INFO 12-02 08:30:30 [gpu_model_runner.py:5347] Model loading took 65.53 GiB memory and 1.2 seconds
(EngineCore pid=2) INFO 12-02 08:30:30 [interface.py:905] Setting attention block size to 1056 tokens to ensure that attention page size is >= mamba page size.
(EngineCore pid=2) DEBUG 12-02 08:30:31 [v1/worker/gpu_worker.py:284] worker init memory snapshot: torch_peak=0.0GiB, free_memory=139.29GiB
(EngineCore pid=2) DEBUG 12-02 08:30:40 [v1/worker/gpu_model_runner.py:5000] some other debug line with WARNING in it
(EngineCore pid=2) INFO 12-02 08:30:41 [gpu_model_runner.py:6612] Profiling CUDA graph memory: PIECEWISE=51 (largest=512), FULL=51 (largest=512)
(EngineCore pid=2) DEBUG 12-02 08:30:42 [v1/worker/gpu_model_runner.py:6689] Estimated PIECEWISE CUDA graph memory: 120.00 MiB first-capture + (51-1) × 4.00 MiB per-graph
(EngineCore pid=2) DEBUG 12-02 08:30:43 [v1/worker/gpu_model_runner.py:6689] Estimated FULL CUDA graph memory: 360.00 MiB first-capture + (51-1) × 2.00 MiB per-graph
(EngineCore pid=2) INFO 12-02 08:30:43 [gpu_model_runner.py:6737] Estimated CUDA graph memory: 0.55 GiB total
(EngineCore pid=2) INFO 12-02 08:30:44 [gpu_worker.py:560] Available KV cache memory: 55.24 GiB
(EngineCore pid=2) INFO 12-02 08:30:44 [kv_cache_utils.py:2177] GPU KV cache size: 2,852,376 tokens
"""


def _job(tmp_path: Path, log: str, log_level: str | None) -> Path:
    jdir = tmp_path / "s_g090_k0_debug_kv"
    jdir.mkdir()
    (jdir / "server.log").write_text(log)
    srv = {"gpu_memory_utilization": 0.9, "num_speculative_tokens": 0, "max_num_seqs": None}
    srv |= {"max_num_batched_tokens": None, "enable_prefix_caching": None, "log_level": log_level}
    (jdir / "job.json").write_text(json.dumps({"kind": "startup", "mode": "kv", "server": srv}))
    res = {"outcome": "kv_line", "startup_s": 95.0, "kv_line_s": 95.0, "t_unix_s": 1.0}
    (jdir / "result.json").write_text(json.dumps(res))
    return jdir


def test_debug_startup_keeps_the_per_mode_graph_estimates(tmp_path):
    row = record_startup(_job(tmp_path, DEBUG_LOG, "DEBUG"), tmp_path / "dest")
    assert row["log_level"] == "DEBUG" and row["outcome"] == "kv_line"
    assert row["vllm_version"] == "0.26.0"  # not the DEBUG line's "torch version 2.11.0"
    assert row["available_kv_gib"] == 55.24 and row["kv_cache_tokens"] == 2852376
    assert row["attention_block_size"] == 1056 and row["cudagraph_estimate_gib"] == 0.55
    assert json.loads(row["cudagraph_samples_mib"]) == {
        "PIECEWISE": [120.0, 51, 4.0],
        "FULL": [360.0, 51, 2.0],
    }
    kept = (tmp_path / "dest" / "startups" / "s_g090_k0_debug_kv.log").read_text()
    assert "Estimated PIECEWISE CUDA graph memory: 120.00 MiB" in kept
    assert "Estimated FULL CUDA graph memory: 360.00 MiB" in kept
    assert "memory snapshot" in kept
    # other DEBUG lines are left out, even when they contain a kept word (WARNING, version)
    assert "No plugins" not in kept and "some other debug line" not in kept
    assert "torch version" not in kept
    assert kept.count("\n") == 11


def test_info_startup_excerpt_unchanged_by_the_debug_filter():
    info = "\n".join(ln for ln in DEBUG_LOG.splitlines() if " DEBUG " not in ln)
    kept = excerpt_lines(info)
    assert len(kept) == 8  # every INFO line above is one capsim reads
    assert not any("first-capture" in ln for ln in kept)
