"""A start-up whose `server.model_config` replaces the model dir's config.json (one TP rank's
shapes, capsim/live/tp_shape.py): the sibling model dir the runner serves, the benches after it,
the up-front check of a missing file and the recorded column."""

from __future__ import annotations

import json
import os
import socket
from pathlib import Path

import pytest

from capsim.live import engine_runner as er
from capsim.live.engine_jobs import resolve_model_config, served_model_dir
from capsim.live.engine_record import record_startup

FAKE = Path(__file__).parent / "fake_vllm"


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _model_dir(tmp_path: Path) -> Path:
    base = tmp_path / "model"
    (base / "datasets").mkdir(parents=True)
    (base / "config.json").write_text('{"text_config": {"hidden_size": 2048}}\n')
    (base / "tokenizer.json").write_text("{}\n")
    (base / "datasets" / "d.jsonl").write_text("{}\n")
    return base


def test_served_model_dir_links_everything_but_the_config(tmp_path):
    base = _model_dir(tmp_path)
    cfg = tmp_path / "qwen3.5-397b-tp8shape.config.json"
    cfg.write_text('{"text_config": {"hidden_size": 4096}}\n')
    dest = served_model_dir(base, cfg)
    assert dest == tmp_path / "model-qwen3.5-397b-tp8shape"
    assert json.loads((dest / "config.json").read_text())["text_config"]["hidden_size"] == 4096
    assert not (dest / "config.json").is_symlink()
    assert (dest / "tokenizer.json").resolve() == (base / "tokenizer.json").resolve()
    assert (dest / "datasets" / "d.jsonl").is_file()
    assert json.loads((base / "config.json").read_text())["text_config"]["hidden_size"] == 2048
    again = served_model_dir(base, cfg)  # idempotent (a second start-up on the same machine)
    assert again == dest and (dest / "tokenizer.json").is_symlink()
    with pytest.raises(ValueError, match="needs a local model dir"):
        served_model_dir(tmp_path / "nowhere", cfg)


def test_resolve_model_config_cwd_then_job_list_folder(tmp_path, monkeypatch):
    jobs_dir = tmp_path / "stage"
    jobs_dir.mkdir()
    (jobs_dir / "c.json").write_text("{}")
    monkeypatch.chdir(tmp_path)
    assert resolve_model_config("stage/c.json") == (jobs_dir / "c.json").resolve()
    assert resolve_model_config("c.json", jobs_dir) == (jobs_dir / "c.json").resolve()
    with pytest.raises(ValueError, match=r"server.model_config='missing.json': no such file"):
        resolve_model_config("missing.json", jobs_dir)


def test_runner_serves_the_sibling_dir_and_benches_name_it(tmp_path, monkeypatch):
    monkeypatch.setenv("PYTHONPATH", str(FAKE) + os.pathsep + os.environ.get("PYTHONPATH", ""))
    monkeypatch.setenv("FAKE_BENCH_S", "0.5")
    base = _model_dir(tmp_path)
    cfg = tmp_path / "shape.config.json"
    cfg.write_text('{"text_config": {"hidden_size": 4096}}\n')
    port = _free_port()
    server = {"port": port, "model_config": str(cfg), "log_level": "DEBUG"}
    jobs, _ = er.parse_jobs(
        {
            "jobs": [
                {"name": "s", "kind": "startup", "est_s": 20, "server": server},
                {"name": "b", "kind": "bench", "est_s": 20, "bench": {"num_prompts": 2}},
            ]
        }
    )
    r = er.Runner(
        model=str(base),
        out_dir=tmp_path / "res",
        deadline=er.Deadline(er.time.monotonic() + 60),
    )
    summary = r.run(jobs)
    assert [s["outcome"] for s in summary] == ["ready", "ok"]
    served = str(tmp_path / "model-shape")
    serve = json.loads((tmp_path / "res" / "s" / "server.cmd.json").read_text())
    assert serve[4] == served
    bench = json.loads((tmp_path / "res" / "b" / "bench.cmd.json").read_text())
    assert bench[bench.index("--model") + 1] == served
    assert bench[bench.index("--tokenizer") + 1] == served
    row = record_startup(tmp_path / "res" / "s", tmp_path / "dest")
    assert row["model_config"] == str(cfg) and row["log_level"] == "DEBUG"


def test_main_fails_before_any_server_on_a_missing_model_config(tmp_path, capsys):
    p = tmp_path / "jobs.json"
    server = {"model_config": "no/such.config.json"}
    p.write_text(
        json.dumps({"jobs": [{"name": "s", "kind": "startup", "est_s": 9, "server": server}]})
    )
    rc = er.main(["--jobs", str(p), "--model", "/m", "--out", str(tmp_path / "o")])
    assert rc == 2
    assert "server.model_config='no/such.config.json': no such file" in capsys.readouterr().err
    assert not (tmp_path / "o" / "s").exists()


def test_a_model_name_instead_of_a_dir_is_a_failed_startup(tmp_path):
    cfg = tmp_path / "c.json"
    cfg.write_text("{}")
    jobs, _ = er.parse_jobs(
        {
            "jobs": [
                {"name": "s", "kind": "startup", "est_s": 9, "server": {"model_config": str(cfg)}},
                {"name": "b", "kind": "bench", "est_s": 5, "bench": {"num_prompts": 1}},
            ]
        }
    )
    r = er.Runner(
        model="Qwen/Qwen3.5-35B-A3B",
        out_dir=tmp_path / "res",
        deadline=er.Deadline(er.time.monotonic() + 30),
    )
    summary = r.run(jobs)
    assert [s["outcome"] for s in summary] == ["model_config_error", "no_server"]
    assert "needs a local model dir" in (tmp_path / "res" / "s" / "server.log").read_text()
