"""A stand-in for `vllm` (serve / bench serve) used by tests/live/test_engine_runner.py.

serve: prints start-up lines like vLLM 0.26, then serves /health, /metrics, /server_info on
127.0.0.1:PORT; FAKE_VLLM_REFUSE=1 prints the Mamba-blocks refusal and exits 1.
bench serve: sends nothing; sleeps FAKE_BENCH_S, bumps the fake server's counters through
a request to /bump, writes --result-dir/--result-filename when --save-result is given.
"""

import json
import os
import sys
import time
import urllib.request
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

STATE = {"running": 0.0, "preempt": 0.0}


class H(BaseHTTPRequestHandler):
    def log_message(self, *a):
        pass

    def do_POST(self):
        n = int(self.headers.get("Content-Length", 0))
        body = json.loads(self.rfile.read(n))
        STATE.setdefault("posts", []).append(body)
        STATE["running"] = max(STATE["running"], float(len(STATE["posts"])))
        out = json.dumps({"choices": [{"text": "x" * body.get("max_tokens", 1)}]}).encode()
        self.send_response(200)
        self.end_headers()
        self.wfile.write(out)

    def do_GET(self):
        if self.path == "/health":
            body = b""
        elif self.path == "/metrics":
            run, pre = STATE["running"], STATE["preempt"]
            body = (
                "# HELP x\n"
                f'vllm:num_requests_running{{engine="0"}} {run}\n'
                'vllm:num_requests_waiting{engine="0"} 0.0\n'
                'vllm:kv_cache_usage_perc{engine="0"} 0.25\n'
                f'vllm:num_preemptions_total{{engine="0"}} {pre}\n'
                "vllm:spec_decode_num_accepted_tokens_per_pos_total"
                '{engine="0",position="0"} 5.0\n'
            ).encode()
        elif self.path == "/server_info":
            body = json.dumps({"vllm_config": {"max_num_seqs": 8}}).encode()
        elif self.path == "/bump":
            STATE["running"] += 3
            STATE["preempt"] += 1
            if os.environ.get("CAPSIM_STEP_LOG"):  # two engine steps, through the step log
                from vllm.v1.core.sched.scheduler import Scheduler

                sched = Scheduler()
                for _ in range(2):
                    sched.update_from_output(sched.schedule(), None)
            body = b"ok"
        else:
            self.send_response(404)
            self.end_headers()
            return
        self.send_response(200)
        self.end_headers()
        self.wfile.write(body)


def serve(argv):
    port = int(argv[argv.index("--port") + 1])
    print("INFO Model loading took 67.1 GiB memory", flush=True)
    time.sleep(float(os.environ.get("FAKE_SERVE_KV_S", "0.5")))
    print("INFO Available KV cache memory: 49.68 GiB", flush=True)
    print("INFO GPU KV cache size: 2,252,194 tokens", flush=True)
    if os.environ.get("FAKE_VLLM_REFUSE") == "1":
        print(
            "ValueError: max_num_seqs (1024) exceeds available Mamba cache blocks (339).",
            flush=True,
        )
        sys.exit(1)
    time.sleep(float(os.environ.get("FAKE_SERVE_READY_S", "0.5")))
    srv = ThreadingHTTPServer(("127.0.0.1", port), H)
    print("INFO Application startup complete.", flush=True)
    srv.serve_forever()


def bench(argv):
    base = argv[argv.index("--base-url") + 1]
    time.sleep(float(os.environ.get("FAKE_BENCH_S", "1.2")))
    urllib.request.urlopen(base + "/bump").read()
    time.sleep(0.6)
    if "--save-result" in argv:
        d = argv[argv.index("--result-dir") + 1]
        f = argv[argv.index("--result-filename") + 1]
        n = int(argv[argv.index("--num-prompts") + 1])
        now = time.time()
        with open(os.path.join(d, f), "w") as fh:
            json.dump(
                {
                    "completed": n,
                    "mean_ttft_ms": 12.5,
                    "p99_ttft_ms": 20.0,
                    "mean_tpot_ms": 5.0,
                    "p99_tpot_ms": 6.0,
                    "output_throughput": 100.0,
                    "duration": 1.0,
                    "date": time.strftime("%Y%m%d-%H%M%S"),
                    "input_lens": [16] * n,
                    "output_lens": [8] * n,
                    "ttfts": [0.0125] * n,
                    "itls": [[0.005] * 7] * n,
                    "start_times": [now + 0.01 * i for i in range(n)],
                    "spec_decode_per_position_acceptance_rates": [0.85],
                    "argv": argv,
                },
                fh,
            )
    print("bench done", n if "--save-result" in argv else "warmup")


def main():
    argv = sys.argv[1:]
    if argv[:1] == ["serve"]:
        serve(argv)
    elif argv[:2] == ["bench", "serve"]:
        bench(argv)
    else:
        sys.exit(f"fake vllm: unknown command {argv}")


if __name__ == "__main__":
    main()
