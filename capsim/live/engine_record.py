"""Turn a real-engine results folder (engine_runner's output) into compact committed files.

Per bench job -> ``runs/<job>/``: job.json, server.json, bench_summary.json (vllm bench
serve's scalar results and its per-position acceptance), requests.csv (input_len,
output_len, ttft_s, e2el_s, start_s per request, from --save-detailed), metrics.csv (the
0.5 s /metrics samples), counters_delta.json (vllm: counters over the measured run),
jit_warnings.txt (vLLM's "Triton kernel JIT compilation during inference" lines that fell
inside the measured window, if any).
Per start-up job -> ``startups/<job>.log`` (the lines capsim's log parser reads, plus every
WARNING/ERROR/Traceback line) and a row of ``startups.csv`` (capsim.memory.vllm_log fields).
"""

from __future__ import annotations

import json
import os
import re
from pathlib import Path
from typing import Any

import pandas as pd

from capsim.memory.vllm_log import parse_vllm_log

_KEEP = re.compile(
    r"Model loading took|Setting attention block size|Padding mamba|padding layers|"
    r"Profiling CUDA graph|Estimated CUDA graph|Available KV cache|"
    r"GPU KV cache size|"
    r"Maximum concurrency|CUDA graph pool memory|Free memory on device|"
    r"Initializing a V1 LLM engine|non-default args|version|Graph capturing|"
    r"exceeds available|Error|WARNING|Traceback|torch.compile|init engine|"
    r"Asynchronous scheduling|Chunked prefill is enabled"
)
# A DEBUG-level start-up (server.log_level "DEBUG") prints thousands of lines; of its DEBUG lines
# only these are kept: vLLM 0.26's per-mode CUDA-graph estimate (gpu_model_runner.py
# profile_cudagraph_memory: "Estimated FULL CUDA graph memory: X MiB first-capture + (n-1) x Y
# MiB per-graph"), the worker's memory snapshot / request and the profiling summary.
_DEBUG_LEVEL = re.compile(r"\bDEBUG \d\d-\d\d ")
_KEEP_DEBUG = re.compile(
    r"Estimated \w+ CUDA graph memory|memory snapshot|requested memory|Memory profiling takes|"
    r"Defaulting max_num"
)
_STAMP = re.compile(r"(\d\d)-(\d\d) (\d\d):(\d\d):(\d\d)")
STARTUP_COLUMNS = (
    "job",
    "outcome",
    "startup_s",
    "kv_line_s",
    "gmu",
    "num_speculative_tokens",
    "max_num_seqs",
    "max_num_batched_tokens",
    "enable_prefix_caching",
    "log_level",
    "model_config",
)


def _write(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(text)
    os.replace(tmp, path)


def _json(path: Path, obj: Any) -> None:
    _write(path, json.dumps(obj, indent=1, sort_keys=True) + "\n")


def record_bench(jdir: Path, dest: Path, server_log: Path | None) -> None:
    b = json.loads((jdir / "bench.json").read_text())
    scalars = {k: v for k, v in b.items() if not isinstance(v, (list, dict))}
    scalars["spec_decode_per_position_acceptance_rates"] = b.get(
        "spec_decode_per_position_acceptance_rates"
    )
    _json(dest / "bench_summary.json", scalars)
    itl_sum = [sum(x) for x in b["itls"]]
    t0 = min(b["start_times"])
    reqs = pd.DataFrame(
        {
            "input_len": b["input_lens"],
            "output_len": b["output_lens"],
            "start_s": [round(s - t0, 6) for s in b["start_times"]],
            "ttft_s": [round(t, 6) for t in b["ttfts"]],
            "e2el_s": [round(t + s, 6) for t, s in zip(b["ttfts"], itl_sum, strict=True)],
        }
    )
    _write(dest / "requests.csv", reqs.to_csv(index=False))
    for f in ("job.json", "server.json", "metrics.csv"):
        _write(dest / f, (jdir / f).read_text())
    delta = json.loads((jdir / "counters_delta.json").read_text())
    _json(dest / "counters_delta.json", {k: v for k, v in delta.items() if k.startswith("vllm:")})
    if server_log is not None and server_log.exists():
        _write(dest / "jit_warnings.txt", "".join(_jit_lines(server_log, b["date"], scalars)))
    if (jdir / "steps.jsonl").exists():  # the engine core's per-step log (step_log: true)
        steps = pd.read_json(jdir / "steps.jsonl", lines=True)
        if len(steps):
            t0 = steps["t_sched_s"].min()
            for col in ("t_sched_s", "t_done_s"):
                steps[col] = (steps[col] - t0).round(6)
            _write(dest / "steps.csv", steps.drop(columns=["t_unix_s"]).to_csv(index=False))
    if (jdir / "metrics_after.txt").exists():  # vLLM's histograms (TTFT, prefill, queue)
        keep = [
            ln
            for ln in (jdir / "metrics_after.txt").read_text().splitlines(keepends=True)
            if ln.startswith("vllm:") and "_created" not in ln
        ]
        _write(dest / "metrics_after.txt", "".join(keep))


def _jit_lines(log: Path, date: str, s: dict[str, Any]) -> list[str]:
    """JIT warnings stamped inside the measured window [end - duration, end] (1 s slack)."""
    end = int(date[9:11]) * 3600 + int(date[11:13]) * 60 + int(date[13:15])
    lo = end - float(s["duration"]) - 1.0
    out = []
    for line in log.read_text(errors="replace").splitlines(keepends=True):
        m = _STAMP.search(line)
        if "JIT compilation during inference" in line and m:
            t = int(m.group(3)) * 3600 + int(m.group(4)) * 60 + int(m.group(5))
            if lo <= t <= end + 1:
                out.append(line)
    return out


def excerpt_lines(log: str) -> list[str]:
    """The start-up lines kept in ``startups/<job>.log`` (each cut at 600 characters)."""
    keep = []
    for ln in log.splitlines():
        if "Capturing CUDA" in ln:
            continue
        pattern = _KEEP_DEBUG if _DEBUG_LEVEL.search(ln) else _KEEP
        if pattern.search(ln):
            keep.append(ln[:600] + "\n")
    return keep


def record_startup(jdir: Path, dest_root: Path) -> dict[str, Any]:
    log = (jdir / "server.log").read_text(errors="replace")
    keep = excerpt_lines(log)
    _write(dest_root / "startups" / f"{jdir.name}.log", "".join(keep))
    job = json.loads((jdir / "job.json").read_text())
    res = json.loads((jdir / "result.json").read_text())
    srv = job["server"]
    row = {
        "job": jdir.name,
        "outcome": res["outcome"],
        "startup_s": res["startup_s"],
        "kv_line_s": res["kv_line_s"],
        "gmu": srv["gpu_memory_utilization"],
        "num_speculative_tokens": srv["num_speculative_tokens"],
        "max_num_seqs": srv["max_num_seqs"],
        "max_num_batched_tokens": srv["max_num_batched_tokens"],
        "enable_prefix_caching": srv["enable_prefix_caching"],
        "log_level": srv.get("log_level"),  # None: vLLM's default (INFO)
        "model_config": srv.get("model_config"),  # None: the model dir's own config.json
    }
    # DEBUG lines other than the kept ones are not parsed (a "torch version 2.11.0" line before
    # vLLM's banner would otherwise be read as vLLM's version); an INFO log is parsed whole
    parsed = parse_vllm_log(
        "\n".join(
            ln for ln in log.splitlines() if not _DEBUG_LEVEL.search(ln) or _KEEP_DEBUG.search(ln)
        )
    ).as_dict()
    parsed.pop("lines_read", None)
    m = re.search(r"max_num_seqs \((\d+)\) exceeds available Mamba cache blocks \((\d+)\)", log)
    parsed["refusal"] = m.group(0) if m else None
    if (
        m and row["outcome"] == "kv_line"
    ):  # the runner stopped at the KV line; vLLM refused after it
        row["outcome"] = "refused"
    prom = jdir / "metrics_idle.txt"  # vllm:cache_config_info labels (full start-ups only)
    if prom.exists():
        line = next(
            (
                ln
                for ln in prom.read_text().splitlines()
                if ln.startswith("vllm:cache_config_info{")
            ),
            "",
        )
        labels = dict(re.findall(r'(\w+)="([^"]*)"', line))
        for key, label in (
            ("num_gpu_blocks", "num_gpu_blocks"),
            ("cache_block_size", "block_size"),
            ("kv_cache_size_tokens", "kv_cache_size_tokens"),
        ):
            parsed[key] = int(labels[label]) if label in labels else None
    return {
        **row,
        **{k: (json.dumps(v) if isinstance(v, (list, dict)) else v) for k, v in parsed.items()},
    }


def record(results: Path, dest_root: Path) -> list[dict[str, Any]]:
    """Record every finished job of one results folder; returns the start-up rows."""
    rows, server_log = [], None
    for jdir in sorted(
        (p for p in results.iterdir() if p.is_dir()),
        key=lambda p: (
            json.loads((p / "result.json").read_text())["t_unix_s"]
            if (p / "result.json").exists()
            else 0
        ),
    ):
        if not (jdir / "result.json").exists():
            continue
        job = json.loads((jdir / "job.json").read_text())
        if job["kind"] == "startup":
            rows.append(record_startup(jdir, dest_root))
            server_log = jdir / "server.log"
        elif (jdir / "bench.json").exists():
            record_bench(jdir, dest_root / "runs" / jdir.name, server_log)
    return rows
