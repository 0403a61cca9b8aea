"""Launch-configuration sweeps of the grid runner: the window kernel alone (--window) and
the round-4 kernel configurations (--sweep)."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

from ..timing import time_graph_us, write_csv
from .checks import Cell, kernel_fn
from .shapes import (
    STATE_DTYPES,
    WINDOWS,
    ModelShape,
)

WINDOW_COLUMNS = (
    "model_shape", "T", "tree", "B", "Hv", "Hk", "solve", "num_warps",
    "p20_us", "p50_us", "p80_us",
)  # fmt: skip


def run_window(shapes, batches, csv_path: Path, notes: list[str], policy) -> list[dict]:
    """Time ``treewy_prep_kernel`` alone (the verify's first launch; no state read).

    Every window with the default configuration; for BW = 64 (W = 40) also the round-2
    serial solve and 4 / 8 / 16 warps, so both are measured side by side in one run.
    """
    import torch

    from ...gdn_verify import treewy as tw
    from ...gdn_verify._jit import pad_window

    rows: list[dict] = []
    for shape in shapes:
        for batch in batches:
            for tree in WINDOWS:
                w = tree.num_nodes
                c = Cell(shape, "bfloat16", batch, tree, seed=batch * 1000 + w)
                bw, _ = pad_window(w)
                default = ("blocked" if policy.prep_blocked else "serial", policy.prep_warps(bw))
                variants = [default]
                if 32 < bw <= 64:
                    variants += [
                        (solve, nw)
                        for solve in ("blocked", "serial")
                        for nw in (4, 8, 16)
                        if (solve, nw) != default
                    ]
                for solve, nw in variants:

                    def fn(solve=solve, nw=nw, c=c, shape=shape):
                        return tw.launch_prep(
                            c.q, c.k, c.log_gate, c.beta, c.parent,
                            scale=shape.dk**-0.5,
                            num_heads=(shape.num_k_heads, shape.num_v_heads),
                            num_warps=nw, blocked=solve == "blocked",
                        )  # fmt: skip

                    try:
                        p20, p50, p80 = time_graph_us(fn)
                    except Exception as e:
                        note = f"window {shape.name} B={batch} {tree.label} {solve} {nw}: {e!r}"
                        notes.append(note[:400])
                        print("FAILED", note[:400], flush=True)
                        continue
                    row = {
                        "model_shape": shape.name, "T": w, "tree": tree.label, "B": batch,
                        "Hv": shape.num_v_heads, "Hk": shape.num_k_heads, "solve": solve,
                        "num_warps": nw, "p20_us": round(p20, 2), "p50_us": round(p50, 2),
                        "p80_us": round(p80, 2),
                    }  # fmt: skip
                    rows.append(row)
                    print("window", json.dumps(row), flush=True)
                del c
                torch.cuda.empty_cache()
            write_csv(csv_path, rows, WINDOW_COLUMNS)
    return rows


SWEEP_COLUMNS = (
    "part", "config", "kernel", "model_shape", "state_dtype", "T", "tree", "B",
    "p20_us", "p50_us", "p80_us",
)  # fmt: skip
# Sweep candidates (bench --sweep): (dv tile, warps, key chunk). Round 4's three sweeps
# (tf32 math) are in BENCHMARKS.md with their sweep.csv; this is round 5's, for the fp32
# contract's kernels (the bf16x3 split raised the stream kernel at W = 4 from 136 to 179
# registers at (32, 2, 128); at a 64-key chunk it compiles to 108, bench/resources.py).
# The first entry of each list is the current default (round 5 run 3 adopted (64, 4, 64)
# for the W = 40 fp32 commit; its other winners were within 1% or mixed).
STREAM16_VERIFY = ((32, 2, 128), (32, 2, 64), (32, 4, 64), (16, 2, 64), (64, 4, 64), (32, 2, 32))
STREAM16_DEFERRED = ((64, 2, 64), (32, 2, 64), (32, 4, 64), (64, 4, 32), (32, 2, 32))
STREAM64_VERIFY = ((64, 4, 64), (32, 4, 64), (32, 2, 64), (64, 4, 32), (32, 4, 32))
STREAM64_DEFERRED = ((64, 4, 64), (32, 4, 64), (64, 4, 32), (32, 4, 32))
COMMIT16_F32 = ((64, 4, 64), (64, 4, 32), (32, 4, 64), (32, 2, 64), (64, 8, 64))
COMMIT64_F32 = ((64, 4, 64), (64, 4, 32), (32, 4, 32), (32, 2, 32), (64, 8, 32))
# (dv tile, warps, state loaded before the window math)
SMALL_VERIFY = ((32, 4, False), (16, 2, False), (32, 2, False), (16, 1, False))
SMALL_FUSED = ((32, 2, False), (16, 2, False), (32, 4, False))
F32, BF16 = STATE_DTYPES
SWEEP_CELLS = {
    "stream16-verify": [("treewy_verify", F32, "chain4"), ("treewy_verify", F32, "2,2,2"),
                        ("treewy_verify", BF16, "chain4")],
    "stream16-deferred": [("deferred", F32, "chain4"), ("deferred", F32, "2,2,2"),
                          ("deferred", BF16, "chain4")],
    "stream64-verify": [("treewy_verify", F32, "3,3,3"), ("treewy_verify", BF16, "3,3,3")],
    "stream64-deferred": [("deferred", F32, "3,3,3")],
    "commit16-float32": [("treewy_commit", F32, "chain4"), ("treewy_commit", F32, "2,2,2")],
    "commit64-float32": [("treewy_commit", F32, "3,3,3")],
    "path8": [("treewy_verify", F32, "chain4"), ("deferred", F32, "chain4")],
    "small8-fused": [("fused_chain", F32, "chain4"), ("fused_chain", BF16, "chain4")],
}  # fmt: skip


def sweep_parts(policy) -> dict[str, tuple[Callable[[object, dict], object], list[dict], dict]]:
    """part -> (apply(policy, cfg) -> a new policy with cfg, the candidates, the default
    in ``policy``). Nothing is changed in place: each candidate is its own LaunchPolicy."""
    import dataclasses

    def named(cands, names=("block_v", "num_warps", "bkc")):
        return [dict(zip(names, c, strict=True)) for c in cands]

    def small(cands):
        return named(cands, ("block_v", "num_warps", "early_s"))

    def table_part(table, key, cands):
        return (
            lambda pol, cfg: pol.with_entry(table, key, cfg),
            cands,
            dict(getattr(policy, table)[key]),
        )

    def set_path8(pol, cfg: dict):
        """Single launch for W <= 8 at any B (with cfg), or only below 512 heads."""
        if not cfg["single"]:
            return dataclasses.replace(pol, small_max_heads=512)
        pol = pol.with_entry(
            "small", (8, "verify"), {k: v for k, v in cfg.items() if k != "single"}
        )
        return dataclasses.replace(pol, small_max_heads=1 << 30)

    path8_default = {"single": policy.small_max_heads > 512, **policy.small[8, "verify"]}
    return {
        "stream16-verify": table_part("stream", (16, "verify"), named(STREAM16_VERIFY)),
        "stream16-deferred": table_part("stream", (16, "deferred"), named(STREAM16_DEFERRED)),
        "stream64-verify": table_part("stream", (64, "verify"), named(STREAM64_VERIFY)),
        "stream64-deferred": table_part("stream", (64, "deferred"), named(STREAM64_DEFERRED)),
        "commit16-float32": table_part("commit", (16, "float32"), named(COMMIT16_F32)),
        "commit64-float32": table_part("commit", (64, "float32"), named(COMMIT64_F32)),
        "path8": (
            set_path8,
            [{"single": False, **path8_default}]
            + [{"single": True, **c} for c in small(SMALL_VERIFY)],
            dict(path8_default),
        ),
        "small8-fused": table_part("small", (8, "fused"), small(SMALL_FUSED)),
    }


def run_sweep(
    shape: ModelShape, csv_path: Path, notes: list[str], policy, batch: int = 256
) -> tuple[dict, object]:
    """Time the kernel configurations side by side, part by part (each part starts from
    the previous parts' winners), and return (the choice with the defaults it replaced,
    the LaunchPolicy of the winners). Rows go to sweep.csv (SWEEP_COLUMNS; a diagnostic,
    never read by the calibration)."""
    import torch

    trees = {"chain4": WINDOWS[0], "2,2,2": WINDOWS[2], "3,3,3": WINDOWS[4]}
    cells: dict[tuple[str, str], Cell] = {}

    def cell(sd: str, label: str) -> Cell:
        if (sd, label) not in cells:
            tree = trees[label]
            cells[sd, label] = Cell(shape, sd, batch, tree, seed=batch * 1000 + tree.num_nodes)
        return cells[sd, label]

    rows: list[dict] = []

    def measure(part: str, cfg: dict, pol) -> float:
        total = 0.0
        for kernel, sd, label in SWEEP_CELLS[part]:
            c = cell(sd, label)
            try:
                p20, p50, p80 = time_graph_us(kernel_fn(kernel, c, None, None, None, policy=pol))
            except Exception as e:
                notes.append(f"sweep {part} {cfg} {kernel} {sd} {label}: {e!r}"[:400])
                print("FAILED", notes[-1], flush=True)
                return float("inf")
            total += p50
            row = {
                "part": part, "config": json.dumps(cfg, sort_keys=True), "kernel": kernel,
                "model_shape": shape.name, "state_dtype": sd, "T": c.tree.num_nodes,
                "tree": c.tree.label, "B": batch, "p20_us": round(p20, 2),
                "p50_us": round(p50, 2), "p80_us": round(p80, 2),
            }  # fmt: skip
            rows.append(row)
            print("sweep", json.dumps(row), flush=True)
        return total

    choice: dict = {"defaults": {}}
    for part, (apply, options, default) in sweep_parts(policy).items():
        choice["defaults"][part] = default
        best_cfg, best_us = default, float("inf")
        for cfg in options:
            total = measure(part, cfg, apply(policy, cfg))
            if total < best_us:
                best_cfg, best_us = cfg, total
        policy = apply(policy, best_cfg)
        choice[part] = best_cfg | {"sum_p50_us": round(best_us, 2)}
        print("sweep choice", part, json.dumps(choice[part]), flush=True)
        write_csv(csv_path, rows, SWEEP_COLUMNS)
    cells.clear()
    torch.cuda.empty_cache()
    return choice, policy


def pick_window_config(rows: list[dict], policy) -> tuple[dict | None, object]:
    """The fastest (solve, num_warps) of the W = 40 window kernel at the largest B (the
    (3,3,3) tree, first shape): (the choice, a policy with it) or (None, ``policy``)."""
    import dataclasses

    # a run that fell back to the serial solve (smoke gate) does not return to the blocked one
    ok = {"blocked", "serial"} if policy.prep_blocked else {"serial"}
    cand = [r for r in rows if r["T"] == 40 and r["tree"] == "3,3,3" and r["solve"] in ok]
    if not cand:
        return None, policy
    top = max(r["B"] for r in cand)
    cand = [r for r in cand if r["B"] == top and r["model_shape"] == cand[0]["model_shape"]]
    best = min(cand, key=lambda r: r["p50_us"])
    policy = dataclasses.replace(
        policy.with_entry("prep_warps_by_bw", 64, best["num_warps"]),
        prep_blocked=best["solve"] == "blocked",
    )
    choice = {k: best[k] for k in ("model_shape", "B", "solve", "num_warps", "p50_us")}
    print("window kernel config for the grid:", json.dumps(choice), flush=True)
    return choice, policy
