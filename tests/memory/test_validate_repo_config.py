"""A validation row whose model is a config file in the repository (``model_hf_id`` =
``repo:PATH``): an emulated shape no checkpoint has, e.g. one TP8 rank of Qwen3.5-397B-A17B
as a TP1 model (experiments/memory_plan/h200/qwen3.5-397b-tp8shape.config.json)."""

from __future__ import annotations

import csv
import shutil
from pathlib import Path

import pytest

from capsim.memory.log_validate import repo_config, resolve_model, validate_dir

REPO = Path(__file__).resolve().parents[2]
EMULATED = REPO / "experiments" / "memory_plan" / "h200" / "qwen3.5-397b-tp8shape.config.json"
HEADER = (REPO / "experiments" / "vllm_logs" / "startups.csv").read_text().splitlines()[0]
CONFIG_REL = "experiments/memory_plan/h200/qwen3.5-397b-tp8shape.config.json"
# A synthetic start-up of the emulated shape: capsim's own figures (prereg_s14.md's, with the
# available KV and tokens of release rule moe_workspace_triton_shapes, session 14: 17.85 GiB and
# 1,140,910 tokens where the pre-registration printed 18.41 and 1,176,994), so the row must
# validate to ~0 error; the excerpt's DEBUG lines are made up in vLLM 0.26's wording.
_INFO = "(EngineCore pid=2) INFO 12-05 01:01:00 [w.py:1] "
_DEBUG = "(EngineCore pid=2) DEBUG 12-05 01:02:01 [v1/worker/gpu_model_runner.py:6688] "
EXCERPT = "".join(
    line + "\n"
    for line in (
        "(APIServer pid=1) INFO 12-05 01:00:00 [api_utils.py:345]  version 0.26.0",
        _INFO + "Model loading took 98.42 GiB memory and 2.0 seconds",
        _INFO + "Setting attention block size to 544 tokens to ensure that attention page size "
        "is >= mamba page size.",
        _INFO + "Padding mamba page size by 2.64% to ensure that mamba page size and attention "
        "page size are exactly equal.",
        _INFO + "Profiling CUDA graph memory: PIECEWISE=49 (largest=512), FULL=49 (largest=512)",
        _DEBUG + "Estimated PIECEWISE CUDA graph memory: 102.00 MiB first-capture + (49-1) × "
        "3.00 MiB per-graph",
        _DEBUG + "Estimated FULL CUDA graph memory: 124.00 MiB first-capture + (49-1) × 3.00 MiB "
        "per-graph",
        _INFO + "Estimated CUDA graph memory: 0.40 GiB total",
        _INFO + "Available KV cache memory: 17.85 GiB",
        _INFO + "GPU KV cache size: 1,140,910 tokens",
    )
)


def _row(model: str) -> dict[str, str]:
    row = dict.fromkeys(HEADER.split(","), "")
    row |= {
        "id": "emulated-397b-tp8shape",
        "source_url": "synthetic (tests/memory/test_validate_repo_config.py)",
        "vllm_version": "0.26.0",
        "model_hf_id": model,
        "quantization": "none (dummy weights)",
        "gpu": "H200",
        "gpu_total_gib": "139.8",
        "tp": "1",
        "pp": "1",
        "gmu": "0.9",
        "max_model_len": "262144",
        "max_num_batched_tokens": "8192",
        "speculative_config": '{"method": "mtp", "num_speculative_tokens": 3}',
        "enable_prefix_caching": "False",
        "enforce_eager": "False",
        "weights_gib": "98.42",
        "cudagraph_gib": "0.40",
        "available_kv_gib": "17.85",
        "kv_cache_tokens": "1140910",
        "attention_block_size": "544",
        "role": "prediction",
    }
    return row


def _set(tmp_path: Path, model: str) -> Path:
    (tmp_path / "experiments" / "memory_plan" / "h200").mkdir(parents=True)
    shutil.copy(EMULATED, tmp_path / CONFIG_REL)
    logs = tmp_path / "experiments" / "vllm_logs"
    (logs / "excerpts").mkdir(parents=True)
    with (logs / "startups.csv").open("w", newline="") as fh:
        w = csv.DictWriter(fh, fieldnames=HEADER.split(","))
        w.writeheader()
        w.writerow(_row(model))
    (logs / "excerpts" / "emulated-397b-tp8shape.log").write_text(EXCERPT)
    return logs


def test_a_repo_config_row_is_planned_from_that_file(tmp_path):
    logs = _set(tmp_path, f"repo:{CONFIG_REL}")
    (r,) = validate_dir(logs)
    assert r.comparison is not None and not r.comparison.failure, r.why
    assert r.model == f"repo:{CONFIG_REL}"
    assert r.comparison.settings.model.name == "qwen3.5-397b-tp8shape.config"
    assert r.comparison.settings.model.hidden_size == 4096
    assert abs(r.err("available_kv")) < 0.005 and abs(r.err("weights")) < 0.005
    status = {row.term: row.status for row in r.comparison.rows}
    assert status["attention block size (tok)"] == "same"
    assert status["mamba page padding (%)"] == "same"
    assert status["CUDA graph estimate (GiB)"] == "within tolerance"


def test_repo_config_errors_name_the_value(tmp_path):
    with pytest.raises(ValueError, match=r"model_hf_id='repo:no/such.json': no file no/such.json"):
        repo_config("repo:no/such.json", tmp_path)
    with pytest.raises(ValueError, match="needs a repository-relative path"):
        repo_config("repo:/abs.json", tmp_path)
    logs = _set(tmp_path, "repo:x")
    (r,) = validate_dir(logs)
    assert r.comparison is None and "no file x above" in r.why


def test_the_real_set_resolves_the_committed_emulation():
    spec = resolve_model(f"repo:{CONFIG_REL}", {}, REPO / "experiments" / "vllm_logs")
    assert (spec.num_attention_heads, spec.num_kv_heads) == (4, 1)
    assert (spec.linear_num_key_heads, spec.linear_num_value_heads) == (2, 8)
    assert (spec.moe_intermediate_size, spec.num_experts, spec.num_mtp_layers) == (128, 512, 1)
