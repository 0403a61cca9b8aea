"""Record live vLLM runs and predict them from a step-time model fitted on another run.

    CAPSIM_LIVE_VENV=... PYTHONPATH=. python3 experiments/live/out_of_sample.py --record
    PYTHONPATH=. python3 experiments/live/out_of_sample.py          # table from committed runs

``--record`` runs the entries of RUNS (vLLM CPU build, tiny models, streaming,
ignore_eos; closed loop at a concurrency, or open loop at a Poisson request rate; with or
without MTP speculation). Before each run it waits until the machine is quiet (1-min load
average below ``--max-load``, polling up to ``--wait-s``), and while it runs it records
the load average and the CPU used by other processes (``loadavg.json``). The compact run
goes to experiments/live/runs/<name>/. Without ``--record`` the table is recomputed from
the committed runs: each run is predicted from the step log of its ``fit`` run only.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import sys
import tempfile
import threading
import time
from dataclasses import asdict, dataclass
from pathlib import Path

import pandas as pd

from capsim.live.outofsample import compact_run, format_table, out_of_sample_table

HERE = Path(__file__).resolve().parent
RUNS_DIR = HERE / "runs"
FIT_RUN = "c16_b512_sharegpt"
MTP_FIT_RUN = "mtp_c16_b512_sharegpt"
MTP_K2 = '{"method": "mtp", "num_speculative_tokens": 2}'
NGRAM_K2 = ('{"method": "ngram", "num_speculative_tokens": 2, "prompt_lookup_max": 4, '
            '"prompt_lookup_min": 2}')  # fmt: skip


@dataclass(frozen=True, slots=True, kw_only=True)
class RunSpec:
    workload: str
    concurrency: int  # closed loop: clients; open loop: cap on requests in flight
    num_requests: int
    batched_tok: int = 512  # --max-num-batched-tokens
    rate_req_per_s: float | None = None  # open loop (Poisson) when set
    model: str = "qwen3next"
    speculative_config: str = ""
    num_gpu_blocks: int = 28
    fit: str = FIT_RUN  # the run whose step log predicts this one


RUNS: dict[str, RunSpec] = {
    FIT_RUN: RunSpec(workload="sharegpt", concurrency=16, num_requests=96),
    # the fit configuration again, recorded at another time: the run-to-run noise
    "c16_b512_sharegpt_repeat": RunSpec(workload="sharegpt", concurrency=16, num_requests=96),
    "c16_b512_sharegpt_repeat2": RunSpec(workload="sharegpt", concurrency=16, num_requests=96),
    "c4_b512_sharegpt": RunSpec(workload="sharegpt", concurrency=4, num_requests=64),
    "c16_b128_sharegpt": RunSpec(
        workload="sharegpt", concurrency=16, num_requests=96, batched_tok=128
    ),
    "c8_b512_spec-bench": RunSpec(workload="spec-bench", concurrency=8, num_requests=64),
    "r0.8_b512_sharegpt": RunSpec(
        workload="sharegpt", concurrency=96, num_requests=96, rate_req_per_s=0.8
    ),
    "r1.4_b512_sharegpt": RunSpec(
        workload="sharegpt", concurrency=96, num_requests=96, rate_req_per_s=1.4
    ),
    "r1.4_b512_sharegpt_repeat": RunSpec(
        workload="sharegpt", concurrency=96, num_requests=96, rate_req_per_s=1.4
    ),
    "r2.0_b512_sharegpt": RunSpec(
        workload="sharegpt", concurrency=96, num_requests=96, rate_req_per_s=2.0
    ),
    # MTP k=2 on the tiny hybrid with an MTP layer: step time fitted on MTP_FIT_RUN
    MTP_FIT_RUN: RunSpec(
        workload="sharegpt",
        concurrency=16,
        num_requests=96,
        model="qwen3next_mtp",
        speculative_config=MTP_K2,
        num_gpu_blocks=40,
        fit=MTP_FIT_RUN,
    ),
    "mtp_c4_b512_sharegpt": RunSpec(
        workload="sharegpt",
        concurrency=4,
        num_requests=64,
        model="qwen3next_mtp",
        speculative_config=MTP_K2,
        num_gpu_blocks=40,
        fit=MTP_FIT_RUN,
    ),
    "mtp_r1.0_b512_sharegpt": RunSpec(
        workload="sharegpt",
        concurrency=96,
        num_requests=96,
        rate_req_per_s=1.0,
        model="qwen3next_mtp",
        speculative_config=MTP_K2,
        num_gpu_blocks=40,
        fit=MTP_FIT_RUN,
    ),
    # ngram k=2 on the hybrid: vLLM 0.32's CPU GDN kernel fails after a fully accepted
    # verify (README finding 4); recorded to see whether a served run completes
    "ngram_c8_b512_sharegpt": RunSpec(
        workload="sharegpt",
        concurrency=8,
        num_requests=32,
        speculative_config=NGRAM_K2,
        num_gpu_blocks=40,
        fit="ngram_c8_b512_sharegpt",
    ),
}
MAX_MODEL_LEN = 2048
MAX_NUM_SEQS = 8
PORT = 8093


def wait_quiet(max_load: float, wait_s: float, poll_s: float = 10.0) -> float:
    """Sleep until the 1-min load average is below ``max_load`` (or ``wait_s`` passed)."""
    deadline = time.monotonic() + wait_s
    load = os.getloadavg()[0]
    while load >= max_load and time.monotonic() < deadline:
        time.sleep(poll_s)
        load = os.getloadavg()[0]
    return load


class LoadSampler(threading.Thread):
    """Every ``period_s`` until stopped: the 1-min load average and the CPU seconds used
    by this process and its children (the server). ``stop()`` also gives the mean number
    of cores other processes kept busy meanwhile (machine busy time minus ours)."""

    def __init__(self, period_s: float = 2.0) -> None:
        import psutil

        super().__init__(daemon=True)
        self._psutil = psutil
        self.period_s, self.samples = period_s, [os.getloadavg()[0]]
        self._me = psutil.Process()
        self._ours: dict[int, float] = {}
        self._own_start = sum(self._me.cpu_times()[:2])
        self._busy_start = self._busy()
        self._t_start = time.monotonic()
        self._stop_event = threading.Event()

    def _busy(self) -> float:
        t = self._psutil.cpu_times()
        return sum(t) - t.idle - getattr(t, "iowait", 0.0)

    def _sample_ours(self) -> None:
        for p in [self._me, *self._me.children(recursive=True)]:
            with contextlib.suppress(self._psutil.Error):  # a process that just exited
                self._ours[p.pid] = sum(p.cpu_times()[:2])

    def run(self) -> None:
        while not self._stop_event.wait(self.period_s):
            self.samples.append(os.getloadavg()[0])
            self._sample_ours()

    def stop(self) -> dict[str, float]:
        self._sample_ours()
        self._stop_event.set()
        self.join()
        elapsed = time.monotonic() - self._t_start
        ours = sum(self._ours.values()) - self._own_start
        others = max(self._busy() - self._busy_start - ours, 0.0) / elapsed
        s = self.samples
        return {"before": s[0], "during_max": max(s), "during_mean": sum(s) / len(s),
                "others_cores_mean": others, "ours_cores_mean": ours / elapsed,
                "elapsed_s": elapsed}  # fmt: skip


def record(name: str, max_load: float, wait_s: float) -> None:
    from capsim.io.result_files import write_result
    from capsim.live.client import LiveRun, run_live
    from capsim.live.server import LiveServer, ServerArgs
    from capsim.live.venv import ensure_models, live_dir, venv_cpu_avx512_bf16
    from capsim.live.workload import live_table

    spec = RUNS[name]
    models = ensure_models()
    server = ServerArgs(
        model_dir=models / spec.model,
        port=PORT,
        num_gpu_blocks=spec.num_gpu_blocks,
        max_num_seqs=MAX_NUM_SEQS,
        max_num_batched_tokens=spec.batched_tok,
        max_model_len=MAX_MODEL_LEN,
        speculative_config=spec.speculative_config,
    )
    run = LiveRun(url=server.url, concurrency=spec.concurrency, num_requests=spec.num_requests,
                  request_rate_per_s=spec.rate_req_per_s)  # fmt: skip
    table = live_table(spec.workload, spec.num_requests, 0, MAX_MODEL_LEN)
    load = wait_quiet(max_load, wait_s)
    print(f"{time.strftime('%H:%M:%S')} {name}: load {load:.2f}, recording", flush=True)
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp)
        log = out / "step_log.jsonl"
        sampler = LoadSampler()
        sampler.start()
        with LiveServer(server, log_path=live_dir() / "server.log", step_log=log):
            result = run_live(run, table, step_log=log)
        (out / "loadavg.json").write_text(
            json.dumps(
                {**sampler.stop(), "utc": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}
            )
        )
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
        compact_run(out, RUNS_DIR / name, server.model_dir / "config.json")
    print(f"{time.strftime('%H:%M:%S')} recorded {name}: "
          f"{(RUNS_DIR / name / 'loadavg.json').read_text()}", flush=True)  # fmt: skip


def plan() -> list[tuple[str, str]]:
    """(run, fit run) for every committed run."""
    return [(r, s.fit) for r, s in RUNS.items() if (RUNS_DIR / r / "summary.json").exists()]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--record", action="store_true", help="record the runs (needs the venv)")
    ap.add_argument("--only", action="append", default=None, help="record only this run")
    ap.add_argument("--max-load", type=float, default=1.0, help="quiet: 1-min load below")
    ap.add_argument("--wait-s", type=float, default=1200.0, help="longest wait for quiet")
    a = ap.parse_args()
    if a.record:
        for name in a.only or list(RUNS):
            if name not in RUNS:
                sys.exit(f"--only={name!r}: not a run of RUNS")
            record(name, a.max_load, a.wait_s)
    df = out_of_sample_table(RUNS_DIR, plan())
    pd.set_option("display.width", 250)
    print(format_table(df))


if __name__ == "__main__":
    main()
