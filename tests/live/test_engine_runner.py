"""The real-engine job runner (capsim/live/engine_runner.py) against a fake vLLM."""

from __future__ import annotations

import json
import os
import socket
import sys
import tarfile
from pathlib import Path

import pytest

from capsim.live import engine_runner as er

FAKE = Path(__file__).parent / "fake_vllm"


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_synthetic_rates_chain():
    assert er.synthetic_rates(3) == [0.8522, 0.726245, 0.618906]
    assert er.synthetic_rates(1, 0.5) == [0.5]


def test_serve_argv_spec_and_flags():
    spec = er.ServerSpec(
        gpu_memory_utilization=0.6,
        num_speculative_tokens=3,
        max_num_seqs=256,
        enable_prefix_caching=False,
        port=8123,
    )
    argv = er.serve_argv(spec, "/m", python="py")
    assert argv[:5] == ["py", "-m", "vllm.entrypoints.cli.main", "serve", "/m"]
    assert argv[argv.index("--gpu-memory-utilization") + 1] == "0.6"
    assert argv[argv.index("--load-format") + 1] == "dummy"
    assert argv[argv.index("--gdn-prefill-backend") + 1] == "triton"
    sc = json.loads(argv[argv.index("--speculative-config") + 1])
    assert sc == {
        "method": "mtp",
        "num_speculative_tokens": 3,
        "rejection_sample_method": "synthetic",
        "synthetic_acceptance_rates": [0.8522, 0.726245, 0.618906],
    }
    assert argv[argv.index("--max-num-seqs") + 1] == "256"
    assert "--no-enable-prefix-caching" in argv
    plain = er.serve_argv(er.ServerSpec(num_speculative_tokens=0), "/m", "py", payload_flags=False)
    assert "--speculative-config" not in plain and "--load-format" not in plain
    env = er.serve_env({}, payload_flags=True)
    assert env["VLLM_USE_FLASHINFER_SAMPLER"] == "0" and env["VLLM_SERVER_DEV_MODE"] == "1"
    with pytest.raises(ValueError, match="need 3 values"):
        er.ServerSpec(synthetic_acceptance_rates=(0.5,)).speculative_config()


def test_bench_argv_random_custom_and_poisson():
    b = er.BenchSpec(num_prompts=64, max_concurrency=16, input_len=1024, output_len=256)
    argv = er.bench_argv(b, "/m", 8000, 64, "/r", python="py")
    assert argv[3:5] == ["bench", "serve"]
    for flag, val in (
        ("--random-input-len", "1024"),
        ("--random-output-len", "256"),
        ("--random-range-ratio", "0"),
        ("--max-concurrency", "16"),
        ("--result-dir", "/r"),
        ("--num-prompts", "64"),
    ):
        assert argv[argv.index(flag) + 1] == val
    assert "--ignore-eos" in argv and "--save-result" in argv
    warm = er.bench_argv(b, "/m", 8000, 16, None, python="py")
    assert "--save-result" not in warm and warm[warm.index("--num-prompts") + 1] == "16"
    c = er.BenchSpec(
        num_prompts=10, request_rate=4.0, dataset_name="custom", dataset_path="/d.jsonl"
    )
    argv = er.bench_argv(c, "/m", 8000, 10, "/r", python="py")
    assert argv[argv.index("--custom-output-len") + 1] == "-1"
    assert "--skip-chat-template" in argv and "--max-concurrency" not in argv
    assert argv[argv.index("--request-rate") + 1] == "4.0"
    with pytest.raises(ValueError, match="dataset_path"):
        er.BenchSpec(num_prompts=1, dataset_name="custom")


def test_parse_jobs_errors_name_field_and_value():
    with pytest.raises(ValueError, match=r"jobs\[0\]: unknown field\(s\) \['bogus'\]"):
        er.parse_jobs({"jobs": [{"name": "a", "kind": "bench", "est_s": 1, "bogus": 1}]})
    with pytest.raises(ValueError, match=r"job\.kind='x'"):
        er.parse_jobs({"jobs": [{"name": "a", "kind": "x", "est_s": 1}]})
    with pytest.raises(ValueError, match="duplicate"):
        j = {"name": "a", "kind": "startup", "est_s": 1, "server": {}}
        er.parse_jobs({"jobs": [j, j]})
    with pytest.raises(ValueError, match=r"job\.name"):
        er.parse_jobs({"jobs": [{"name": "a/b", "kind": "startup", "est_s": 1, "server": {}}]})


def test_deadline_with_injected_clock():
    now = [100.0]
    d = er.Deadline(at_s=160.0, clock=lambda: now[0])
    assert d.can_start(60.0) and not d.can_start(60.1)
    now[0] = 150.0
    assert d.left_s() == 10.0 and not d.can_start(11)


def test_parse_metrics_sums_labels_and_positions():
    text = (
        '# HELP\nvllm:num_requests_running{engine="0"} 3\n'
        'vllm:num_requests_running{engine="1"} 2\n'
        'vllm:spec_decode_num_accepted_tokens_per_pos_total{position="1"} 7\n'
        "garbage line\n"
    )
    m = er.parse_metrics(text)
    assert m["vllm:num_requests_running"] == 5
    assert m[f"{er.PER_POSITION}=1"] == 7
    row = er.metrics_row(m, 1.23456)
    assert row["t_s"] == 1.235 and row["running"] == 5 and row["spec_accepted_pos1"] == 7


def _runner(tmp_path: Path, deadline_s: float) -> er.Runner:
    return er.Runner(
        model="/m",
        out_dir=tmp_path / "res",
        deadline=er.Deadline(er.time.monotonic() + deadline_s),
        pack_file=tmp_path / "res.tar.xz",
    )


@pytest.fixture
def fake_env(monkeypatch):
    monkeypatch.setenv("PYTHONPATH", str(FAKE) + os.pathsep + os.environ.get("PYTHONPATH", ""))
    monkeypatch.setenv("FAKE_BENCH_S", "1.2")


def test_runner_end_to_end_on_fake_vllm(tmp_path, fake_env, monkeypatch):
    port = _free_port()
    jobs, _ = er.parse_jobs(
        {
            "jobs": [
                {
                    "name": "s_kv",
                    "kind": "startup",
                    "mode": "kv",
                    "est_s": 20,
                    "server": {"port": port},
                },
                {
                    "name": "s_full",
                    "kind": "startup",
                    "mode": "full",
                    "est_s": 20,
                    "server": {"port": port, "max_num_seqs": 8},
                },
                {
                    "name": "b1",
                    "kind": "bench",
                    "est_s": 20,
                    "bench": {
                        "num_prompts": 4,
                        "max_concurrency": 2,
                        "warmup_prompts": 2,
                        "sample_period_s": 0.2,
                    },
                },
                {
                    "name": "b_too_long",
                    "kind": "bench",
                    "est_s": 10_000,
                    "bench": {"num_prompts": 4, "max_concurrency": 2},
                },
            ]
        }
    )
    r = _runner(tmp_path, 120)
    summary = r.run(jobs)
    by = {s["job"]: s for s in summary}
    assert by["s_kv"]["outcome"] == "kv_line"
    assert by["s_full"]["outcome"] == "ready"
    assert by["b1"]["outcome"] == "ok"
    # the fake bumps running by 3 per bench call (warm-up + measured): the peak seen is 6;
    # preemptions are the counter's delta over the measured run only (1, not 2)
    assert by["b1"]["peak_running"] == 6.0 and by["b1"]["preemptions"] == 1.0
    assert by["b_too_long"]["outcome"] == "skipped_deadline"
    res = tmp_path / "res"
    assert json.loads((res / "b1" / "bench.json").read_text())["completed"] == 4
    assert json.loads((res / "s_full" / "server_info.json").read_text())
    assert "GPU KV cache size" in (res / "s_kv" / "server.log").read_text()
    csv = (res / "b1" / "metrics.csv").read_text().splitlines()
    assert csv[0].startswith("t_s,running,waiting,kv_usage,preemptions") and len(csv) >= 4
    with tarfile.open(tmp_path / "res.tar.xz") as tar:
        names = tar.getnames()
    assert "b1/bench.json" in names and "summary.json" in names
    assert r.server is None  # stopped at the end


def test_runner_records_refusal(tmp_path, fake_env, monkeypatch):
    monkeypatch.setenv("FAKE_VLLM_REFUSE", "1")
    jobs, _ = er.parse_jobs(
        {
            "jobs": [
                {
                    "name": "s",
                    "kind": "startup",
                    "mode": "full",
                    "est_s": 20,
                    "server": {"port": _free_port(), "gpu_memory_utilization": 0.6},
                },
                {"name": "b", "kind": "bench", "est_s": 5, "bench": {"num_prompts": 1}},
            ]
        }
    )
    summary = _runner(tmp_path, 60).run(jobs)
    assert summary[0]["outcome"] == "refused"
    assert summary[1]["outcome"] == "no_server"
    log = (tmp_path / "res" / "s" / "server.log").read_text()
    assert "exceeds available Mamba cache blocks (339)" in log


def test_kv_job_records_refusal_printed_after_the_kv_line(tmp_path, fake_env, monkeypatch):
    # vLLM 0.26 prints the KV lines, then refuses (call 10's s_g060_k0_pc_kv): a "kv" job
    # stops at the KV line, and must still say the start-up was refused
    monkeypatch.setenv("FAKE_VLLM_REFUSE", "1")
    jobs, _ = er.parse_jobs(
        {
            "jobs": [
                {
                    "name": "s",
                    "kind": "startup",
                    "mode": "kv",
                    "est_s": 20,
                    "server": {"port": _free_port(), "gpu_memory_utilization": 0.6},
                }
            ]
        }
    )
    summary = _runner(tmp_path, 60).run(jobs)
    assert summary[0]["outcome"] == "refused" and summary[0]["kv_line_s"] is not None


def test_record_marks_a_refusal_after_the_kv_line(tmp_path):
    from capsim.live.engine_record import record_startup

    jdir = tmp_path / "s_kv"
    jdir.mkdir()
    (jdir / "server.log").write_text(
        "INFO [gpu_worker.py:560] Available KV cache memory: 13.3 GiB\n"
        "INFO [kv_cache_utils.py:2177] GPU KV cache size: 678,490 tokens\n"
        "ValueError: max_num_seqs (1024) exceeds available Mamba cache blocks (660). Each\n"
    )
    srv = {"gpu_memory_utilization": 0.6, "num_speculative_tokens": 0, "max_num_seqs": None}
    srv |= {"max_num_batched_tokens": None, "enable_prefix_caching": True}
    (jdir / "job.json").write_text(json.dumps({"server": srv}))
    res = {"outcome": "kv_line", "startup_s": 87.0, "kv_line_s": 87.0}
    (jdir / "result.json").write_text(json.dumps(res))
    row = record_startup(jdir, tmp_path / "dest")
    assert row["outcome"] == "refused"
    assert row["refusal"] == "max_num_seqs (1024) exceeds available Mamba cache blocks (660)"
    assert row["available_kv_gib"] == 13.3 and row["kv_cache_tokens"] == 678490


def test_main_rejects_bad_job_list(tmp_path, capsys):
    p = tmp_path / "jobs.json"
    p.write_text(
        json.dumps(
            {"jobs": [{"name": "a", "kind": "bench", "est_s": -1, "bench": {"num_prompts": 1}}]}
        )
    )
    rc = er.main(["--jobs", str(p), "--model", "/m", "--out", str(tmp_path / "o")])
    assert rc == 2 and "job.est_s=-1" in capsys.readouterr().err
    assert sys.executable


def test_cli_jobs_run_record_on_fake_vllm(tmp_path, fake_env):
    from click.testing import CliRunner

    from capsim.commands.engine import engine

    cli = CliRunner()
    jobs = tmp_path / "jobs.json"
    r = cli.invoke(
        engine,
        [
            "jobs",
            "--gmu",
            "0.5",
            "-k",
            "1",
            "--max-concurrency",
            "2",
            "--waves",
            "2",
            "-o",
            str(jobs),
        ],
    )
    assert r.exit_code == 0, r.output
    raw = json.loads(jobs.read_text())
    raw["jobs"][0]["server"]["port"] = _free_port()
    jobs.write_text(json.dumps(raw))
    out = tmp_path / "res"
    r = cli.invoke(
        engine,
        ["run", "--jobs", str(jobs), "--model", "/m", "-o", str(out), "--deadline-s", "2000"],
    )
    assert r.exit_code == 0, r.output
    argv = json.loads((out / "s_g050_k1" / "server.cmd.json").read_text())
    assert "--gdn-prefill-backend" not in argv and argv[-2:] == ["--load-format", "dummy"]
    dest = tmp_path / "rec"
    r = cli.invoke(engine, ["record", str(out), "--dest", str(dest)])
    assert r.exit_code == 0, r.output
    run = dest / "runs" / "g050_k1_rand_c2"
    header = (run / "requests.csv").read_text().splitlines()[0]
    assert header == "input_len,output_len,start_s,ttft_s,e2el_s"
    assert json.loads((run / "bench_summary.json").read_text())["completed"] == 4
    assert "s_g050_k1" in (dest / "startups.csv").read_text()


def test_gpu_step_log_wraps_the_scheduler(tmp_path):
    import subprocess

    log = tmp_path / "steps.jsonl"
    env = dict(
        os.environ,
        CAPSIM_STEP_LOG=str(log),
        PYTHONPATH=os.pathsep.join((str(er.STEPLOG_DIR), str(FAKE))),
    )
    code = (
        "from vllm.v1.core.sched.scheduler import Scheduler\n"
        "s = Scheduler()\n"
        "for _ in range(3):\n"
        "    s.update_from_output(s.schedule(), None)\n"
    )
    subprocess.run([sys.executable, "-c", code], env=env, check=True, timeout=60)
    rows = [json.loads(x) for x in log.read_text().splitlines()]
    assert len(rows) == 3
    r = rows[0]
    assert (r["num_tok"], r["num_req"], r["num_decode_req"], r["num_prefill_tok"]) == (5, 2, 1, 4)
    assert (r["decode_ctx_tok"], r["num_spec_tok"], r["num_preempted"]) == (9, 3, 1)
    assert (r["free_blocks"], r["usage"], r["num_new_req"]) == (7, 0.5, 1)
    assert rows[0]["t_sched_s"] <= rows[0]["t_done_s"] <= rows[1]["t_done_s"]


def _step_log_server() -> dict:
    """A start-up job whose server keeps the per-step log."""
    return {
        "name": "s",
        "kind": "startup",
        "mode": "full",
        "est_s": 20,
        "server": {"port": _free_port(), "step_log": True},
    }


def test_runner_collects_the_step_log_of_the_measured_run(tmp_path, fake_env):
    jobs, _ = er.parse_jobs(
        {
            "jobs": [
                _step_log_server(),
                {
                    "name": "b",
                    "kind": "bench",
                    "est_s": 20,
                    "bench": {"num_prompts": 2, "max_concurrency": 1, "warmup_prompts": 1},
                },
            ]
        }
    )
    summary = _runner(tmp_path, 60).run(jobs)
    assert [s["outcome"] for s in summary] == ["ready", "ok"]
    steps = (tmp_path / "res" / "b" / "steps.jsonl").read_text().splitlines()
    assert len(steps) == 2  # the warm-up's two steps stay in the server's file only
    assert len((tmp_path / "res" / "s" / "steps.jsonl").read_text().splitlines()) == 4
    assert "vllm:num_requests_running" in (tmp_path / "res" / "b" / "metrics_after.txt").read_text()
    from capsim.live.engine_record import record

    rec = tmp_path / "rec"
    record(tmp_path / "res", rec)
    steps = (rec / "runs" / "b" / "steps.csv").read_text().splitlines()
    assert steps[0].startswith("t_sched_s,t_done_s,num_tok") and len(steps) == 3
    assert (rec / "runs" / "b" / "metrics_after.txt").read_text().startswith("vllm:")


def test_bench_can_pause_the_step_log_of_its_server(tmp_path, fake_env):
    bench = {"num_prompts": 2, "max_concurrency": 1, "warmup_prompts": 1}
    jobs, _ = er.parse_jobs(
        {
            "jobs": [
                _step_log_server(),
                {"name": "off", "kind": "bench", "est_s": 20, "bench": bench | {"step_log": False}},
                {"name": "on", "kind": "bench", "est_s": 20, "bench": bench},
            ]
        }
    )
    summary = _runner(tmp_path, 90).run(jobs)
    assert [s["outcome"] for s in summary] == ["ready", "ok", "ok"]
    res = tmp_path / "res"
    assert not (res / "off" / "steps.jsonl").exists()
    assert len((res / "on" / "steps.jsonl").read_text().splitlines()) == 2
    # the server's own file: nothing of the paused bench (warm-up and run), 2 + 2 of the last
    assert len((res / "s" / "steps.jsonl").read_text().splitlines()) == 4


def test_http_warmup_sends_the_bench_lengths(tmp_path, fake_env):
    jobs, _ = er.parse_jobs(
        {
            "jobs": [
                {
                    "name": "s",
                    "kind": "startup",
                    "mode": "full",
                    "est_s": 20,
                    "server": {"port": _free_port()},
                },
                {
                    "name": "b",
                    "kind": "bench",
                    "est_s": 20,
                    "bench": {
                        "num_prompts": 2,
                        "max_concurrency": 2,
                        "warmup_prompts": 3,
                        "warmup_client": "http",
                        "input_len": 12,
                        "output_len": 5,
                    },
                },
            ]
        }
    )
    summary = _runner(tmp_path, 60).run(jobs)
    assert [s["outcome"] for s in summary] == ["ready", "ok"]
    assert summary[1]["warmup_s"] < 2.0  # no bench process was started for the warm-up
    bodies = er.warmup_bodies(jobs[1].bench, "/m")
    assert len(bodies) == 3 and all(
        len(b["prompt"]) == 12 and b["max_tokens"] == 5 and b["ignore_eos"] for b in bodies
    )
    ds = tmp_path / "d.jsonl"
    ds.write_text('{"prompt": " a b", "output_tokens": 7}\n' * 5)
    c = er.BenchSpec(num_prompts=4, dataset_name="custom", dataset_path=str(ds), warmup_prompts=2)
    assert [b["max_tokens"] for b in er.warmup_bodies(c, "/m")] == [7, 7]
    with pytest.raises(ValueError, match="warmup_client"):
        er.BenchSpec(num_prompts=1, warmup_client="x")


def test_reset_prefix_cache_retries_until_vllm_says_success():
    """vLLM refuses the reset while blocks are held ({"success": false}); the runner retries."""
    import threading
    from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

    answers = [b'{"success": false}', b'{"success": true}']
    seen: list[str] = []

    class H(BaseHTTPRequestHandler):
        def log_message(self, *a):
            pass

        def do_POST(self):
            seen.append(self.path)
            self.send_response(200)
            self.end_headers()
            self.wfile.write(answers[min(len(seen) - 1, 1)])

    srv = ThreadingHTTPServer(("127.0.0.1", 0), H)
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    try:
        url = f"http://127.0.0.1:{srv.server_address[1]}"
        assert er.reset_prefix_cache(url, tries=3, wait_s=0.01) == "ok"
        assert seen == ["/reset_prefix_cache"] * 2
        answers[1] = b'{"success": false}'
        got = er.reset_prefix_cache(url, tries=2, wait_s=0.01)
        assert got.startswith("HTTP 200") and "false" in got
    finally:
        srv.shutdown()
    assert er.reset_prefix_cache("http://127.0.0.1:9", tries=1).startswith("HTTP 0")


def test_bench_after_a_skipped_startup_finds_no_server(tmp_path, fake_env):
    port = _free_port()
    jobs, _ = er.parse_jobs(
        {
            "jobs": [
                {
                    "name": "s1",
                    "kind": "startup",
                    "mode": "full",
                    "est_s": 20,
                    "server": {"port": port, "max_num_seqs": 8},
                },
                {
                    "name": "s2_too_long",
                    "kind": "startup",
                    "mode": "full",
                    "est_s": 10_000,
                    "server": {"port": port, "max_num_seqs": 4},
                },
                {"name": "b2", "kind": "bench", "est_s": 5, "bench": {"num_prompts": 1}},
            ]
        }
    )
    summary = _runner(tmp_path, 120).run(jobs)
    by = {s["job"]: s for s in summary}
    assert by["s1"]["outcome"] == "ready"
    assert by["s2_too_long"]["outcome"] == "skipped_deadline"
    # without the stop, b2 would have run against s1's server and been recorded as s2's run
    assert by["b2"]["outcome"] == "no_server"
