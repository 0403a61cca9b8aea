"""Timing cross-check end to end: live vLLM server -> `capsim live` -> `capsim crosscheck`.

    PYTHONPATH=. python3 experiments/live/timing_check.py --out runs/live/qwen3next_c16 \\
        --model qwen3next --concurrency 16 --num-requests 96 --num-gpu-blocks 16

Starts the tiny model's OpenAI server from the live venv on 127.0.0.1 with the engine
step log on, drives it with capsim's closed-loop client (a capsim workload, streaming,
ignore_eos), stops it, then simulates the same run with step times fitted to the
engine's own log and prints predicted vs observed. Run setup_env.sh first.
"""

from __future__ import annotations

import argparse
import json
from dataclasses import asdict
from pathlib import Path

from capsim.io.result_files import write_result
from capsim.live.client import LiveRun, run_live
from capsim.live.crosscheck import crosscheck
from capsim.live.server import LiveServer, ServerArgs
from capsim.live.venv import ensure_models, live_dir, venv_cpu_avx512_bf16
from capsim.live.workload import live_table


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--model", default="qwen3next", choices=("qwen3next", "llama"))
    ap.add_argument("--workload", default="sharegpt")
    ap.add_argument("--concurrency", type=int, default=16)
    ap.add_argument("--num-requests", type=int, default=96)
    ap.add_argument("--num-gpu-blocks", type=int, default=16)
    ap.add_argument("--max-num-seqs", type=int, default=8)
    ap.add_argument("--max-num-batched-tokens", type=int, default=512)
    ap.add_argument("--max-model-len", type=int, default=2048)
    ap.add_argument("--port", type=int, default=8077)
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args()

    models = ensure_models()
    server = ServerArgs(
        model_dir=models / args.model,
        port=args.port,
        num_gpu_blocks=args.num_gpu_blocks,
        max_num_seqs=args.max_num_seqs,
        max_num_batched_tokens=args.max_num_batched_tokens,
        max_model_len=args.max_model_len,
    )
    out: Path = args.out
    out.mkdir(parents=True, exist_ok=True)
    step_log = out / "step_log.jsonl"
    table = live_table(args.workload, args.num_requests, args.seed, args.max_model_len)
    run = LiveRun(url=server.url, concurrency=args.concurrency, num_requests=args.num_requests,
                  seed=args.seed)  # fmt: skip
    with LiveServer(server, log_path=live_dir() / "server.log", step_log=step_log):
        result = run_live(run, table, step_log=step_log)
    (out / "server.json").write_text(
        json.dumps(
            {
                **asdict(server),
                "model_dir": str(server.model_dir),
                "cpu_avx512_bf16": venv_cpu_avx512_bf16(),
            }
        )
    )
    write_result(out, result)
    report = crosscheck(out)
    print(f"{'metric':32s} {'observed':>12s} {'predicted':>12s} {'rel_err':>8s}")
    for r in report["rows"]:
        print(f"{r['metric']:32s} {r['observed']:12.4g} {r['predicted']:12.4g} {r['rel_err']:8.1%}")
    print(json.dumps({k: report[k] for k in ("throughput_within_10pct", "ttft_p99_within_20pct")}))


if __name__ == "__main__":
    main()
