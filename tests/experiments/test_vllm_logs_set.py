"""The validation set of real vLLM start-ups (experiments/vllm_logs/) is well formed.

Checks the CSV schema, that every row's excerpt exists, cites its source and carries the
row's logged figures, and that every model file loads through capsim's HF config loader.
"""

from __future__ import annotations

import csv
import json
import re
from pathlib import Path

import pytest

from capsim.models import PRESETS, model_from_hf_config

SET_DIR = Path(__file__).resolve().parents[2] / "experiments" / "vllm_logs"
COLUMNS = [
    "id",
    "source_url",
    "vllm_version",
    "model_hf_id",
    "quantization",
    "gpu",
    "gpu_total_gib",
    "tp",
    "pp",
    "gmu",
    "max_model_len",
    "max_num_seqs",
    "max_num_batched_tokens",
    "kv_cache_dtype",
    "mamba_ssm_cache_dtype",
    "speculative_config",
    "enable_prefix_caching",
    "mamba_cache_mode",
    "enforce_eager",
    "limit_mm_per_prompt",
    "cudagraph_capture_sizes_max",
    "weights_gib",
    "peak_activation_gib",
    "non_torch_gib",
    "cudagraph_gib",
    "available_kv_gib",
    "kv_cache_tokens",
    "max_concurrency",
    "max_concurrency_tokens",
    "attention_block_size",
    "mamba_page_padding_pct",
    "num_gpu_blocks",
    "notes",
    "role",
]
INT_COLUMNS = [
    "tp",
    "pp",
    "max_model_len",
    "max_num_seqs",
    "max_num_batched_tokens",
    "cudagraph_capture_sizes_max",
    "kv_cache_tokens",
    "max_concurrency_tokens",
    "attention_block_size",
    "num_gpu_blocks",
]
FLOAT_COLUMNS = [
    "gpu_total_gib",
    "gmu",
    "weights_gib",
    "peak_activation_gib",
    "non_torch_gib",
    "cudagraph_gib",
    "available_kv_gib",
    "max_concurrency",
    "mamba_page_padding_pct",
]
# HF ids that capsim already knows as presets (capsim/models.py).
PRESET_IDS = {
    "Qwen/Qwen3.5-35B-A3B": "qwen3.5-35b-a3b",
    "Qwen/Qwen3.5-397B-A17B": "qwen3.5-397b-a17b",
    "Qwen/Qwen3-Next-80B-A3B-Instruct": "qwen3-next-80b-a3b",
}
GDN_PREFIXES = ("Qwen/Qwen3.5-", "Qwen/Qwen3.6-", "Qwen/Qwen3-Next-")


def _rows() -> list[dict[str, str]]:
    with (SET_DIR / "startups.csv").open(newline="") as f:
        reader = csv.DictReader(f)
        assert reader.fieldnames == COLUMNS
        return list(reader)


def _model_files() -> dict[str, Path]:
    files = {}
    for path in sorted((SET_DIR / "models").glob("*.json")):
        files[json.loads(path.read_text())["_hf_id"]] = path
    return files


def _excerpt_lines(row_id: str) -> list[str]:
    return (SET_DIR / "excerpts" / f"{row_id}.log").read_text().splitlines()


def test_schema_ids_and_numbers() -> None:
    rows = _rows()
    assert len(rows) >= 15
    ids = [r["id"] for r in rows]
    assert len(ids) == len(set(ids))
    for r in rows:
        assert re.fullmatch(r"[a-z0-9][a-z0-9.-]*", r["id"]), r["id"]
        # a public page, or this project's own run: "repo:<job file> job <name>"
        assert r["source_url"].startswith(("https://", "repo:")), r["id"]
        if r["source_url"].startswith("repo:"):
            job_file = r["source_url"].removeprefix("repo:").split()[0]
            assert (SET_DIR.parents[1] / job_file).is_file(), r["id"]
        assert r["model_hf_id"] and r["gpu"] and r["vllm_version"], r["id"]
        for col in INT_COLUMNS:
            if r[col]:
                int(r[col])
        for col in FLOAT_COLUMNS:
            if r[col]:
                float(r[col])
        if r["gmu"]:
            assert 0 < float(r["gmu"]) <= 1, r["id"]
        assert r["enable_prefix_caching"] in ("", "True", "False"), r["id"]
        assert r["enforce_eager"] in ("", "True", "False"), r["id"]
        if r["speculative_config"]:
            assert "method" in json.loads(r["speculative_config"]), r["id"]
        if r["limit_mm_per_prompt"]:
            json.loads(r["limit_mm_per_prompt"])


def test_roles_say_fit_or_prediction() -> None:
    # a row that decided a rule or fitted a constant says so; every other row only predicts
    for r in _rows():
        assert r["role"] == "prediction" or r["role"].startswith("fit: "), r["id"]


def test_set_covers_gdn_hybrids() -> None:
    gdn = [r for r in _rows() if r["model_hf_id"].startswith(GDN_PREFIXES)]
    assert len(gdn) >= 8


@pytest.mark.parametrize("row", _rows(), ids=lambda r: r["id"])
def test_excerpt_carries_the_row(row: dict[str, str]) -> None:
    lines = _excerpt_lines(row["id"])
    assert lines[0].startswith("# source: ") and row["source_url"] in lines[0]
    body = "\n".join(line for line in lines if not line.startswith("#"))
    assert body, row["id"]
    if row["available_kv_gib"]:
        number = re.escape(row["available_kv_gib"])
        assert re.search(rf"(?<![\d.]){number} ?GiB", body), row["id"]
    if row["kv_cache_tokens"]:
        tokens = f"{int(row['kv_cache_tokens']):,}"
        assert f"GPU KV cache size: {tokens} tokens" in body, row["id"]
    if row["max_concurrency"]:
        assert f"{row['max_concurrency']}x" in body, row["id"]
    if row["attention_block_size"]:
        assert f"attention block size to {row['attention_block_size']} tokens" in body
    if row["weights_gib"]:
        assert re.search(rf"(?<![\d.]){re.escape(row['weights_gib'])} ?Gi?B", body), row["id"]


def test_every_model_is_known_or_has_a_config() -> None:
    files = _model_files()
    for r in _rows():
        hf_id = r["model_hf_id"]
        if hf_id.startswith("repo:"):  # an emulated shape: a config.json in this repository
            path = SET_DIR.parents[1] / hf_id.removeprefix("repo:")
            assert path.is_file() and model_from_hf_config(path).hidden_size > 0, hf_id
            continue
        assert hf_id in files or hf_id in PRESET_IDS, hf_id
    for preset in PRESET_IDS.values():
        assert preset in PRESETS


@pytest.mark.parametrize("path", sorted((SET_DIR / "models").glob("*.json")), ids=lambda p: p.stem)
def test_model_file_parses(path: Path) -> None:
    raw = json.loads(path.read_text())
    assert raw["_source"], path.name
    spec = model_from_hf_config(path)
    assert spec.hidden_size > 0
    assert spec.num_gdn_layers + spec.num_attn_layers > 0
