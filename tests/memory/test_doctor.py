"""capsim doctor on real start-ups: refusals, hazards and admitted concurrency."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from capsim.commands.main import main
from capsim.config import EngineConfig, SpecDecodeConfig
from capsim.gpus import get_gpu
from capsim.memory.doctor import diagnose, engine_from_command
from capsim.models import get_model

EXCERPTS = Path(__file__).resolve().parents[2] / "experiments" / "vllm_logs" / "excerpts"
MTP3 = '--speculative-config \'{"method": "mtp", "num_speculative_tokens": 3}\''


def test_h200_gmu_06_is_refused_before_the_user_meets_it() -> None:
    # REAL_VLLM_H200.md: vLLM 0.26.0 refused gmu 0.6, k=3: "max_num_seqs (1024) exceeds
    # available Mamba cache blocks (339)"; capsim's pool is a few blocks larger (347)
    res = CliRunner().invoke(
        main,
        [
            "doctor",
            "--vllm-version",
            "0.26.0",
            "--gpu",
            "H200",
            "--command",
            f"vllm serve Qwen/Qwen3.5-35B-A3B --gpu-memory-utilization 0.6 {MTP3}",
            "--json",
        ],
    )
    assert res.exit_code == 0, res.output
    d = json.loads(res.output)
    assert "exceeds available Mamba cache blocks" in d["refusal"]
    assert "mamba_blocks_refusal" in {h["key"] for h in d["hazards"]}


def test_h200_gmu_09_admits_and_prices_the_graph_transient() -> None:
    engine, k = engine_from_command(
        f"vllm serve Qwen/Qwen3.5-35B-A3B --gpu-memory-utilization 0.9 {MTP3}",
        EngineConfig(vllm_version="0.26.0"),
    )
    r = diagnose(
        get_model("qwen3.5-35b-a3b"), get_gpu("H200"), engine, SpecDecodeConfig(num_spec_tok=k)
    )
    assert r.refusal is None and r.admitted[2048] > r.admitted[32768] > 0
    keys = {f.hazard.key: f.cost for f in r.findings}
    assert "GiB of the pool" in keys["cudagraph_gdn_transient"]
    assert "kv_cache_memory_suggestion_double_counts_graphs" not in keys  # 0.27+ only


def test_align_mode_inflation_only_from_0_33() -> None:
    model, gpu, spec = get_model("qwen3.5-35b-a3b"), get_gpu("H200"), SpecDecodeConfig()
    old = diagnose(
        model, gpu, EngineConfig(vllm_version="0.32.0", gmu=0.9, enable_prefix_caching=True), spec
    )
    new = diagnose(
        model, gpu, EngineConfig(vllm_version="0.33.0", gmu=0.9, enable_prefix_caching=True), spec
    )
    assert "align_mode_block_inflation" not in {f.hazard.key for f in old.findings}
    cost = {f.hazard.key: f.cost for f in new.findings}["align_mode_block_inflation"]
    assert cost.startswith("block 1072 -> 1088")  # 16- vs 64-token alignment at k=3


def test_doctor_runs_on_every_plannable_validation_row() -> None:
    """Every row of experiments/vllm_logs that capsim can plan gets a report: admitted
    concurrency or a named refusal, and the hazards of its release."""
    import csv

    from capsim.memory.doctor import engine_from_log
    from capsim.memory.log_validate import (
        gpu_from_text,
        log_from_row,
        model_configs,
        resolve_model,
        with_excerpt,
    )

    root = EXCERPTS.parent
    configs = model_configs(root)
    done = 0
    for row in csv.DictReader((root / "startups.csv").open()):
        log = with_excerpt(log_from_row(row), EXCERPTS / f"{row['id']}.log")
        version = log.vllm_version or ""
        if not version[:1].isdigit() or version.startswith("0.6") or row.get("pp", "1") != "1":
            continue
        try:
            model = resolve_model(row["model_hf_id"], configs)
            gpu = gpu_from_text(row["gpu"], log.gpu_total_gib)
        except ValueError:
            continue
        engine, k = engine_from_log(log, EngineConfig(vllm_version=version))
        r = diagnose(model, gpu, engine, SpecDecodeConfig(num_spec_tok=int(k or 0)))
        assert r.refusal or r.admitted, row["id"]
        assert r.findings or not model.is_hybrid, row["id"]
        done += 1
    assert done >= 20


def test_doctor_cli_on_a_log() -> None:
    runner = CliRunner()
    res = runner.invoke(
        main,
        [
            "doctor",
            "--vllm-version",
            "0.26.0",
            "--from-log",
            str(EXCERPTS / "qwen35-35b-tp4-gh50722.log"),
            "-m",
            "qwen3.5-35b-a3b",
            "--gpu-total-gib",
            "79.33",
        ],
    )
    assert res.exit_code == 0, res.output
    assert "admitted at" in res.output and "cudagraph_gdn_transient" in res.output


@pytest.mark.parametrize(
    ("row_id", "k", "block_tok"),
    [("h200-35b-g090-k0-s2call4", 0, 1056), ("h200-35b-g090-k3-s2call3", 3, 1072)],
)
def test_doctor_reads_the_session2_h200_logs(row_id: str, k: int, block_tok: int) -> None:
    # the real start-ups of experiments/engine/jobs/call3.json / call4.json: no --vllm-version
    # (the banner's "version 0.26.0"), no --model (local path -> preset by the logged
    # architecture), k from speculative_config, gmu from the non-default args
    res = CliRunner().invoke(
        main, ["doctor", "--from-log", str(EXCERPTS / f"{row_id}.log"), "-g", "H200", "--json"]
    )
    assert res.exit_code == 0, res.output
    out = json.loads(res.output)
    text = json.dumps(out)
    assert "0.26.0" in text and "qwen3.5-35b-a3b" in text
    plain = CliRunner().invoke(
        main, ["doctor", "--from-log", str(EXCERPTS / f"{row_id}.log"), "-g", "H200"]
    )
    assert f"k={k}," in plain.output and f"blocks of {block_tok} tok" in plain.output
    assert "cudagraph_gdn_transient" in plain.output


def test_doctor_without_a_version_says_which_flag() -> None:
    res = CliRunner().invoke(main, ["doctor", "--command", "vllm serve Qwen/Qwen3.5-35B-A3B"])
    assert res.exit_code != 0
    assert "--vllm-version is required" in res.output
