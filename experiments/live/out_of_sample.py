"""Record live vLLM runs and predict them from a step-time model fitted on one of them.

    CAPSIM_LIVE_VENV=... PYTHONPATH=. python3 experiments/live/out_of_sample.py --record
    PYTHONPATH=. python3 experiments/live/out_of_sample.py          # table from committed runs

``--record`` runs every entry of RUNS on the tiny qwen3next model (vLLM CPU build, closed
loop, streaming, ignore_eos), samples the machine's 1-min load average every 2 s while it
runs, and writes the compact run to experiments/live/runs/<name>/. Without it, the table
is recomputed from the committed runs: the step-time model is fitted on FIT_RUN only.
"""

from __future__ import annotations

import argparse
import json
import os
import tempfile
import threading
from dataclasses import asdict
from pathlib import Path

import pandas as pd

from capsim.live.outofsample import compact_run, out_of_sample_table

HERE = Path(__file__).resolve().parent
RUNS_DIR = HERE / "runs"
FIT_RUN = "c16_b512_sharegpt"
# name: (workload, concurrency, num_requests, max_num_batched_tokens)
RUNS: dict[str, tuple[str, int, int, int]] = {
    FIT_RUN: ("sharegpt", 16, 64, 512),
    "c4_b512_sharegpt": ("sharegpt", 4, 48, 512),
    "c16_b128_sharegpt": ("sharegpt", 16, 64, 128),
    "c8_b512_spec-bench": ("spec-bench", 8, 48, 512),
    # the fit configuration recorded again 6 min earlier (17:52 UTC, by timing_check.py):
    # how much the same run moves on this shared machine
    "c16_b512_sharegpt_repeat": ("sharegpt", 16, 64, 512),
}
SERVER = {"num_gpu_blocks": 28, "max_num_seqs": 8, "max_model_len": 2048}


class LoadSampler(threading.Thread):
    """os.getloadavg()[0] every ``period_s`` until stopped."""

    def __init__(self, period_s: float = 2.0) -> None:
        super().__init__(daemon=True)
        self.period_s, self.samples = period_s, [os.getloadavg()[0]]
        self._stop_event = threading.Event()

    def run(self) -> None:
        while not self._stop_event.wait(self.period_s):
            self.samples.append(os.getloadavg()[0])

    def stop(self) -> dict[str, float]:
        self._stop_event.set()
        self.join()
        s = self.samples
        return {"before": s[0], "during_max": max(s), "during_mean": sum(s) / len(s)}


def record(name: str) -> None:
    from capsim.io.results import write_result
    from capsim.live.client import LiveRun, run_live
    from capsim.live.server import LiveServer, ServerArgs
    from capsim.live.venv import ensure_models, live_dir
    from capsim.live.workload import live_table

    workload, conc, n, batched = RUNS[name]
    models = ensure_models()
    server = ServerArgs(
        model_dir=models / "qwen3next",
        port=8077,
        num_gpu_blocks=SERVER["num_gpu_blocks"],
        max_num_seqs=SERVER["max_num_seqs"],
        max_num_batched_tokens=batched,
        max_model_len=SERVER["max_model_len"],
    )
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp)
        log = out / "step_log.jsonl"
        table = live_table(workload, n, 0, SERVER["max_model_len"])
        sampler = LoadSampler()
        sampler.start()
        with LiveServer(server, log_path=live_dir() / "server.log", step_log=log):
            result = run_live(LiveRun(url=server.url, concurrency=conc, num_requests=n), table,
                              step_log=log)  # fmt: skip
        (out / "loadavg.json").write_text(json.dumps(sampler.stop()))
        (out / "server.json").write_text(
            json.dumps({**asdict(server), "model_dir": str(server.model_dir)})
        )
        write_result(out, result)
        compact_run(out, RUNS_DIR / name, server.model_dir / "config.json")
    print(f"recorded {name}", flush=True)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--record", action="store_true", help="record the runs (needs the venv)")
    ap.add_argument("--only", action="append", default=None, help="record only this run")
    a = ap.parse_args()
    if a.record:
        for name in a.only or list(RUNS):
            record(name)
    runs = [RUNS_DIR / r for r in RUNS if (RUNS_DIR / r).exists()]
    df = out_of_sample_table(RUNS_DIR / FIT_RUN, runs)
    pd.set_option("display.width", 200)
    print(df.to_string(index=False, float_format=lambda x: f"{x:.4g}"))


if __name__ == "__main__":
    main()
