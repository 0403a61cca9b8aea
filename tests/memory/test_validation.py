"""capsim memory --validate reproduces every row of experiments/vllm_logs/startups.csv."""

from __future__ import annotations

import csv
import json
from pathlib import Path

from click.testing import CliRunner

from capsim.commands.main import main
from capsim.memory.log_validate import validate_dir
from capsim.models import model_from_hf_config

LOGS = Path(__file__).resolve().parents[2] / "experiments" / "vllm_logs"


def test_every_row_gets_a_result_and_every_miss_a_why(tmp_path: Path) -> None:
    results = validate_dir(LOGS)
    with (LOGS / "startups.csv").open() as fh:
        ids = [r["id"] for r in csv.DictReader(fh)]
    assert [r.row_id for r in results] == ids
    for r in results:
        kv = r.err("available_kv")
        if r.comparison is None or (kv is not None and abs(kv) > 0.10):
            assert r.why, r.row_id
    with (LOGS / "startups.csv").open() as fh:
        fits = {r["id"] for r in csv.DictReader(fh) if r["role"].startswith("fit: ")}
    assert {r.row_id for r in results if r.role != "prediction"} == fits
    out = tmp_path / "v.csv"
    res = CliRunner().invoke(main, ["memory", "--validate", str(LOGS), "--validate-out", str(out)])
    assert res.exit_code == 0, res.output
    assert "available_kv (target" in res.output and "weights (target" in res.output
    assert "prediction rows" in res.output and "fit rows" in res.output
    with out.open() as fh:
        assert len(list(csv.DictReader(fh))) == len(ids)


def test_validate_json_summary() -> None:
    res = CliRunner().invoke(main, ["memory", "--validate", str(LOGS), "--json"])
    s = json.loads(res.output)
    assert s["rows"] >= 15 and s["available_kv_all_n"] > 0


def test_hf_config_vision_and_quantization() -> None:
    m = model_from_hf_config(LOGS / "models" / "qwen3.6-27b.json")
    assert m.vision is not None and m.vision.depth == 27
    fp8 = model_from_hf_config(LOGS / "models" / "qwen3-235b-a22b-fp8.json")
    assert fp8.quantization == "fp8"
    ct = model_from_hf_config(LOGS / "models" / "llama-3.3-70b-instruct-fp8-dynamic.json")
    assert ct.quantization == "fp8" and ct.vision is None


def test_h200_startups_validate_with_their_refusal() -> None:
    """The real vLLM 0.26.0 H200 start-ups (issue 21's engine runs, one fit row, two
    predictions): block size exact, and vLLM's Mamba-blocks refusal reproduced."""
    h200 = LOGS.parents[1] / "experiments" / "memory_plan" / "h200"
    results = {r.row_id: r for r in validate_dir(h200)}
    assert results["h200-35b-g090-k3"].role.startswith("fit: ")
    for rid in ("h200-35b-g090-k3", "h200-35b-g060-k3-mns256"):
        rows = {t.term: t for t in results[rid].comparison.rows}
        assert rows["attention block size (tok)"].status == "same", rid
    refused = results["h200-35b-g060-k3-refused"]
    assert "exceeds available Mamba cache blocks" in refused.why
    for r in results.values():
        assert abs(r.err("available_kv")) < 0.05, r.row_id
