"""Measure every GDN verify kernel on one GPU in one run; check them against float64 first.

    python -m capsim_kernels.bench.run --out DIR [--commit SHA] [--quick]
    python -m capsim_kernels.bench.run --render DIR/gdn_verify.csv   # markdown table
    python -m capsim_kernels.bench.run --out DIR --shapes qwen3.5-35b-a3b-tp1 --window
    python -m capsim_kernels.bench.run --out DIR --sweep    # launch configs first

``--shapes`` measures (and checks) a subset of the model shapes; ``--window`` first times
the per-head window kernel (``treewy_prep_kernel``) alone into DIR/window.csv (its own
schema, WINDOW_COLUMNS; the calibration never reads it), with the round-2 serial solve
and other warp counts at W > 32 side by side. ``--sweep`` first times the candidate
launch configurations (SWEEP_CELLS, sweep_parts) side by side into DIR/sweep.csv, applies
the fastest per part, re-checks against float64, then runs the grid; ``--two-launch``
turns the single-launch kernel off.

Writes DIR/gdn_verify.csv (one row per measured cell, the calibration schema below) and
DIR/meta.json (GPU, driver, versions, commit, date, command, copy bandwidth, correctness
checks, notes). Times are CUDA-graph replays of one GDN layer call, L2 flushed before each
replay (triton.testing.do_bench), random inputs, p20/p50/p80 in microseconds. The memory
floor is bytes_moved (shapes.py) over the device-to-device copy bandwidth measured in the
same run (bytes read plus written).
"""

from __future__ import annotations

import argparse
import csv
import datetime as dt
import json
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

from .shapes import (
    BATCHES,
    CHAIN_ONLY,
    KERNELS,
    MODEL_SHAPES,
    STATE_DTYPES,
    WINDOWS,
    ModelShape,
    bytes_moved,
)
from .timing import atomic_write, measure_copy_gbps, time_graph_us, write_csv

COLUMNS = (
    "kernel",
    "model_shape",
    "state_dtype",
    "T",
    "tree",
    "B",
    "Hv",
    "Hk",
    "dk",
    "dv",
    "p20_us",
    "p50_us",
    "p80_us",
    "bytes_moved",
    "achieved_gbps",
    "floor_us",
    "copy_gbps",
)
WINDOW_COLUMNS = (
    "model_shape", "T", "tree", "B", "Hv", "Hk", "solve", "num_warps",
    "p20_us", "p50_us", "p80_us",
)  # fmt: skip
# relative errors against float64 (round 5): committed fp32 states within the accuracy
# contract (1e-6, _jit.DotPrecision); pseudo-values are fp32 intermediates (1e-5); bf16
# states and outputs within bf16 rounding over a window
# fla's kernels are reference points, not held to capsim's contract: its chunk kernel runs
# its products in bf16/tf32 (fp32 state 3.2e-3 off float64, round 5 run 1), so fla rows
# are checked at the bf16 class ("third_party")
CHECK_TOL = {"bf16_out": 1e-2, "fp32_state": 1e-6, "fp32_vt": 1e-5, "bf16_state": 1.5e-2,
             "third_party": 1.5e-2}  # fmt: skip
# which timed kernels each check covers (a kernel with a failed or missing check is not
# timed)
CHECK_KERNELS = {
    "storeall": ("storeall",),
    "treewy_o": ("treewy_verify", "treewy_commit", "treewy_verify_commit"),
    "treewy_vt": ("treewy_verify", "treewy_commit", "treewy_verify_commit"),
    "treewy_commit_state": ("treewy_commit", "treewy_verify_commit"),
    "fused": ("fused_chain",),
    "deferred": ("deferred",),
    "fla_recurrent": ("fla_fused_recurrent",),
    "fla_chunk": ("fla_chunk",),
}


def check_tolerance(key: str, state_dtype: str) -> float:
    if key.endswith("_o"):
        return CHECK_TOL["bf16_out"]
    if key.startswith("fla_"):
        return CHECK_TOL["third_party"]
    if state_dtype != "float32":
        return CHECK_TOL["bf16_state"]
    return CHECK_TOL["fp32_vt"] if key.endswith("_vt") else CHECK_TOL["fp32_state"]


def checked_kernels(checks: list[dict]) -> dict[tuple[str, str, str], set[str]]:
    """(model shape, state dtype, tree label) -> kernels whose every check passed."""
    out: dict[tuple[str, str, str], set[str]] = {}
    for c in checks:
        if "model_shape" not in c:
            continue
        key = (c["model_shape"], c["state_dtype"], c["tree"])
        covered: set[str] = set()
        failed: set[str] = set()
        for name, val in c.items():
            if not isinstance(val, float):
                continue
            for prefix, kernels in CHECK_KERNELS.items():
                if name.startswith(prefix):
                    bad = not val <= check_tolerance(name, c["state_dtype"])
                    (failed if bad else covered).update(kernels)
        out[key] = covered - failed
    return out


def _sh(cmd: list[str]) -> str:
    try:
        return subprocess.run(cmd, capture_output=True, text=True, timeout=30).stdout.strip()
    except (OSError, subprocess.SubprocessError) as e:
        return f"unavailable ({e.__class__.__name__})"


def collect_meta(commit: str) -> dict:
    import torch
    import triton

    try:
        import fla

        fla_version = getattr(fla, "__version__", "unknown")
    except ImportError:
        fla_version = None
    return {
        "gpu": torch.cuda.get_device_name(),
        "driver": _sh(["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"]),
        "cuda": torch.version.cuda,
        "torch": torch.__version__,
        "triton": triton.__version__,
        "fla_core": fla_version,
        "python": sys.version.split()[0],
        "commit": commit,
        "date_utc": dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
        "command": " ".join(
            [Path(sys.executable).name, "-m", "capsim_kernels.bench.run", *sys.argv[1:]]
        ),
        "timing": (
            "CUDA graph replay, L2 flushed per replay, "
            "triton.testing.do_bench quantiles 0.2/0.5/0.8"
        ),
    }


class Cell:
    """Random inputs for one (model shape, state dtype, B, window) cell, on the GPU."""

    def __init__(self, shape: ModelShape, state_dtype: str, batch: int, tree, seed: int):
        import torch

        gen = torch.Generator(device="cuda").manual_seed(seed)
        dev = "cuda"
        b, w = batch, tree.num_nodes
        hv, hk, dk, dv = shape.num_v_heads, shape.num_k_heads, shape.dk, shape.dv
        sdt = getattr(torch, state_dtype)

        def randn(*s):
            return torch.randn(*s, device=dev, generator=gen)

        def rand(*s):
            return torch.rand(*s, device=dev, generator=gen)

        self.tree, self.batch, self.shape = tree, batch, shape
        self.q = randn(b, w, hk, dk).bfloat16()
        self.k = randn(b, w, hk, dk).bfloat16()
        self.v = randn(b, w, hv, dv).bfloat16()
        self.log_gate = torch.log(0.3 + 0.7 * rand(b, w, hv))
        self.beta = 0.05 + 0.9 * rand(b, w, hv)
        self.parent = torch.tensor(tree.parent, dtype=torch.int32, device=dev)
        self.pool = (0.1 * randn(b, hv, dv, dk)).to(sdt)
        self.slot = torch.randperm(b, device=dev, generator=gen).to(torch.int32)
        self.accepted = torch.randint(0, w, (b,), device=dev, generator=gen, dtype=torch.int32)
        self.h0 = (0.1 * randn(b, hv, dv, dk)).to(sdt)  # dense initial state for fla


def kernel_fn(
    name: str,
    c: Cell,
    sa_pool,
    sa_init,
    sa_slots,
    storeall_config: dict | None = None,
    policy=None,
) -> Callable[[], object]:
    """The timed closure of ``name`` on cell ``c`` (``policy``: TreeWY launch policy)."""
    import capsim_kernels as ck

    args = (c.q, c.k, c.v, c.log_gate, c.beta)
    if name == "storeall":
        chain = c.tree.is_chain
        return lambda: ck.storeall_verify(
            *args, sa_pool, sa_init, sa_slots, c.parent, is_chain=chain, config=storeall_config
        )
    if name == "treewy_verify":
        return lambda: ck.treewy_verify(*args, c.pool, c.slot, c.parent, policy=policy)
    if name == "treewy_commit":
        _, vt = ck.treewy_verify(*args, c.pool, c.slot, c.parent, policy=policy)
        return lambda: ck.treewy_commit(
            c.pool, c.slot, c.k, vt, c.log_gate, c.parent, c.accepted, policy=policy
        )

    if name == "treewy_verify_commit":

        def both():
            _, vt = ck.treewy_verify(*args, c.pool, c.slot, c.parent, policy=policy)
            ck.treewy_commit(
                c.pool, c.slot, c.k, vt, c.log_gate, c.parent, c.accepted, policy=policy
            )

        return both
    if name == "fused_chain":
        return lambda: ck.treewy_fused_verify_commit(
            *args, c.pool, c.slot, c.parent, c.accepted, policy=policy
        )
    if name == "deferred":
        ping = ck.PendingCommit.empty(c.k, c.v, c.parent)
        pong = ck.PendingCommit.empty(c.k, c.v, c.parent)
        _, vt = ck.treewy_verify(*args, c.pool, c.slot, c.parent, policy=policy)
        ping.vt.copy_(vt)
        ping.k.copy_(c.k)
        ping.log_gate.copy_(c.log_gate)
        ping.accepted.copy_(c.accepted)
        return lambda: ck.treewy_deferred_verify(
            *args, c.pool, c.slot, c.parent, ping, pong, policy=policy
        )
    if name == "fla_fused_recurrent":
        from fla.ops.gated_delta_rule import fused_recurrent_gated_delta_rule

        return lambda: fused_recurrent_gated_delta_rule(
            c.q, c.k, c.v, g=c.log_gate, beta=c.beta, initial_state=c.h0,
            output_final_state=True, use_qk_l2norm_in_kernel=True, state_v_first=True,
        )  # fmt: skip
    if name == "fla_chunk":
        from fla.ops.gated_delta_rule import chunk_gated_delta_rule

        return lambda: chunk_gated_delta_rule(
            c.q, c.k, c.v, c.log_gate, c.beta, initial_state=c.h0,
            output_final_state=True, use_qk_l2norm_in_kernel=True, state_v_first=True,
        )  # fmt: skip
    raise ValueError(f"unknown kernel {name!r}")


def _rel(ref, out) -> float:
    ref, out = ref.double(), out.double()
    if not bool(out.isfinite().all()):
        return float("inf")
    return float((out - ref).norm() / ref.norm().clamp_min(1e-300))


def run_checks(
    batch: int = 2, shapes=MODEL_SHAPES, state_dtypes=STATE_DTYPES, windows=WINDOWS, policy=None
) -> list[dict]:
    """Every kernel at the real head shapes against the float64 recurrence (on the GPU)."""
    import capsim_kernels as ck
    import torch
    from capsim_kernels.gdn_verify.reference import l2norm

    out = []
    for shape in shapes:
        for sd in state_dtypes:
            for tree in windows:
                c = Cell(shape, sd, batch, tree, seed=1234)
                c2 = Cell(shape, sd, batch, tree, seed=4321)
                b, w = batch, tree.num_nodes
                s0 = c.pool[c.slot.long()].clone()
                args = (c.q, c.k, c.v, c.log_gate, c.beta)
                o_ref, st_ref = ck.recurrence_reference(*args, s0.double(), tree.parent)
                # pseudo-values from the recurrence: vt_t = b_t (v_t - a_t S_p k_t)
                kn = l2norm(c.k.double()).repeat_interleave(
                    shape.num_v_heads // shape.num_k_heads, 2
                )
                s_par = torch.stack(
                    [s0.double() if p < 0 else st_ref[:, p] for p in tree.parent], dim=1
                )
                a = torch.exp(c.log_gate.double())
                vt_ref = c.beta.double()[..., None] * (
                    c.v.double() - a[..., None] * torch.einsum("bthvk,bthk->bthv", s_par, kn)
                )
                s_acc = st_ref[torch.arange(b), c.accepted.long()]
                res = {"model_shape": shape.name, "state_dtype": sd, "tree": tree.label, "T": w}
                # store-all
                sa_pool = torch.empty(
                    (b * (w + 1), *c.pool.shape[1:]), dtype=c.pool.dtype, device="cuda"
                )
                sa_pool[:b] = s0
                sa_init = torch.arange(b, dtype=torch.int32, device="cuda")
                sa_slots = (b + torch.arange(b * w, dtype=torch.int32, device="cuda")).view(b, w)
                sa_pool[b:] = float("nan")
                o = ck.storeall_verify(
                    *args, sa_pool, sa_init, sa_slots, c.parent, is_chain=tree.is_chain
                )
                res["storeall_o"] = _rel(o_ref, o)
                res["storeall_states"] = _rel(st_ref, sa_pool[sa_slots.long()])
                # verify + commit
                pool = c.pool.clone()
                o, vt = ck.treewy_verify(*args, pool, c.slot, c.parent, policy=policy)
                res["treewy_o"] = _rel(o_ref, o)
                res["treewy_vt"] = _rel(vt_ref, vt)
                ck.treewy_commit(
                    pool, c.slot, c.k, vt, c.log_gate, c.parent, c.accepted, policy=policy
                )
                res["treewy_commit_state"] = _rel(s_acc, pool[c.slot.long()])
                # fused
                pool = c.pool.clone()
                o = ck.treewy_fused_verify_commit(
                    *args, pool, c.slot, c.parent, c.accepted, policy=policy
                )
                res["fused_o"] = _rel(o_ref, o)
                res["fused_state"] = _rel(s_acc, pool[c.slot.long()])
                # deferred: window 1's accepted path applied inside window 2's verify
                pool = c.pool.clone()
                ping = ck.PendingCommit(
                    k=c.k, vt=vt, log_gate=c.log_gate, parent=c.parent, accepted=c.accepted
                )
                pong = ck.PendingCommit.empty(c.k, c.v, c.parent)
                o2 = ck.treewy_deferred_verify(
                    c2.q,
                    c2.k,
                    c2.v,
                    c2.log_gate,
                    c2.beta,
                    pool,
                    c.slot,
                    c.parent,
                    ping,
                    pong,
                    policy=policy,
                )
                o2_ref, _ = ck.recurrence_reference(
                    c2.q,
                    c2.k,
                    c2.v,
                    c2.log_gate,
                    c2.beta,
                    pool[c.slot.long()].double(),
                    tree.parent,
                )
                res["deferred_state"] = _rel(s_acc, pool[c.slot.long()])
                res["deferred_o"] = _rel(o2_ref, o2)
                if tree.is_chain:
                    try:
                        from fla.ops.gated_delta_rule import fused_recurrent_gated_delta_rule

                        o, ht = fused_recurrent_gated_delta_rule(
                            *args[:3], g=c.log_gate, beta=c.beta, initial_state=s0,
                            output_final_state=True, use_qk_l2norm_in_kernel=True,
                            state_v_first=True,
                        )  # fmt: skip
                        res["fla_recurrent_o"] = _rel(o_ref, o)
                        res["fla_recurrent_state"] = _rel(st_ref[:, -1], ht)
                        from fla.ops.gated_delta_rule import chunk_gated_delta_rule

                        o, ht = chunk_gated_delta_rule(
                            *args[:3], c.log_gate, c.beta, initial_state=s0,
                            output_final_state=True, use_qk_l2norm_in_kernel=True,
                            state_v_first=True,
                        )  # fmt: skip
                        res["fla_chunk_o"] = _rel(o_ref, o)
                        res["fla_chunk_state"] = _rel(st_ref[:, -1], ht)
                    except Exception as e:
                        res["fla_error"] = repr(e)[:200]
                worst = {
                    key: val
                    for key, val in res.items()
                    if isinstance(val, float) and not val <= check_tolerance(key, sd)
                }
                res["ok"] = not worst
                out.append(res)
                print(
                    f"check {shape.name:24s} {sd:8s} {tree.label:6s} W={w:2d} ok={res['ok']} "
                    + " ".join(f"{k}={v:.1e}" for k, v in res.items() if isinstance(v, float)),
                    flush=True,
                )
                del sa_pool
    return out


def run_window(shapes, batches, csv_path: Path, notes: list[str], policy) -> list[dict]:
    """Time ``treewy_prep_kernel`` alone (the verify's first launch; no state read).

    Every window with the default configuration; for BW = 64 (W = 40) also the round-2
    serial solve and 4 / 8 / 16 warps, so both are measured side by side in one run.
    """
    import torch
    from capsim_kernels.gdn_verify import treewy as tw
    from capsim_kernels.gdn_verify._jit import pad_window

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


def run_grid(
    copy_gbps: float,
    csv_path: Path,
    quick: bool,
    notes: list[str],
    budget_s: float,
    shapes=MODEL_SHAPES,
    checked: dict | None = None,
    storeall_config: dict | None = None,
    policy=None,
) -> list[dict]:
    """Measure the grid; stop (keeping what is measured) once time.monotonic() > budget_s.

    ``checked`` (checked_kernels): only kernels whose float64 checks passed for the
    (shape, state dtype, tree) are timed (None: no checks ran, all are timed).
    ``storeall_config``: state dtype -> store-all launch configuration (default: its own).
    ``policy``: the TreeWY launch policy (None: DEFAULT_POLICY).
    """
    import time

    import torch

    rows: list[dict] = []
    batches = (1, 256) if quick else BATCHES
    for shape in shapes:
        for sd in STATE_DTYPES:
            for batch in batches:
                for tree in WINDOWS:
                    if time.monotonic() > budget_s:
                        notes.append(
                            "time budget spent: grid stopped before "
                            f"{shape.name} {sd} B={batch} {tree.label}"
                        )
                        print(notes[-1], flush=True)
                        return rows
                    w = tree.num_nodes
                    c = Cell(shape, sd, batch, tree, seed=batch * 1000 + w)
                    sa_pool = torch.empty(
                        (batch * (w + 1), *c.pool.shape[1:]),
                        dtype=c.pool.dtype,
                        device="cuda",
                    )
                    sa_pool[:batch] = c.pool
                    sa_init = torch.arange(batch, dtype=torch.int32, device="cuda")
                    sa_slots = (
                        batch + torch.arange(batch * w, dtype=torch.int32, device="cuda")
                    ).view(batch, w)
                    for kernel in KERNELS:
                        if kernel in CHAIN_ONLY and not tree.is_chain:
                            continue
                        if checked is not None and kernel not in checked.get(
                            (shape.name, sd, tree.label), set()
                        ):
                            notes.append(f"not timed (float64 check failed or missing): "
                                         f"{kernel} {shape.name} {sd} {tree.label}")  # fmt: skip
                            print(notes[-1], flush=True)
                            continue
                        try:
                            cfg = (storeall_config or {}).get(sd)
                            fn = kernel_fn(
                                kernel, c, sa_pool, sa_init, sa_slots, cfg, policy=policy
                            )
                            p20, p50, p80 = time_graph_us(fn)
                        except Exception as e:
                            note = f"{kernel} {shape.name} {sd} B={batch} {tree.label} W={w}: {e!r}"
                            notes.append(note[:400])
                            print("FAILED", note[:400], flush=True)
                            continue
                        nbytes = bytes_moved(kernel, shape, sd, w, batch)
                        rows.append(
                            {
                                "kernel": kernel,
                                "model_shape": shape.name,
                                "state_dtype": sd,
                                "T": w,
                                "tree": tree.label,
                                "B": batch,
                                "Hv": shape.num_v_heads,
                                "Hk": shape.num_k_heads,
                                "dk": shape.dk,
                                "dv": shape.dv,
                                "p20_us": round(p20, 2),
                                "p50_us": round(p50, 2),
                                "p80_us": round(p80, 2),
                                "bytes_moved": nbytes,
                                "achieved_gbps": round(nbytes / (p50 * 1e-6) / 1e9, 1),
                                "floor_us": round(nbytes / (copy_gbps * 1e9) * 1e6, 2),
                                "copy_gbps": round(copy_gbps, 1),
                            }
                        )
                    del c, sa_pool
                    torch.cuda.empty_cache()
                    write_csv(csv_path, rows, COLUMNS)
                print(f"grid {shape.name} {sd} B={batch} done ({len(rows)} rows)", flush=True)
    return rows


def render_markdown(rows: list[dict]) -> str:
    """One table per (model shape, state dtype): p50 µs (and x floor) per kernel."""
    lines = []
    key = lambda r: (r["model_shape"], r["state_dtype"])  # noqa: E731
    groups: dict = {}
    for r in rows:
        groups.setdefault(key(r), []).append(r)
    for (ms, sd), rs in groups.items():
        lines += [f"### {ms}, state {sd}", ""]
        kernels = [k for k in KERNELS if any(r["kernel"] == k for r in rs)]
        lines.append("| T | tree | B | " + " | ".join(kernels) + " |")
        lines.append("|---|---|---|" + "---|" * len(kernels))
        cells: dict = {}
        for r in rs:
            cells[(int(r["T"]), r["tree"], int(r["B"]), r["kernel"])] = r
        for t, tree, b in sorted({(int(r["T"]), r["tree"], int(r["B"])) for r in rs}):
            vals = []
            for k in kernels:
                r = cells.get((t, tree, b, k))
                if r is None:
                    vals.append("")
                else:
                    ratio = float(r["p50_us"]) / float(r["floor_us"])
                    vals.append(f"{float(r['p50_us']):.1f} ({ratio:.2f}x)")
            lines.append(f"| {t} | {tree} | {b} | " + " | ".join(vals) + " |")
        lines.append("")
    return "\n".join(lines)


def summarize_targets(rows: list[dict]) -> str:
    """The issue's targets (35B TP1 shape) from measured rows, as text."""
    ms = "qwen3.5-35b-a3b-tp1"
    idx = {
        (r["kernel"], r["state_dtype"], int(r["T"]), r["tree"], int(r["B"])): r
        for r in rows
        if r["model_shape"] == ms
    }
    out = ["targets (35B TP1 shape; p50 us):"]

    def p50(kernel, sd, t, tree, b):
        r = idx.get((kernel, sd, t, tree, b))
        return None if r is None else (float(r["p50_us"]), float(r["floor_us"]))

    for sd in STATE_DTYPES:
        for t, tree in ((4, "chain"), (15, "chain"), (15, "2,2,2"), (40, "chain"), (40, "3,3,3")):
            for b in (1, 256):
                sa = p50("storeall", sd, t, tree, b)
                tvc = p50("treewy_verify_commit", sd, t, tree, b)
                de = p50("deferred", sd, t, tree, b)
                if sa is None or tvc is None:
                    continue
                line = (
                    f"  {sd:8s} T={t:2d} {tree:6s} B={b:3d}: storeall {sa[0]:8.1f}  "
                    f"verify+commit {tvc[0]:8.1f} ({tvc[0] / tvc[1]:.2f}x floor, "
                    f"{sa[0] / tvc[0]:.2f}x faster)"
                )
                if de is not None:
                    line += (
                        f"  deferred {de[0]:8.1f} ({de[0] / de[1]:.2f}x floor, "
                        f"{sa[0] / de[0]:.2f}x faster)"
                    )
                out.append(line)
    return "\n".join(out)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, help="directory for gdn_verify.csv and meta.json")
    parser.add_argument("--commit", default="unknown", help="git commit of the measured code")
    parser.add_argument("--quick", action="store_true", help="B in {1, 256} only")
    parser.add_argument("--no-checks", action="store_true", help="skip the correctness checks")
    parser.add_argument(
        "--budget-s", type=float, default=1e9, help="stop the grid this long after the start"
    )
    parser.add_argument("--render", type=Path, help="print the markdown table of a CSV and exit")
    parser.add_argument(
        "--shapes", nargs="+", choices=[m.name for m in MODEL_SHAPES], help="subset of shapes"
    )
    parser.add_argument(
        "--window", action="store_true", help="also time the window kernel alone (window.csv)"
    )
    parser.add_argument(
        "--two-launch",
        action="store_true",
        help="every window on the two-launch path of rounds 2-3 (no single-launch kernel)",
    )
    parser.add_argument(
        "--sweep",
        action="store_true",
        help="time the round-4 kernel configurations first (sweep.csv) and use the fastest",
    )
    parser.add_argument(
        "--storeall-config",
        type=json.loads,
        default=None,
        help='JSON {state dtype: {"block_v", "num_warps", "num_stages"}} for store-all '
        "(e.g. side_by_side's sweep winner)",
    )
    args = parser.parse_args(argv)
    if args.render is not None:
        with open(args.render) as f:
            print(render_markdown(list(csv.DictReader(f))))
        return 0
    if args.out is None:
        parser.error("--out is required unless --render is given")
    import dataclasses
    import time

    import torch
    from capsim_kernels.gdn_verify.policy import DEFAULT_POLICY

    deadline_s = time.monotonic() + args.budget_s
    policy = DEFAULT_POLICY
    if args.two_launch:
        policy = dataclasses.replace(policy, single_launch=False)
    if not torch.cuda.is_available():
        print("no CUDA device: nothing to measure", file=sys.stderr)
        return 2
    args.out.mkdir(parents=True, exist_ok=True)
    meta = collect_meta(args.commit)
    print(json.dumps(meta), flush=True)
    notes: list[str] = []
    copy_gbps = measure_copy_gbps()
    meta["copy_gbps"] = round(copy_gbps, 1)
    print(f"copy bandwidth {copy_gbps:.1f} GB/s (read + write)", flush=True)
    shapes = tuple(m for m in MODEL_SHAPES if args.shapes is None or m.name in args.shapes)
    try:
        checks = [] if args.no_checks else run_checks(shapes=shapes, policy=policy)
    except Exception as e:
        checks = [{"ok": False, "error": repr(e)[:400]}]
        print("CHECKS FAILED", repr(e)[:400], flush=True)
    meta["checks"] = checks
    meta["checks_ok"] = all(c["ok"] for c in checks)
    meta["check_tolerances"] = CHECK_TOL
    atomic_write(args.out / "meta.json", json.dumps(meta, indent=1))
    if args.window:
        batches = (1, 256) if args.quick else BATCHES
        try:
            wrows = run_window(shapes, batches, args.out / "window.csv", notes, policy)
            meta["window_rows"] = len(wrows)
            meta["window_choice"], chosen = pick_window_config(wrows, policy)
            if meta["window_choice"] is not None and not args.no_checks:
                # the chosen configuration against float64 before the grid uses it
                w40 = [t for t in WINDOWS if t.num_nodes == 40]
                rechecks = run_checks(shapes=shapes, windows=w40, policy=chosen)
                meta["checks_window_choice"] = rechecks
                if not all(c["ok"] for c in rechecks):
                    chosen = policy
                    notes.append("window choice failed its checks: defaults kept")
                    print(notes[-1], flush=True)
            policy = chosen
        except Exception as e:  # a diagnostic: never lose the grid over it
            notes.append(f"window timing failed: {e!r}"[:400])
            print("WINDOW FAILED", repr(e)[:400], flush=True)
        atomic_write(args.out / "meta.json", json.dumps(meta, indent=1))
    if args.sweep:
        try:
            choice, chosen = run_sweep(shapes[0], args.out / "sweep.csv", notes, policy)
            meta["sweep_choice"] = choice
            if not args.no_checks:
                rechecks = run_checks(shapes=shapes[:1], policy=chosen)
                meta["checks_sweep_choice"] = rechecks
                if not all(c["ok"] for c in rechecks):
                    chosen = policy
                    notes.append("sweep choice failed its checks: defaults kept")
                    print(notes[-1], flush=True)
            policy = chosen
        except Exception as e:  # a diagnostic: never lose the grid over it
            notes.append(f"sweep failed: {e!r}"[:400])
            print("SWEEP FAILED", repr(e)[:400], flush=True)
        atomic_write(args.out / "meta.json", json.dumps(meta, indent=1))
    meta["storeall_config"] = args.storeall_config
    meta["launch_policy"] = policy.as_dict()
    rows = run_grid(
        copy_gbps, args.out / "gdn_verify.csv", args.quick, notes, deadline_s, shapes=shapes,
        checked=None if args.no_checks else checked_kernels(checks),
        storeall_config=args.storeall_config, policy=policy,
    )  # fmt: skip
    meta["notes"] = notes
    meta["num_rows"] = len(rows)
    atomic_write(args.out / "meta.json", json.dumps(meta, indent=1))
    print(render_markdown([{k: str(v) for k, v in r.items()} for r in rows]))
    print(summarize_targets(rows))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
