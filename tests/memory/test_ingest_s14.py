"""The session-14 ingest (experiments/memory_plan/h200/ingest_s14.md): a synthetic results
folder of call 44's job goes through `capsim engine record` and ingest_s14.py into a
validation set that `capsim memory --validate` plans from the emulated config file."""

from __future__ import annotations

import importlib.util
import json
import shutil
from pathlib import Path

from click.testing import CliRunner

from capsim.commands.main import main
from capsim.memory.log_validate import validate_dir
from tests.memory.test_validate_repo_config import CONFIG_REL, EMULATED, EXCERPT

REPO = Path(__file__).resolve().parents[2]
SCRIPT = REPO / "experiments" / "memory_plan" / "h200" / "ingest_s14.py"


def _ingest_module():
    spec = importlib.util.spec_from_file_location("ingest_s14", SCRIPT)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def _results(tmp_path: Path, job: str) -> Path:
    jdir = tmp_path / "raw" / job
    jdir.mkdir(parents=True)
    (jdir / "server.log").write_text(EXCERPT)
    server = {"gpu_memory_utilization": 0.9, "num_speculative_tokens": 3, "max_num_seqs": None}
    server |= {"max_num_batched_tokens": None, "enable_prefix_caching": False}
    server |= {"log_level": "DEBUG", "model_config": CONFIG_REL}
    (jdir / "job.json").write_text(json.dumps({"kind": "startup", "server": server}))
    res = {"outcome": "ready", "startup_s": 400.0, "kv_line_s": 300.0, "t_unix_s": 1.0}
    (jdir / "result.json").write_text(json.dumps(res))
    (jdir / "metrics_idle.txt").write_text(
        'vllm:cache_config_info{block_size="544",num_gpu_blocks="2150"} 1.0\n'
    )
    return tmp_path / "raw"


def test_record_then_ingest_then_validate(tmp_path):
    mod = _ingest_module()
    root = tmp_path / "repo"
    (root / CONFIG_REL).parent.mkdir(parents=True)
    shutil.copy(EMULATED, root / CONFIG_REL)
    logs = root / "experiments" / "vllm_logs"
    (logs / "excerpts").mkdir(parents=True)
    header = (REPO / "experiments" / "vllm_logs" / "startups.csv").read_text().splitlines()[0]
    (logs / "startups.csv").write_text(header + "\n")
    raw = _results(tmp_path, mod.JOB)
    dest = root / "experiments" / "engine"
    res = CliRunner().invoke(main, ["engine", "record", str(raw), "--dest", str(dest)])
    assert res.exit_code == 0, res.output
    assert mod.main(["--raw", "/raw/dev44", "--root", str(root)]) == 0
    assert mod.main(["--raw", "/raw/dev44", "--root", str(root)]) == 2  # no second copy
    (r,) = validate_dir(logs)
    assert r.row_id == mod.ROW_ID and r.model == f"repo:{CONFIG_REL}"
    assert r.comparison is not None and abs(r.err("available_kv")) < 0.005, r.why
    text = (logs / "excerpts" / f"{mod.ROW_ID}.log").read_text()
    assert text.startswith(f"# source: {mod.SOURCE}\n")
    assert "Available KV cache memory: 17.85 GiB" in text
    assert "Estimated FULL CUDA graph memory: 124.00 MiB" in text  # the DEBUG line kept
    row = (logs / "startups.csv").read_text().splitlines()[1]
    assert ",2150," in row and ",544," in row and row.endswith(",prediction")
