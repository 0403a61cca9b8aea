"""``capsim calibrate``: rebuild the packaged tables, check them, print predicted TPOT."""

from __future__ import annotations

import json
import os
from pathlib import Path

import click
import numpy as np

from capsim.calibration.tables import load_tables
from capsim.commands.options import options
from capsim.commit_modes import COMMIT_MODES
from capsim.config import SpecDecodeConfig
from capsim.core.acceptance import expected_tokens_per_step
from capsim.cost.base import BatchShape
from capsim.gpus import get_gpu
from capsim.models import get_model

tokens_per_step = expected_tokens_per_step
"""Expected tokens emitted per decode step: 1 + sum_d prod_{j<=d} q_j."""


def tpot_table(
    model_name: str, gpu_name: str, tp: int, running: tuple[int, ...], ctx_tok: int, data_dir
) -> list[dict]:
    """Steady-state decode TPOT: step time of R decode requests / expected tokens per step."""
    from capsim.cost.calibrated import CalibratedStepTime

    model, gpu = get_model(model_name), get_gpu(gpu_name)
    rows = []
    for commit in COMMIT_MODES:
        spec = SpecDecodeConfig(commit=commit)
        try:
            cost = CalibratedStepTime.from_config(model, gpu, tp, spec, data_dir=data_dir)
        except ValueError as e:  # a mode whose kernels the tables lack (e.g. replay)
            rows.append({"gpu": gpu.name, "commit": commit, "refused": str(e)})
            continue
        for r in running:
            shape = BatchShape(
                num_decode_req=r,
                query_tok_per_decode=spec.window_tok,
                decode_context_tok=np.full(r, ctx_tok, dtype=np.int64),
                prefill_new_tok=np.zeros(0, dtype=np.int64),
                prefill_computed_tok=np.zeros(0, dtype=np.int64),
            )
            step_s = cost.step_time_s(shape)
            rows.append(
                {
                    "gpu": gpu.name,
                    "projection": cost.describe()["projection"],
                    "commit": commit,
                    "running": r,
                    "step_ms": step_s * 1e3,
                    "tpot_ms": step_s * 1e3 / tokens_per_step(spec),
                    "gdn_ms": cost.breakdown_s(shape)["gdn"] * 1e3,
                }
            )
    return rows


@click.command("calibrate")
@options("calibrate.check")
@options("calibrate.build")
@options("calibrate.tpot")
@options(
    "model",
    "gpu",
    "tp",
    gpu={"default": "H200", "help": "GPU (the tables are H200 measurements; others projected)"},
)
@options("calibrate.running")
@options("calibrate.ctx_tok")
@options("calibrate.data_dir")
@options("calibrate.json_out")
def calibrate(
    check: bool,
    build_from: Path | None,
    tpot: bool,
    model: str,
    gpu: str,
    tp: int,
    running: tuple[int, ...],
    ctx_tok: int,
    data_dir: Path | None,
    json_out: Path | None,
) -> None:
    """Measured step-time calibration (H200 measured; B200/H100 labelled projections)."""
    if not (check or build_from or tpot):
        raise click.UsageError("give at least one of --check, --build, --tpot")
    payload: dict = {}
    if build_from is not None:
        from capsim.calibration.build import build

        kwargs = {} if data_dir is None else {"data_dir": data_dir}
        manifest = build(build_from, **kwargs)
        click.echo(f"built {sorted(manifest['files'])}")
        payload["build"] = manifest["files"]
    if check:
        from capsim.cost.calibration_check import run_check

        text, data = run_check(load_tables("H200", data_dir))
        click.echo(text)
        payload["check"] = data
    if tpot:
        model_name, gpu_name = model, gpu
        rows = tpot_table(model_name, gpu_name, tp, running, ctx_tok, data_dir)
        priced = [r for r in rows if "refused" not in r]
        label = priced[0]["projection"] if priced else False
        click.echo(
            f"\npredicted decode TPOT, {model_name} tp{tp} on {gpu_name}, depth-3 chain, "
            f"context {ctx_tok} tok" + (f"\n{label}" if label else " (measured tables)")
        )
        click.echo(f"{'commit':<12}{'running':>8}{'step ms':>10}{'gdn ms':>9}{'TPOT ms':>9}")
        for r in rows:
            if "refused" in r:
                click.echo(f"{r['commit']:<12} refused: {r['refused']}")
                continue
            click.echo(
                f"{r['commit']:<12}{r['running']:>8}{r['step_ms']:>10.2f}{r['gdn_ms']:>9.2f}"
                f"{r['tpot_ms']:>9.2f}"
            )
        payload["tpot"] = rows
    if json_out is not None:
        tmp = json_out.with_name(json_out.name + ".tmp")
        tmp.write_text(json.dumps(payload, indent=1, default=str) + "\n")
        os.replace(tmp, json_out)
