"""The live HTTP client and /metrics sampler against a tiny fake server on 127.0.0.1."""

from __future__ import annotations

import json
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import numpy as np
import pytest

from capsim.live.client import LiveRun, run_live
from capsim.live.prom import parse_metrics
from capsim.traces.table import RequestTable

TOKEN_GAP_S = 0.004
METRICS = """# HELP vllm:num_requests_running x
vllm:num_requests_running{engine="0",model_name="tiny"} %d
vllm:num_requests_waiting{engine="0",model_name="tiny"} 0.0
vllm:kv_cache_usage_perc{engine="0",model_name="tiny"} 0.25
vllm:num_preemptions_total{engine="0",model_name="tiny"} %d
vllm:cache_config_info{block_size="32",num_gpu_blocks="40"} 1.0
"""


class _Fake(BaseHTTPRequestHandler):
    in_flight = 0
    preemptions = 0
    lock = threading.Lock()

    def log_message(self, *args: object) -> None:
        pass

    def do_GET(self) -> None:
        body = (METRICS % (_Fake.in_flight, _Fake.preemptions)).encode()
        self.send_response(200)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def do_POST(self) -> None:
        req = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        assert req["stream"] and req["ignore_eos"] and isinstance(req["prompt"], list)
        with _Fake.lock:
            _Fake.in_flight += 1
            _Fake.preemptions += 1
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.end_headers()
        n = req["max_tokens"]
        for _ in range(n):
            time.sleep(TOKEN_GAP_S)
            msg = {"choices": [{"text": "a", "index": 0}]}
            self.wfile.write(f"data: {json.dumps(msg)}\n\n".encode())
            self.wfile.flush()
        usage = {
            "choices": [],
            "usage": {"completion_tokens": n, "prompt_tokens": len(req["prompt"])},
        }
        self.wfile.write(f"data: {json.dumps(usage)}\n\ndata: [DONE]\n\n".encode())
        with _Fake.lock:
            _Fake.in_flight -= 1


@pytest.fixture()
def fake_url():
    srv = ThreadingHTTPServer(("127.0.0.1", 0), _Fake)
    th = threading.Thread(target=srv.serve_forever, daemon=True)
    th.start()
    yield f"http://127.0.0.1:{srv.server_address[1]}"
    srv.shutdown()


def test_run_live_records_the_simulate_schema(fake_url: str) -> None:
    table = RequestTable(
        name="t", prompt_tok=np.array([5, 6, 7, 8]), output_tok=np.array([10, 20, 5, 12])
    )
    res = run_live(
        LiveRun(url=fake_url, concurrency=2, num_requests=4, metrics_period_s=0.01), table
    )
    req = res.requests
    assert list(req["output_tok"]) == [10, 20, 5, 12]
    assert (req["ttft_s"] > 0).all() and (req["e2el_s"] >= req["ttft_s"]).all()
    # tokens are streamed TOKEN_GAP_S apart: TPOT must see that gap (not 0, not 10x)
    assert req["tpot_s"].between(TOKEN_GAP_S * 0.8, TOKEN_GAP_S * 5).all()
    s = res.summary
    assert s["num_requests"] == 4 and s["total_output_tok"] == 47
    assert s["num_preemptions_metrics"] == 4  # counter delta over the run
    assert s["steps_source"] == "metrics_samples" and s["metrics_peak_running"] >= 1
    assert res.config["cache_config_info"]["num_gpu_blocks"] == "40"


def test_bad_url_and_concurrency_are_named() -> None:
    with pytest.raises(ValueError, match=r"live\.url"):
        LiveRun(url="ftp://x", concurrency=1, num_requests=1)
    with pytest.raises(ValueError, match=r"live\.concurrency=0"):
        LiveRun(url="http://127.0.0.1:1", concurrency=0, num_requests=1)


def test_parse_metrics_sums_label_sets() -> None:
    text = 'a{x="1"} 2\na{x="2"} 3.5\n# c\nb 1e3\nbad line\n'
    assert parse_metrics(text) == {"a": 5.5, "b": 1000.0}


def test_live_cli_writes_the_simulate_files(fake_url: str, tmp_path) -> None:
    from click.testing import CliRunner

    from capsim.commands.live import live

    out = tmp_path / "run"
    args = ["--url", fake_url, "--workload", "burstgpt-standin", "--concurrency", "2",
            "--num-requests", "3", "--max-model-len", "200", "--out", str(out)]  # fmt: skip
    res = CliRunner().invoke(live, args)
    assert res.exit_code == 0, res.output
    summary = json.loads((out / "summary.json").read_text())
    assert summary["summary"]["num_requests"] == 3
    assert summary["config"]["load"]["concurrency"] == 2
    import pandas as pd

    req = pd.read_parquet(out / "requests.parquet")
    assert (req["prompt_tok"] + req["output_tok"] <= 200).all()


def test_open_loop_sends_at_the_release_times(fake_url: str) -> None:
    table = RequestTable(name="t", prompt_tok=np.full(6, 5), output_tok=np.full(6, 3))
    run = LiveRun(url=fake_url, concurrency=6, num_requests=6, request_rate_per_s=20.0,
                  metrics_period_s=0.01)  # fmt: skip
    release = run.release_s(6)
    assert np.array_equal(release, run.release_s(6))  # same seed, same schedule
    assert release[-1] == pytest.approx(6 / 20.0)  # capsim's loadgen: last at N / rate
    res = run_live(run, table)
    req = res.requests
    assert np.allclose(req["release_s"], release)
    # sent at (not before) its release time; a closed loop would send all at t=0
    assert (req["send_s"] >= req["release_s"] - 1e-3).all()
    assert (req["send_s"] - req["release_s"]).max() < 0.2
    assert res.config["load"]["mode"] == "rate"
    with pytest.raises(ValueError, match=r"load\.rate_req_per_s"):
        LiveRun(url=fake_url, concurrency=1, num_requests=1, request_rate_per_s=-1.0)


def test_spec_decode_counters_per_position() -> None:
    from capsim.live.client import _spec_counts

    per_pos = "vllm:spec_decode_num_accepted_tokens_per_pos_total"
    text = (
        'vllm:spec_decode_num_drafts_total{engine="0"} 10\n'
        'vllm:spec_decode_num_accepted_tokens_total{engine="0"} 7\n'
        f'{per_pos}{{engine="0",position="1"}} 2\n'
        f'{per_pos}{{engine="0",position="0"}} 5\n'
    )
    after = parse_metrics(text)
    assert after["vllm:spec_decode_num_accepted_tokens_per_pos_total"] == 7.0
    before = {"vllm:spec_decode_num_drafts_total": 4.0}
    out = _spec_counts(before, after)
    assert out == {"spec_num_drafts": 6, "spec_num_accepted_tokens": 7,
                   "spec_accepted_per_pos": [5, 2]}  # fmt: skip
    assert _spec_counts({}, {"vllm:num_requests_running": 1.0}) == {}


def test_server_speculative_config_is_checked() -> None:
    from pathlib import Path

    from capsim.live.server import ServerArgs

    args = ServerArgs(model_dir=Path("m"), speculative_config='{"method": "mtp"}')
    assert args.argv()[-2:] == ["--speculative-config", '{"method": "mtp"}']
    assert "--speculative-config" not in ServerArgs(model_dir=Path("m")).argv()
    with pytest.raises(ValueError, match=r"server\.speculative_config='\[1\]'"):
        ServerArgs(model_dir=Path("m"), speculative_config="[1]")


def test_live_cli_open_loop(fake_url: str, tmp_path) -> None:
    from click.testing import CliRunner

    from capsim.commands.live import live

    out = tmp_path / "run"
    base = ["--url", fake_url, "--workload", "burstgpt-standin", "--num-requests", "3",
            "--max-model-len", "200", "--out", str(out)]  # fmt: skip
    res = CliRunner().invoke(live, [*base, "--request-rate", "50"])
    assert res.exit_code == 0, res.output
    load = json.loads((out / "summary.json").read_text())["config"]["load"]
    assert load["mode"] == "rate" and load["rate_req_per_s"] == 50.0 and load["concurrency"] == 3
    res = CliRunner().invoke(live, base)
    assert res.exit_code != 0 and "--max-concurrency or --request-rate" in res.output
