"""Markdown tables of a moe_ops.csv (scripts/engine_moe_ops.py): per-op times, the stand-ins'
per-layer excess, and what it takes off each calibrated decode step (Qwen3.5-35B-A3B, H200).

    PYTHONPATH=. python3 scripts/moe_ops_report.py kernels/results/h200/moe_ops_call16.csv

The step differences are ``CalibratedStepTime - VllmMoeOpsStepTime`` prices of decode-only
steps (1024-token contexts; the difference does not depend on them).
"""

from __future__ import annotations

import argparse
import csv
from pathlib import Path

import numpy as np

from capsim.config import SpecDecodeConfig
from capsim.cost.base import BatchShape
from capsim.cost.calibrated import CalibratedStepTime
from capsim.cost.moe_native import LAYER_OPS, SOURCE, VllmMoeOpsStepTime, from_rows
from capsim.gpus import get_gpu
from capsim.models import get_model

MODEL = "qwen3.5-35b-a3b"


def _decode(reqs: int, k: int) -> BatchShape:
    z = np.zeros(0, np.int64)
    return BatchShape(
        num_decode_req=reqs, query_tok_per_decode=1 + k,
        decode_context_tok=np.full(reqs, 1024, np.int64), prefill_new_tok=z, prefill_computed_tok=z,
    )  # fmt: skip


def op_table(rows: list[dict]) -> list[str]:
    p50 = {(r["op"], r["impl"], int(r["tokens"])): r["p50_us"] for r in rows}
    check = {(r["op"], int(r["tokens"])): r["check"] for r in rows if r.get("check")}
    tokens = sorted({int(r["tokens"]) for r in rows})
    out = ["| op | tokens | stand-in us | engine impl | engine us | stand-in - engine us | check |",
           "|---|---:|---:|---|---:|---:|---|"]  # fmt: skip
    for op, table_impl, engine_impl in LAYER_OPS:
        for n in tokens:
            a, b = p50.get((op, table_impl, n), ""), p50.get((op, engine_impl, n), "")
            diff = f"{float(a) - float(b):.2f}" if a and b else "n/a"
            out.append(
                f"| {op} | {n} | {a} | {engine_impl} | {b} | {diff} | {check.get((op, n), '')} |"
            )
    return out


def step_table(rows: list[dict], path: Path) -> list[str]:
    corr = from_rows(rows, "e256_k8_i512_s512_h2048", path, SOURCE)
    model, gpu = get_model(MODEL), get_gpu("H200")
    head = "| k | batch | tokens M | per-layer excess at M us | calibrated step ms"
    out = [head + " | with vLLM ops ms | difference ms |", "|---:|---:|---:|---:|---:|---:|---:|"]
    for k in (0, 1, 2, 3):
        spec = SpecDecodeConfig(num_spec_tok=k)
        base = CalibratedStepTime.from_config(model, gpu, 1, spec)
        fixed = VllmMoeOpsStepTime(
            shapes=base.shapes, spec=spec, tables=base.tables, gpu=gpu, correction=corr
        )
        for batch in (1, 2, 4, 8, 16, 32, 64, 128, 256, 512):
            m = batch * (1 + k)
            if m > 512:
                continue
            a, b = base.step_time_s(_decode(batch, k)), fixed.step_time_s(_decode(batch, k))
            out.append(f"| {k} | {batch} | {m} | {corr.at(m) * 1e6:.2f} | {a * 1e3:.3f} | "
                       f"{b * 1e3:.3f} | {(a - b) * 1e3:.3f} |")  # fmt: skip
    return out


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("csv", type=Path)
    a = p.parse_args(argv)
    with a.csv.open(newline="") as fh:
        rows = list(csv.DictReader(fh))
    print("\n".join([*op_table(rows), "", *step_table(rows, a.csv)]))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
