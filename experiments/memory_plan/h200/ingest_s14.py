"""Session 14: call 44's start-up (one TP8 rank of Qwen3.5-397B-A17B as a TP1 model) into the
memory validation set, after `capsim engine record` (ingest_s14.md says the order).

Reads the recorded row (experiments/engine/startups.csv, job s_397btp8shape_g090_k3) and its
excerpt (experiments/engine/startups/<job>.log), appends one prediction row to
experiments/vllm_logs/startups.csv (model ``repo:`` + the emulated config) and writes
experiments/vllm_logs/excerpts/<id>.log with the two header lines the set's test wants.
Refuses to overwrite an existing row. Run from the repository root:

  python3 experiments/memory_plan/h200/ingest_s14.py --raw /work/results_s14/dev44 [--dry-run]
"""

from __future__ import annotations

import argparse
import csv
import io
import json
import os
import sys
from pathlib import Path

JOB = "s_397btp8shape_g090_k3"
ROW_ID = "h200-397btp8shape-g090-k3-s14call44"
CONFIG = "experiments/memory_plan/h200/qwen3.5-397b-tp8shape.config.json"
SOURCE = f"repo:experiments/engine/jobs/call44.json job {JOB}"
# engine startups.csv column -> validation column (the figures vLLM logged)
FIGURES = {
    "vllm_version": "vllm_version",
    "gpu_total_gib": "gpu_total_gib",
    "max_model_len": "max_model_len",
    "cudagraph_largest": "cudagraph_capture_sizes_max",
    "weights_gib": "weights_gib",
    "peak_activation_gib": "peak_activation_gib",
    "non_torch_gib": "non_torch_gib",
    "cudagraph_estimate_gib": "cudagraph_gib",
    "available_kv_gib": "available_kv_gib",
    "kv_cache_tokens": "kv_cache_tokens",
    "max_concurrency": "max_concurrency",
    "max_concurrency_tokens": "max_concurrency_tokens",
    "attention_block_size": "attention_block_size",
    "mamba_page_padding_pct": "mamba_page_padding_pct",
    "num_gpu_blocks": "num_gpu_blocks",
}


# the settings every session-14 H200 start-up row shares (dummy weights, TP1, gmu 0.9, 0.26's
# default batch, prefix caching and CUDA graphs as vLLM's defaults on one H200)
H200_S14_FIELDS: dict[str, str] = {
    "quantization": "none (dummy weights)",
    "gpu": "H200",
    "tp": "1",
    "pp": "1",
    "gmu": "0.9",
    "max_num_batched_tokens": "8192",
    "enable_prefix_caching": "False",
    "enforce_eager": "False",
    "role": "prediction",
}


def _cell(value: str) -> str:
    """pandas writes integer columns with gaps as '2218' or '2218.0': keep integers plain."""
    if value.endswith(".0") and value[:-2].isdigit():
        return value[:-2]
    return value


def validation_row(engine: dict[str, str], header: list[str], raw: str) -> dict[str, str]:
    row = dict.fromkeys(header, "")
    row |= {src_to: _cell(engine.get(src, "") or "") for src, src_to in FIGURES.items()}
    if engine.get("outcome") != "ready":
        raise ValueError(f"job {JOB}: outcome={engine.get('outcome')!r}, not a full start-up")
    actual = engine.get("cudagraph_actual_gib") or "?"
    samples = engine.get("cudagraph_samples_mib") or "{}"
    row |= {
        "id": ROW_ID,
        "source_url": SOURCE,
        "model_hf_id": f"repo:{CONFIG}",
        **H200_S14_FIELDS,
        "speculative_config": json.dumps({"method": "mtp", "num_speculative_tokens": 3}),
        "notes": (
            "this project's own H200 start-up (issue 25 session 14 call 44; vllm serve of a TP1 "
            f"model whose config.json is one TP8 rank of Qwen3.5-397B-A17B, {CONFIG}, "
            "--gpu-memory-utilization 0.9 --load-format dummy --gdn-prefill-backend triton "
            "--speculative-config mtp k=3 with synthetic rejection sampling, "
            "--no-enable-prefix-caching, VLLM_LOGGING_LEVEL=DEBUG), full start-up "
            f"({engine.get('startup_s')} s); max_num_seqs 1024 / max_num_batched_tokens 8192 are "
            f"vLLM 0.26.0's defaults; cudagraph_gib is the estimate, the actual pool is {actual} "
            f"GiB; per-mode DEBUG samples {samples}; num_gpu_blocks from vllm:cache_config_info; "
            "role: a memory prediction row, capsim's figures pre-registered in "
            "experiments/memory_plan/h200/prereg_s14.md before the call; raw results: "
            f"{raw}"
        ),
    }
    return row


def excerpt(lines: str, raw: str) -> str:
    head = (
        f"# source: {SOURCE}\n"
        "# lines of the raw server.log (vLLM 0.26.0 on the lent H200, session 14 call 44, one "
        "TP8 rank of Qwen3.5-397B-A17B as a TP1 model, k=3 (MTP), gmu 0.9, prefix caching off, "
        "VLLM_LOGGING_LEVEL=DEBUG, full start-up; dummy weights, FA3, Triton MoE, torch sampler, "
        "Triton GDN prefill), as `capsim engine record` kept them (experiments/engine/startups/"
        f"{JOB}.log); raw results: {raw}\n"
    )
    return head + lines


def _write(path: Path, text: str) -> None:
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(text)
    os.replace(tmp, path)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--raw", required=True, help="where the unpacked raw results are kept")
    ap.add_argument("--root", default=".", help="repository root")
    ap.add_argument("--dry-run", action="store_true", help="print the row, write nothing")
    a = ap.parse_args(argv)
    root = Path(a.root)
    with (root / "experiments/engine/startups.csv").open(newline="") as fh:
        engine = next((r for r in csv.DictReader(fh) if r["job"] == JOB), None)
    if engine is None:
        print(f"error: job {JOB} is not in experiments/engine/startups.csv", file=sys.stderr)
        return 2
    target = root / "experiments/vllm_logs/startups.csv"
    text = target.read_text()
    rows = list(csv.DictReader(io.StringIO(text)))
    header = text.splitlines()[0].split(",")
    if any(r["id"] == ROW_ID for r in rows):
        print(f"error: id={ROW_ID} is already in {target}", file=sys.stderr)
        return 2
    try:
        row = validation_row(engine, header, a.raw)
    except ValueError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    lines = (root / "experiments/engine/startups" / f"{JOB}.log").read_text()
    if a.dry_run:
        print(json.dumps(row, indent=1))
        return 0
    out = io.StringIO()
    csv.DictWriter(out, fieldnames=header, lineterminator="\n").writerow(row)
    _write(target, text + ("" if text.endswith("\n") else "\n") + out.getvalue())
    _write(root / "experiments/vllm_logs/excerpts" / f"{ROW_ID}.log", excerpt(lines, a.raw))
    print(f"added {ROW_ID} to {target}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
