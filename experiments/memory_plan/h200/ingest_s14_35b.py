"""Session 14: the two 35B start-ups of calls 43 and 45 into the memory validation set, the way
session 13's rows (h200-35b-*-s13call40/41/42) were added: one prediction row each in
experiments/vllm_logs/startups.csv and an excerpt of the raw server.log's memory lines.

The figures come from the recorded engine rows (experiments/engine/startups.csv, written by
`capsim engine record`); the excerpt from the raw server.log. Refuses to overwrite a row.
Run from the repository root:

  python3 experiments/memory_plan/h200/ingest_s14_35b.py [--dry-run]
"""

from __future__ import annotations

import argparse
import csv
import io
import json
import os
import re
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
from ingest_s14 import FIGURES, H200_S14_FIELDS, _cell  # noqa: E402  (the same column map as call 44's row)

# memory lines kept in the excerpt (the set of session 13's excerpts)
KEEP = re.compile(
    r"version 0\.26|non-default args|Resolved architecture|Chunked prefill is enabled|"
    r"FlashInfer top-p|Unquantized MoE backend|Using FlashAttention version|Using TritonExperts|"
    r"Model loading took|Setting attention block size|Padding mamba page|"
    r"Initial profiling/warmup run|padding layers|Profiling CUDA graph memory|"
    r"Estimated CUDA graph|Available KV cache memory|GPU KV cache size|Maximum concurrency|"
    r"Graph capturing finished|CUDA graph pool memory|Free memory on device|init engine"
)

ROLE_35B = (
    "role declared in experiments/engine/PLAN.md's {line} line: a memory prediction row; "
    "capsim's figures were not pre-registered as numbers: they are what {main} prints, whose "
    "memory code (capsim/memory less log_validate.py, which only reads rows) equals 9305048's "
    "(2026-12-04 03:40 UTC): "
    "{figures}; compared in experiments/memory_plan/h200/comparison_s14.md"
)

ROWS = [
    {
        "id": "h200-35b-g090-k2-r5-s14call43",
        "job": "s_g090_k2_steps_r5",
        "call": 43,
        "raw": "/work/results_s14/dev43/x/s_g090_k2_steps_r5/server.log",
        "k": 2,
        "what": (
            "fifth repeat of h200-35b-g090-k2-s7call22, on a new machine (boot_id e1f0d836): "
            "the first engine start-up on it after the stage call (cold compile cache: "
            "compilation 55.65 s, first profiling run 86.59 s, start-up 318.3 s)"
        ),
        "started": "2026-12-04 18:54 UTC device clock",
        "plan_line": "2026-12-04 18:54 UTC",
        "main": "main 606e5f8 (committed 18:53 UTC, before call 43 started at 18:54 UTC)",
        "figures": (
            "KV 49.70 GiB, 2209 blocks (2208 usable), block 1072, padding 0.75%, peak 8.05, "
            "non-torch 0.25, graph estimate 0.73, 'GPU KV cache size' 2,279,827 tokens"
        ),
        "extra": "'Padding mamba page size by 0.75%'; PIECEWISE=49 FULL=49 (largest 498); "
        "'Add 3 padding layers'",
    },
    {
        "id": "h200-35b-g090-k0-r3-s14call45",
        "job": "s_g090_k0_steps_s14",
        "call": 45,
        "raw": "/work/results_s14/dev45/x/s_g090_k0_steps_s14/server.log",
        "k": 0,
        "what": (
            "a repeat of h200-35b-g090-k0-s2call4 (fit) and h200-35b-g090-k0-debug-s5call15 "
            "on a new machine (boot_id 0f392d67), its first engine start-up (a new compile "
            "key, cold compile cache: compilation 50.86 s, first profiling run 94.37 s, start-up "
            "290.2 s)"
        ),
        "started": "2026-12-04 19:05 UTC device clock",
        "plan_line": "2026-12-04 19:05 UTC",
        "main": "main a7fb697 (committed 19:04 UTC, before call 45 started at 19:05 UTC)",
        "figures": (
            "KV 55.28 GiB, 2744 blocks (2743 usable), block 1056, padding 0.76%, peak 4.23, "
            "non-torch 0.25, graph estimate 0.55, 'GPU KV cache size' 2,854,456 tokens"
        ),
        "extra": "'Padding mamba page size by 0.76%'; PIECEWISE=51 FULL=51 (largest 512); "
        "no padding layers at k=0",
    },
]


def validation_row(spec: dict, engine: dict[str, str], header: list[str]) -> dict[str, str]:
    if engine.get("outcome") != "ready":
        raise ValueError(f"job {spec['job']}: outcome={engine.get('outcome')!r}")
    row = dict.fromkeys(header, "")
    row |= {dst: _cell(engine.get(src, "") or "") for src, dst in FIGURES.items()}
    if row["max_concurrency"]:  # as logged ("8.70x"); the engine csv keeps 8.7
        row["max_concurrency"] = f"{float(row['max_concurrency']):.2f}"
    k = spec["k"]
    flags = "--gpu-memory-utilization 0.9 --load-format dummy --gdn-prefill-backend triton"
    if k:
        flags += f" --speculative-config mtp k={k} with synthetic rejection sampling"
    else:
        flags += ", no speculation"
    notes = (
        f"this project's own H200 start-up (issue 21 session {spec.get('session', 14)} call "
        f"{spec['call']}, "
        f"{spec['started']}; vllm serve MODEL {flags}, prefix caching off), {spec['what']}; "
        "full start-up with the step log; max_num_seqs 1024 / max_num_batched_tokens 8192 are "
        f"vLLM 0.26.0's defaults; {spec['extra']}; cudagraph_gib is the estimate, the actual "
        f"pool is {engine.get('cudagraph_actual_gib')} GiB; num_gpu_blocks from "
        "vllm:cache_config_info; "
        + ROLE_35B.format(line=spec["plan_line"], main=spec["main"], figures=spec["figures"])
    )
    row |= {
        "id": spec["id"],
        "source_url": f"repo:experiments/engine/jobs/call{spec['call']}.json job {spec['job']}",
        "model_hf_id": "Qwen/Qwen3.5-35B-A3B",
        **H200_S14_FIELDS,
        "speculative_config": (
            json.dumps({"method": "mtp", "num_speculative_tokens": k}) if k else ""
        ),
        "notes": notes,
    }
    return row


def excerpt(spec: dict, raw_log: str) -> str:
    lines = [ln for ln in raw_log.splitlines() if KEEP.search(ln)]
    k = spec["k"]
    head = (
        f"# source: repo:experiments/engine/jobs/call{spec['call']}.json job {spec['job']}\n"
        f"# lines of the raw server.log (vLLM 0.26.0 on the lent H200, 2026-12-04, "
        f"{f'k={k} (MTP)' if k else 'k=0'}, gmu 0.9, max_num_batched_tokens 8192, prefix "
        f"caching off, {spec['what']}, full start-up with the step log; dummy weights, FA3, "
        "Triton MoE, torch sampler, Triton GDN prefill"
        + (", synthetic rejection sampling" if k else "")
        + "); memory lines only; raw results: "
        f"{spec['raw']} (the device results tarball of call {spec['call']}), the engine "
        f"runner's own excerpt: experiments/engine/startups/{spec['job']}.log\n"
    )
    return head + "\n".join(lines) + "\n"


def main(argv: list[str] | None = None, rows: list[dict] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--root", default=".")
    ap.add_argument("--dry-run", action="store_true")
    a = ap.parse_args(argv)
    root = Path(a.root)
    with (root / "experiments/engine/startups.csv").open(newline="") as fh:
        engine = {r["job"]: r for r in csv.DictReader(fh)}
    target = root / "experiments/vllm_logs/startups.csv"
    text = target.read_text()
    header = text.splitlines()[0].split(",")
    have = {r["id"] for r in csv.DictReader(io.StringIO(text))}
    out = io.StringIO()
    w = csv.DictWriter(out, fieldnames=header, lineterminator="\n")
    excerpts = {}
    for spec in ROWS if rows is None else rows:
        if spec["id"] in have:
            print(f"error: id={spec['id']} is already in {target}", file=sys.stderr)
            return 2
        row = validation_row(spec, engine[spec["job"]], header)
        excerpts[spec["id"]] = excerpt(spec, Path(spec["raw"]).read_text())
        if a.dry_run:
            print(json.dumps(row, indent=1))
            print(excerpts[spec["id"]])
        w.writerow(row)
    if a.dry_run:
        return 0
    new = text + ("" if text.endswith("\n") else "\n") + out.getvalue()
    tmp = target.with_name(target.name + ".tmp")
    tmp.write_text(new)
    os.replace(tmp, target)
    for rid, body in excerpts.items():
        (root / "experiments/vllm_logs/excerpts" / f"{rid}.log").write_text(body)
        print(f"added {rid}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
