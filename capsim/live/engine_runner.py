"""Drive a real vLLM server through a job list: start-ups and `vllm bench serve` runs.

Standard library only, so the one file runs where vLLM runs (the lent H200, copied next to
the payload; or a user's GPU box with `pip install vllm`). A job list (JSON) names jobs in
order; the runner checks a wall-clock deadline itself and never starts a job whose
estimate (`est_s`) cannot finish before it. Each job's files are written as soon as it
ends, and the whole results folder is re-packed into one tar.xz after every job (so a
call stopped at its limit still brings back every finished job).

Job kinds (vLLM's own flag names throughout):
- ``startup``: start `vllm serve` with the job's ``server`` settings. ``"mode": "kv"``
  stops at vLLM's "GPU KV cache size" line or its refusal (skips CUDA graph capture);
  ``"mode": "full"`` waits for /health and keeps the server for the bench jobs after it
  (and saves /server_info, /metrics). The log is saved either way. ``server.model_config``
  serves another config.json from a sibling of the model dir (``engine_jobs.served_model_dir``).
- ``bench``: against the running server, a throw-away warm-up load at the same
  concurrency first (``warmup_prompts``), then the measured `vllm bench serve` with
  ``--save-result --save-detailed``, /metrics sampled every ``sample_period_s``.

Usage: python3 engine_runner.py --jobs JOBS.json --out DIR [--deadline-s S] [--pack FILE]
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import json
import os
import signal
import subprocess
import sys
import tarfile
import threading
import time
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

try:  # as a package module, or as a script beside engine_jobs.py on the GPU machine
    from capsim.live.engine_jobs import (
        FAIL_MARKERS,
        KV_DONE_MARKERS,
        PER_POSITION,
        REFUSAL_AFTER_KV,
        SAMPLED_METRICS,
        STEPLOG_DIR,
        BenchSpec,
        Job,
        ServerSpec,
        bench_argv,
        parse_jobs,
        resolve_model_config,
        serve_argv,
        serve_env,
        served_model_dir,
        synthetic_rates,
    )
except ImportError:  # the script form: engine_jobs.py sits in the same folder
    from engine_jobs import (  # type: ignore[no-redef]
        FAIL_MARKERS,
        KV_DONE_MARKERS,
        PER_POSITION,
        REFUSAL_AFTER_KV,
        SAMPLED_METRICS,
        STEPLOG_DIR,
        BenchSpec,
        Job,
        ServerSpec,
        bench_argv,
        parse_jobs,
        resolve_model_config,
        serve_argv,
        serve_env,
        served_model_dir,
        synthetic_rates,  # noqa: F401 (the script form re-exports it like the package form)
    )


@dataclass
class Deadline:
    """Wall-clock deadline; `clock` is injectable for tests."""

    at_s: float
    clock: Callable[[], float] = time.monotonic

    def left_s(self) -> float:
        return self.at_s - self.clock()

    def can_start(self, est_s: float) -> bool:
        return est_s <= self.left_s()


def parse_metrics(text: str) -> dict[str, float]:
    """Prometheus text -> {name: value summed over label sets}; the per-position
    acceptance counter also as "name=position"."""
    out: dict[str, float] = {}
    for line in text.splitlines():
        if not line or line.startswith("#"):
            continue
        head, _, value = line.rpartition(" ")
        try:
            v = float(value)
        except ValueError:
            continue
        name = head.split("{", 1)[0]
        out[name] = out.get(name, 0.0) + v
        if name == PER_POSITION and 'position="' in head:
            pos = head.split('position="', 1)[1].split('"', 1)[0]
            out[f"{name}={pos}"] = out.get(f"{name}={pos}", 0.0) + v
    return out


def warmup_bodies(b: BenchSpec, model: str) -> list[dict[str, Any]]:
    """The warm-up requests: random token ids of the bench's fixed lengths, or the first
    rows of its custom JSONL (both with ignore_eos, so lengths are exact)."""
    import random

    rng = random.Random(b.seed + 1)
    if b.dataset_name == "custom":
        with open(str(b.dataset_path)) as fh:
            rows = [json.loads(line) for _, line in zip(range(b.warmup_prompts), fh, strict=False)]
        return [
            {
                "model": model,
                "prompt": r["prompt"],
                "max_tokens": int(r["output_tokens"]),
                "ignore_eos": True,
                "temperature": 0.0,
            }
            for r in rows
        ]
    return [
        {
            "model": model,
            "prompt": [rng.randrange(1000, 100_000) for _ in range(b.input_len)],
            "max_tokens": b.output_len,
            "ignore_eos": True,
            "temperature": 0.0,
        }
        for _ in range(b.warmup_prompts)
    ]


def http_warmup(base_url: str, model: str, b: BenchSpec, timeout_s: float) -> int:
    """Send the warm-up load at the bench's concurrency (16 for a rate-only bench) to
    /v1/completions; returns the number of requests that failed."""
    import queue

    todo: queue.Queue = queue.Queue()
    for body in warmup_bodies(b, model):
        todo.put(body)
    failed = [0]
    lock = threading.Lock()
    end = time.monotonic() + timeout_s

    def worker() -> None:
        while time.monotonic() < end:
            try:
                body = todo.get_nowait()
            except queue.Empty:
                return
            req = urllib.request.Request(
                base_url + "/v1/completions",
                data=json.dumps(body).encode(),
                headers={"Content-Type": "application/json"},
            )
            try:
                with urllib.request.urlopen(req, timeout=max(end - time.monotonic(), 1.0)) as r:
                    r.read()
            except OSError:
                with lock:
                    failed[0] += 1

    n = max(1, min(b.max_concurrency or 16, b.warmup_prompts))
    threads = [threading.Thread(target=worker, daemon=True) for _ in range(n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=max(end - time.monotonic(), 0.0) + 1.0)
    return failed[0] + todo.qsize()


def http_get(url: str, timeout_s: float = 5.0) -> tuple[int, str]:
    try:
        with urllib.request.urlopen(url, timeout=timeout_s) as r:
            return r.status, r.read().decode(errors="replace")
    except OSError as e:  # URLError, HTTPError, connection refused, timeouts
        return getattr(e, "code", 0) or 0, str(e)


def http_post(url: str, timeout_s: float = 10.0) -> tuple[int, str]:
    req = urllib.request.Request(url, data=b"", method="POST")
    try:
        with urllib.request.urlopen(req, timeout=timeout_s) as r:
            return r.status, r.read().decode(errors="replace")
    except OSError as e:
        return getattr(e, "code", 0) or 0, str(e)


def reset_prefix_cache(base_url: str, tries: int = 5, wait_s: float = 1.0) -> str:
    """POST /reset_prefix_cache until vLLM says {"success": true} (it refuses while blocks are
    held, e.g. by requests still finishing): "ok", or the last answer."""
    last = ""
    for i in range(tries):
        code, body = http_post(base_url + "/reset_prefix_cache")
        if code == 200 and '"success":true' in body.replace(" ", ""):
            return "ok"
        last = f"HTTP {code}: {body[:120]}"
        if i + 1 < tries:
            time.sleep(wait_s)
    return last


def metrics_row(m: dict[str, float], t_s: float, max_pos: int = 8) -> dict[str, float]:
    row = {"t_s": round(t_s, 3)}
    row |= {short: m.get(name, float("nan")) for name, short in SAMPLED_METRICS.items()}
    for p in range(max_pos):
        key = f"{PER_POSITION}={p}"
        if key in m:
            row[f"spec_accepted_pos{p}"] = m[key]
    return row


@dataclass
class Sampler:
    """Samples /metrics every `period_s` on a thread until stop()."""

    base_url: str
    period_s: float = 0.5
    rows: list[dict[str, float]] = field(default_factory=list)
    _stop: threading.Event = field(default_factory=threading.Event)
    _thread: threading.Thread | None = None

    def _run(self, t0: float) -> None:
        while not self._stop.is_set():
            t = time.monotonic() - t0
            code, text = http_get(self.base_url + "/metrics", timeout_s=2.0)
            if code == 200:
                self.rows.append(metrics_row(parse_metrics(text), t))
            self._stop.wait(self.period_s)

    def start(self) -> None:
        self._thread = threading.Thread(target=self._run, args=(time.monotonic(),), daemon=True)
        self._thread.start()

    def stop(self) -> list[dict[str, float]]:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=10)
        return self.rows


def write_csv(rows: list[dict[str, float]], path: Path) -> None:
    cols: list[str] = []
    for r in rows:
        cols += [c for c in r if c not in cols]
    lines = [",".join(cols)] + [
        ",".join("" if r.get(c) is None else repr(r.get(c, "")) for c in cols) for r in rows
    ]
    atomic_write(path, "\n".join(lines) + "\n")


def atomic_write(path: Path, text: str) -> None:
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(text)
    os.replace(tmp, path)


def log_has(path: Path, markers: tuple[str, ...]) -> str | None:
    try:
        text = path.read_text(errors="replace")
    except FileNotFoundError:
        return None
    for m in markers:
        if m in text:
            return m
    return None


def pack_results(src: Path, out_file: Path, cap_bytes: int = 3 << 20) -> None:
    """tar.xz of `src` (atomic); text files over cap_bytes keep their head and tail."""
    tmp = out_file.with_name(out_file.name + ".tmp")
    with tarfile.open(tmp, "w:xz") as tar:
        for p in sorted(src.rglob("*")):
            if not p.is_file() or p.name.endswith(".tmp"):
                continue
            arc = str(p.relative_to(src))
            if p.stat().st_size > cap_bytes and p.suffix in (".log", ".txt"):
                data = p.read_bytes()
                half = cap_bytes // 2
                data = data[:half] + b"\n[... capsim: middle cut ...]\n" + data[-half:]
                info = tarfile.TarInfo(arc)
                info.size = len(data)
                import io

                tar.addfile(info, io.BytesIO(data))
            else:
                tar.add(p, arcname=arc)
    os.replace(tmp, out_file)


@dataclass
class Runner:
    """Runs jobs in order against one server at a time; results under `out_dir`."""

    model: str
    out_dir: Path
    deadline: Deadline
    python: str = sys.executable
    payload_flags: bool = True
    pack_file: Path | None = None
    server: subprocess.Popen | None = None
    server_spec: ServerSpec | None = None
    summary: list[dict[str, Any]] = field(default_factory=list)
    step_log: Path | None = None
    jobs_dir: Path | None = None  # where a relative server.model_config is also looked up
    served_model: str | None = None  # what the running server serves (model or its sibling)

    # -- server -------------------------------------------------------------------------
    def model_for(self, spec: ServerSpec) -> str:
        """The model dir `vllm serve` gets: ours, or its sibling with spec.model_config."""
        if spec.model_config is None:
            return self.model
        config = resolve_model_config(spec.model_config, self.jobs_dir)
        return str(served_model_dir(Path(self.model), config))

    def start_server(self, spec: ServerSpec, log_path: Path) -> subprocess.Popen:
        self.stop_server()
        self.served_model = self.model_for(spec)
        argv = serve_argv(spec, self.served_model, self.python, self.payload_flags)
        atomic_write(log_path.with_suffix(".cmd.json"), json.dumps(argv))
        env = serve_env(dict(os.environ), self.payload_flags)
        self.step_log = None
        if spec.log_level:
            env["VLLM_LOGGING_LEVEL"] = spec.log_level
        if spec.step_log:
            if not (STEPLOG_DIR / "sitecustomize.py").is_file():
                raise FileNotFoundError(
                    f"server.step_log=true: {STEPLOG_DIR / 'sitecustomize.py'} is missing "
                    "(stage capsim/live/engine_steplog/ beside engine_jobs.py: "
                    "scripts/engine_stage.py)"
                )
            self.step_log = log_path.parent / "steps.jsonl"
            env["CAPSIM_STEP_LOG"] = str(self.step_log)
            env["CAPSIM_STEP_LOG_OFF"] = str(self.step_log_off())
            self.step_log_off().unlink(missing_ok=True)
            env["PYTHONPATH"] = os.pathsep.join(
                p for p in (str(STEPLOG_DIR), env.get("PYTHONPATH", "")) if p
            )
        with open(log_path, "wb") as fh:  # the child keeps its own copy of the descriptor
            self.server = subprocess.Popen(
                argv, stdout=fh, stderr=subprocess.STDOUT, env=env, start_new_session=True
            )
        self.server_spec = spec
        return self.server

    def step_log_off(self) -> Path:
        """The flag file whose presence pauses the server's step log."""
        assert self.step_log is not None
        return self.step_log.with_name("steps.off")

    def _gate_step_log(self, on: bool) -> None:
        if self.step_log is None:
            return
        if on:
            self.step_log_off().unlink(missing_ok=True)
        else:
            self.step_log_off().write_text("off\n")

    def stop_server(self) -> None:
        if self.server is None:
            return
        if self.server.poll() is None:
            try:
                os.killpg(self.server.pid, signal.SIGTERM)
                self.server.wait(timeout=20)
            except (ProcessLookupError, subprocess.TimeoutExpired):
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(self.server.pid, signal.SIGKILL)
                self.server.wait(timeout=10)
        self.server = None
        self.server_spec = None
        self.served_model = None

    def bench_model(self) -> str:
        """The model name benches send: the path the running server was started with."""
        return self.served_model or self.model

    def base_url(self) -> str:
        assert self.server_spec is not None
        return f"http://127.0.0.1:{self.server_spec.port}"

    # -- jobs ---------------------------------------------------------------------------
    def run_startup(self, job: Job, jdir: Path) -> dict[str, Any]:
        log = jdir / "server.log"
        t0 = time.monotonic()
        try:
            proc = self.start_server(job.server, log)
        except ValueError as e:  # server.model_config against a --model that is no dir
            atomic_write(log, f"engine_runner: {e}\n")
            return {"outcome": "model_config_error", "startup_s": 0.0, "kv_line_s": None}
        outcome, t_kv = "timeout", None
        while self.deadline.left_s() > 0 and time.monotonic() - t0 < job.est_s * 1.5:
            time.sleep(1.0)
            if t_kv is None and log_has(log, KV_DONE_MARKERS):
                t_kv = time.monotonic() - t0
                if job.mode == "kv":
                    outcome = "kv_line"
                    break
            failed = log_has(log, FAIL_MARKERS)
            if failed or proc.poll() is not None:
                outcome = "refused" if failed else f"exited_{proc.poll()}"
                break
            if job.mode == "full" and http_get(self.base_url() + "/health", 2.0)[0] == 200:
                outcome = "ready"
                break
        startup_s = round(time.monotonic() - t0, 1)
        if outcome != "ready":
            time.sleep(2.0)  # let the engine print its traceback
            self.stop_server()
            if outcome == "kv_line" and log_has(log, (REFUSAL_AFTER_KV,)):
                outcome = "refused"  # vLLM 0.26 refuses after the KV line (Mamba-blocks check)
        res = {
            "outcome": outcome,
            "startup_s": startup_s,
            "kv_line_s": None if t_kv is None else round(t_kv, 1),
        }
        if outcome == "ready":
            for path, name in (
                ("/server_info", "server_info.json"),
                ("/metrics", "metrics_idle.txt"),
            ):
                code, text = http_get(self.base_url() + path, 10.0)
                atomic_write(jdir / name, text if code == 200 else f"HTTP {code}: {text}")
        return res

    def _bench_proc(self, argv: list[str], log: Path, timeout_s: float) -> int:
        with open(log, "ab") as fh:
            p = subprocess.Popen(
                argv,
                stdout=fh,
                stderr=subprocess.STDOUT,
                env=serve_env(dict(os.environ), self.payload_flags),
                start_new_session=True,
            )
            try:
                return p.wait(timeout=max(timeout_s, 1.0))
            except subprocess.TimeoutExpired:
                os.killpg(p.pid, signal.SIGKILL)
                p.wait(timeout=10)
                return -9

    def run_bench(self, job: Job, jdir: Path) -> dict[str, Any]:
        b = job.bench
        assert b is not None
        if self.server is None or self.server.poll() is not None:
            return {"outcome": "no_server"}
        port = self.server_spec.port
        atomic_write(jdir / "server.json", json.dumps(dataclasses.asdict(self.server_spec)))
        log = jdir / "bench.log"
        self._gate_step_log(b.step_log)
        t0 = time.monotonic()
        if b.warmup_prompts > 0 and b.warmup_client == "http":
            bad = http_warmup(self.base_url(), self.bench_model(), b, self.deadline.left_s())
            if bad:
                return {
                    "outcome": f"warmup_failed_{bad}",
                    "bench_s": round(time.monotonic() - t0, 1),
                }
        elif b.warmup_prompts > 0:
            rc = self._bench_proc(
                bench_argv(b, self.bench_model(), port, b.warmup_prompts, None, self.python),
                log,
                self.deadline.left_s(),
            )
            if rc != 0:
                return {"outcome": f"warmup_rc_{rc}", "bench_s": round(time.monotonic() - t0, 1)}
        reset = reset_prefix_cache(self.base_url()) if b.reset_prefix_cache else None
        t_warm = time.monotonic() - t0
        before = parse_metrics(http_get(self.base_url() + "/metrics")[1])
        sampler = Sampler(self.base_url(), b.sample_period_s)
        argv = bench_argv(b, self.bench_model(), port, b.num_prompts, str(jdir), self.python)
        atomic_write(jdir / "bench.cmd.json", json.dumps(argv))
        offset = self.step_log.stat().st_size if self.step_log and self.step_log.exists() else 0
        sampler.start()
        rc = self._bench_proc(argv, log, self.deadline.left_s())
        rows = sampler.stop()
        if b.step_log and self.step_log is not None and self.step_log.exists():
            with open(self.step_log, "rb") as fh:  # the steps of the measured run only
                fh.seek(offset)
                (jdir / "steps.jsonl").write_bytes(fh.read())
        code, text = http_get(self.base_url() + "/metrics")
        atomic_write(jdir / "metrics_after.txt", text if code == 200 else f"HTTP {code}: {text}")
        after = parse_metrics(text)
        write_csv(rows, jdir / "metrics.csv")
        delta = {
            k: after[k] - before.get(k, 0.0)
            for k in after
            if k.endswith("_total") or f"{PER_POSITION}=" in k
        }
        atomic_write(jdir / "counters_delta.json", json.dumps(delta, indent=1, sort_keys=True))
        run = [r.get("running", 0.0) for r in rows]
        return {
            "outcome": "ok" if rc == 0 else f"rc_{rc}",
            "warmup_s": round(t_warm, 1),
            "bench_s": round(time.monotonic() - t0 - t_warm, 1),
            "peak_running": max(run) if run else None,
            "preemptions": delta.get("vllm:num_preemptions_total"),
            **({"prefix_cache_reset": reset} if reset is not None else {}),
        }

    def run(self, jobs: list[Job]) -> list[dict[str, Any]]:
        for job in jobs:
            jdir = self.out_dir / job.name
            left = self.deadline.left_s()
            if not self.deadline.can_start(job.est_s):
                self.summary.append(
                    {
                        "job": job.name,
                        "outcome": "skipped_deadline",
                        "left_s": round(left, 1),
                        "est_s": job.est_s,
                    }
                )
                if job.kind == "startup":
                    # the benches after a skipped start-up must not run against the previous
                    # job's server (they would be recorded under the wrong configuration)
                    self.stop_server()
                self._flush()
                continue
            jdir.mkdir(parents=True, exist_ok=True)
            atomic_write(jdir / "job.json", json.dumps(dataclasses.asdict(job), indent=1))
            t = time.time()
            run_job = self.run_startup if job.kind == "startup" else self.run_bench
            res = run_job(job, jdir)
            res = {"job": job.name, "kind": job.kind, "t_unix_s": round(t, 1), **res}
            atomic_write(jdir / "result.json", json.dumps(res, indent=1))
            self.summary.append(res)
            print(json.dumps(res), flush=True)
            self._flush()
        self.stop_server()
        self._flush()
        return self.summary

    def _flush(self) -> None:
        atomic_write(self.out_dir / "summary.json", json.dumps(self.summary, indent=1))
        if self.pack_file is not None:
            pack_results(self.out_dir, self.pack_file)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description="run a job list against a real vLLM")
    ap.add_argument("--jobs", required=True, help="job list JSON")
    ap.add_argument("--model", required=True, help="model dir or name for vllm serve")
    ap.add_argument("--out", required=True, help="results folder")
    ap.add_argument("--deadline-s", type=float, default=540.0, help="seconds from now")
    ap.add_argument("--pack", default=None, help="re-pack results here (tar.xz) after each job")
    ap.add_argument(
        "--no-payload-flags",
        action="store_true",
        help="a stock vLLM with FlashInfer: no dummy weights / triton GDN flags",
    )
    a = ap.parse_args(argv)
    try:
        jobs, _settings = parse_jobs(json.loads(Path(a.jobs).read_text()))
        for job in jobs:  # a missing config fails here, before any server starts
            if job.server is not None and job.server.model_config is not None:
                resolve_model_config(job.server.model_config, Path(a.jobs).parent)
    except (ValueError, TypeError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    out = Path(a.out)
    out.mkdir(parents=True, exist_ok=True)
    atomic_write(out / "jobs.json", Path(a.jobs).read_text())
    runner = Runner(
        model=a.model,
        out_dir=out,
        deadline=Deadline(time.monotonic() + a.deadline_s),
        payload_flags=not a.no_payload_flags,
        pack_file=Path(a.pack) if a.pack else None,
        jobs_dir=Path(a.jobs).parent,
    )
    try:
        summary = runner.run(jobs)
    finally:
        runner.stop_server()
    for r in summary:
        print(" ".join(f"{k}={v}" for k, v in r.items()))
    if all(r["outcome"] == "skipped_deadline" for r in summary):
        print(f"error: --deadline-s={a.deadline_s}: every job's est_s is larger", file=sys.stderr)
        return 3
    return 0


if __name__ == "__main__":
    sys.exit(main())
