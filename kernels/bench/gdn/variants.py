"""kcode's round-7 launch variants of the TreeWY kernels, timed next to the defaults, and
the pick of the fastest variant that passes its float64 check per (shape, T, B).

    python -m capsim_kernels.bench.gdn.variants --results DIR [--out best.csv]

Each variant is a ``LaunchPolicy`` (gdn_verify/policy.py) under a short name; its
registry entries are named ``<family>@<variant>`` (family: treewy_verify,
treewy_verify_commit, deferred), built by the family's own registry builder with that
policy, so the float64 check over all requests, the bytes moved (the family's) and the
row schema are the same as the default's. ``best_rows`` groups timed rows by (shape,
state dtype, tree, T, B, family), keeps those whose ``check_ok`` and ``contract_ok`` are
"True", and takes the lowest p50; the default (no ``@``) is always a candidate, so the
pick is never worse than the round-6 kernel on the same run.

Why these variants (sm_90 compiles on the CPU, fp32 state, T = 4, 35B heads; registers /
shared bytes per program from cuobjdump, Triton 3.9 here, 3.6 on the H200): the pipelined
persistent stream (treewy_pipe.py) keeps one state tile per program in flight in shared
memory (cp.async) while the previous tile computes; key chunks of 32 cut the registers
(BKC 128: 252, 64: 168, 32: 132 at 3 stages; 98 at 2 stages), so ~7 two-warp programs
reside per SM: ~112 KB of state in flight per SM vs ~24 KB on average for the round-6
kernel (whose tile sits in registers, in flight only during its own load phase).
"""

from __future__ import annotations

import argparse
import csv
from pathlib import Path

from ...gdn_verify.policy import LaunchPolicy, PipeConfig
from .registry import Kernel, build_deferred, build_verify, build_verify_commit
from .shapes import bytes_moved

__all__ = ["FAMILIES", "VARIANTS", "VARIANT_KERNELS", "best_rows", "family", "variant_cells"]

# name -> (verify pipe, deferred pipe); None leaves that stream on the round-6 kernel (and,
# for verify, adds no verify / verify+commit rows: they would time the default again).
# Registers / shared bytes per program, sm_90 compile here (Triton 3.9), T = 4, fp32 state:
# programs per SM from the H200's 64 K registers and 228 KB shared memory.
_PIPES: dict[str, tuple[PipeConfig | None, PipeConfig | None]] = {
    # verify 2 stages, 32-row dv tile, 2 warps, 32-key chunks: 98 regs, 29.8 KB -> 7 / SM
    # (128 regs at T = 15); deferred 16-row tile, 16-key chunks: 184 regs, 30 KB -> 5 / SM
    "pipe_a": (PipeConfig(2, 32, 2, 32), PipeConfig(2, 16, 2, 16)),
    # verify 3 stages (the slot index one more tile ahead): 132 regs -> 7 / SM; deferred
    # 32-row tile, 4 warps: 191 regs, 41 KB -> 2 / SM
    "pipe_b": (PipeConfig(3, 32, 2, 32), PipeConfig(2, 32, 4, 16)),
    # verify 4 warps on the 32-row tile: 72 regs -> 7 / SM (28 warps for the math)
    "pipe_c": (PipeConfig(3, 32, 4, 32), None),
    # verify 64-row tile, 4 warps: 101 regs, 49 KB -> 4 / SM, 32 KB of state per program
    "pipe_d": (PipeConfig(2, 64, 4, 32), None),
    # session 3: the deferred stream with the pending coefficients hoisted out of the tile
    # loop (treewy_pending.py; pipe_a / pipe_b's deferred rows run it too now). sm_90
    # compile here (Triton 3.9), T = 4, fp32: (2, 64, 4, 32) 254 regs, 53 KB -> 2 / SM,
    # 32 KB of state per tile; (2, 32, 4, 32) 188 regs, 29 KB -> 2 / SM; capped at 168:
    # 128 bytes of spills, 3 / SM. Own kernel (e) vs inside stage 1 (f, g, h).
    "pipe_e": (None, PipeConfig(2, 64, 4, 32)),
    "pipe_f": (None, PipeConfig(2, 64, 4, 32, pending_in_stage1=True)),
    "pipe_g": (None, PipeConfig(2, 32, 4, 32, pending_in_stage1=True, maxnreg=168)),
    "pipe_h": (None, PipeConfig(2, 32, 4, 32, pending_in_stage1=True)),
    # verify on whole 128-row dv tiles, 8 warps: one tile per head (stage 1's scratch read
    # once, not per dv tile); 108 regs, 76 KB -> 2 / SM, 64 KB of state per tile (128 KB
    # in flight per SM vs pipe_d's ~96 KB). Not for deferred: 254 regs x 8 warps, 1 / SM
    "pipe_i": (PipeConfig(2, 128, 8, 32), None),
    # pipe_d with 3 stages (134 regs, 39 KB: 3 / SM)
    "pipe_j": (PipeConfig(3, 64, 4, 32), None),
    # pipe_f with the window products corrected by [W, WP] grams (K PK^T, Q PK^T) instead
    # of re-reading the updated tile: 255 regs + 56 bytes of spills, 45 KB -> 2 / SM
    "pipe_k": (None, PipeConfig(2, 64, 4, 32, pending_in_stage1=True, pending_gram=True)),
    # no software pipelining (1 stage): the deferred tile loop doubles its registers when
    # pipelined (sm_90 here: (1, 32, 4, 32) 135 regs, 8 KB -> 3 / SM; 2 stages 188); the
    # overlap then comes from the resident programs only, as in the round-6 kernel, but
    # with the coefficients hoisted and a persistent grid
    "pipe_l": (None, PipeConfig(1, 32, 4, 32, pending_in_stage1=True)),
    "pipe_m": (None, PipeConfig(1, 32, 2, 32, pending_in_stage1=True)),
    # verify with the window math in the tile loop (treewy_pipe_small.py, W <= 8; no stage
    # 1 launch, ~40 us of pipe_d's 215 at T = 4): (2, 64, 4, 32) 153 regs, 37 KB -> 3 / SM;
    # (2, 32, 2, 32) 158 regs, 21 KB -> 6 / SM (96 KB of state in flight per SM)
    "pipe_n": (PipeConfig(2, 64, 4, 32, fused_window=True), None),
    "pipe_o": (PipeConfig(2, 32, 2, 32, fused_window=True), None),
    # deferred the same way (hoisted pending kernel, then the one stream): (2, 32, 4, 32)
    # 255 regs + 8 bytes of spills, 26 KB -> 2 / SM; 1 stage: 191 regs, 7 KB -> 2 / SM
    "pipe_p": (None, PipeConfig(2, 32, 4, 32, fused_window=True)),
    "pipe_q": (None, PipeConfig(1, 32, 4, 32, fused_window=True)),
    # session 4 (#19: the deferred loop's live registers / bytes in flight; sm_90 compile
    # here, Triton 3.9, T = 4, fp32; `pack` = keys and queries in one operand, W <= 8).
    # pipe_r: verify pipe_d packed: 105 regs (pipe_d 130 here), 39 KB -> 4 / SM; deferred
    # 3 stages, 16-row tile, 2 warps, 16-key chunks, packed: 199 regs, 12.5 KB -> 5 / SM,
    # 10 warps and ~80 KB of state in flight per SM (pipe_f: 254 regs, 2 / SM, 8 warps, 64 KB)
    "pipe_r": (PipeConfig(2, 64, 4, 32, pack_qk=True),
               PipeConfig(3, 16, 2, 16, pending_in_stage1=True, pack_qk=True)),
    # pipe_f with 3 stages: 255 regs + 16 bytes of spills, 53.5 KB -> 2 / SM, 128 KB of
    # state in flight per SM (two tiles ahead per program)
    "pipe_s": (None, PipeConfig(3, 64, 4, 32, pending_in_stage1=True)),
    # 3 stages, 16-row tile, 4 warps, 16-key chunks, packed: 148 regs, 12.5 KB -> 3 / SM,
    # 12 warps per SM (the most warps of any spill-free deferred config), 48 KB in flight
    "pipe_t": (None, PipeConfig(3, 16, 4, 16, pending_in_stage1=True, pack_qk=True)),
    # session 5 (#19; sm_90 compiles here with Triton 3.6.0, the H200's version, T = 4, fp32;
    # kernels/gdn_verify/NOTES.md section 12). Triton 3.6 gave pipe_f / pipe_s's state tile
    # ONE shared buffer: the pool slot is loaded in the loop and the state load depends on
    # it (and the pending rows' loads on pscale), so the pipeliner put the state load one
    # stage before its use: the next tile's copy is issued only after this tile's data left
    # shared memory for registers (255 registers: the whole tile in registers). slot_ahead
    # carries the next tile's slot through the loop and reads every pending row (zeroed off
    # the path): every load at one level, the state load NUM_STAGES - 1 tiles ahead (two
    # buffers at 3 stages, checked in the TTGIR). tma: the state chunks loaded (deferred:
    # also stored) by the tensor-memory accelerator through a host tensor descriptor.
    # pipe_u: pipe_s + tma + slot_ahead: 163 regs (pipe_s 255), 99 KB -> 2 / SM, two tiles
    # (64 KB) in flight per program; pipe_w: 32-row tiles, 4 warps: 126 regs, 52 KB -> 4 / SM
    "pipe_u": (None, PipeConfig(3, 64, 4, 32, pending_in_stage1=True, tma=True, slot_ahead=True)),
    "pipe_w": (None, PipeConfig(3, 32, 4, 32, pending_in_stage1=True, tma=True, slot_ahead=True)),
    # pipe_v: verify pipe_r at 3 stages + tma + slot_ahead: 108 regs, 74 KB -> 3 / SM, two
    # tiles ahead (pipe_r: 96 regs, 39 KB, 4 / SM, one tile ahead). pipe_x: the split of the
    # two changes: verify pipe_v without tma (128 regs, 74 KB, 3 / SM); deferred pipe_s + tma
    # without slot_ahead (168 regs, 60 KB -> 3 / SM, one buffer as pipe_s)
    "pipe_v": (PipeConfig(3, 64, 4, 32, pack_qk=True, tma=True, slot_ahead=True), None),
    "pipe_x": (PipeConfig(3, 64, 4, 32, pack_qk=True, slot_ahead=True),
               PipeConfig(3, 64, 4, 32, pending_in_stage1=True, tma=True)),
    # session 6 (round 10; sm_90 compiles here with Triton 3.6.0, T = 4, fp32; NOTES.md
    # section 14; every state tile keeps ONE shared buffer, checked in the TTGIR).
    # pipe_y: verify pipe_r + tma (no slot_ahead, the one untested pair): 103 regs (pipe_r
    # 96), 39 KB -> 4 / SM (pipe_r 5: 96 registers x 4 warps is the 5-program line);
    # pipe_y96: pipe_y capped at 96 registers: 96, no spills -> 5 / SM, as pipe_r
    "pipe_y": (PipeConfig(2, 64, 4, 32, pack_qk=True, tma=True), None),
    "pipe_y96": (PipeConfig(2, 64, 4, 32, pack_qk=True, tma=True, maxnreg=96), None),
    # pipe_x's deferred (pipe_s + tma, 168 regs, 60 KB -> 3 / SM, 96 KB of state per SM):
    # pipe_z at 32-row tiles: 124 regs, 31 KB -> 4 / SM (64 KB); pipe_z2 at 2 stages: 137
    # regs, 60 KB -> 3 / SM (shared memory caps it at 3); pipe_zw2: 32-row tiles, 2 warps:
    # 168 regs, 31 KB -> 6 / SM (12 warps and 96 KB per SM as pipe_x, in 6 programs)
    "pipe_z": (None, PipeConfig(3, 32, 4, 32, pending_in_stage1=True, tma=True)),
    "pipe_z2": (None, PipeConfig(2, 64, 4, 32, pending_in_stage1=True, tma=True)),
    "pipe_zw2": (None, PipeConfig(3, 32, 2, 32, pending_in_stage1=True, tma=True)),
    # session 6 round 11 (NOTES.md section 16; same sm_90 compiles, Triton 3.6.0, fp32;
    # pipe_zw2 won round 10 with 6 programs / SM at pipe_x's 12 warps): pipe_zw1 at 16-row
    # tiles, 1 warp: 168 regs (T = 2: 158, T = 9: 168; pipe_zw2 at T = 9: 248 -> 4 / SM),
    # 14.7 KB -> 12 / SM; pipe_zw1s2 the same at 2 stages: 163 regs -> 12 / SM (round 10's
    # pipe_z2 lost 3% to pipe_x with one stage fewer: the stage control at 1 warp);
    # pipe_zw2s4 pipe_zw2 at 4 stages: 168 regs, 31.0 KB -> 6 / SM (one more tile of small
    # operands in flight at pipe_zw2's occupancy; shared unchanged, one state buffer)
    "pipe_zw1": (None, PipeConfig(3, 16, 1, 32, pending_in_stage1=True, tma=True)),
    "pipe_zw1s2": (None, PipeConfig(2, 16, 1, 32, pending_in_stage1=True, tma=True)),
    "pipe_zw2s4": (None, PipeConfig(4, 32, 2, 32, pending_in_stage1=True, tma=True)),
    # session 13 round 12 (NOTES.md section 18; sm_90 compiles here, Triton 3.6.0, fp32;
    # pipe_zw1's TTGIR: the window's key / query / pending-key chunk loads stay synchronous
    # after each state chunk's TMA wait). pipe_zw1p: pipe_zw1 + pack_qk (one key / query
    # operand where 2 W <= BW: 120 HMMA vs 168): 159 regs -> 12 / SM (T = 2: 128 -> 14;
    # T = 9 unpacked, pipe_zw1's kernel); pipe_zw1e: + early_rows (the next chunk's rows
    # loaded before this chunk's state wait, one load for keys and queries): 199 regs ->
    # 10 / SM (T = 2: 163 -> 12); both 14.3 KB of shared memory. pipe_re: verify pipe_r +
    # early_rows (pipe_r's k / q chunk loads are synchronous too): 128 regs, 38.1 KB -> 4 / SM
    # (pipe_r 96 -> 5; T = 2 128 vs 108 -> 4 as pipe_r; T = 9 unpacked, pipe_r's kernel)
    "pipe_zw1p": (None, PipeConfig(3, 16, 1, 32, pending_in_stage1=True, tma=True,
                                   pack_qk=True)),
    "pipe_zw1e": (None, PipeConfig(3, 16, 1, 32, pending_in_stage1=True, tma=True,
                                   pack_qk=True, early_rows=True)),
    "pipe_re": (PipeConfig(2, 64, 4, 32, pack_qk=True, early_rows=True), None),
}
VARIANTS: dict[str, LaunchPolicy] = {
    name: LaunchPolicy(pipe_verify=pv, pipe_deferred=pd) for name, (pv, pd) in _PIPES.items()
}
# the round-6 verify stream capped at 168 registers (6 two-warp programs per SM instead of
# 5; sm_90 compile here: 175-188 registers uncapped at T = 3..5, 8-48 bytes of spills
# capped). The suspected cause of round 6's T = 4 lead (302 vs 391-402 us at T = 3, 5):
# an occupancy cliff at 168 registers (65536 / (6 x 64) = 170).
_REG168 = {"block_v": 32, "num_warps": 2, "bkc": 128, "maxnreg": 168}
VARIANTS["reg168"] = (
    LaunchPolicy().with_entry("stream", (16, "verify"), _REG168)
    .with_entry("stream", (32, "verify"), _REG168)
)  # fmt: skip
_LABELS = {"reg168": "reg168: round-6 verify stream, maxnreg 168 (BW 16 / 32)"}
FAMILIES = ("treewy_verify", "treewy_verify_commit", "deferred")


def _label(name: str) -> str:
    if name in _LABELS:
        return _LABELS[name]
    pv, pd = _PIPES[name]
    parts = ([f"verify {pv.label()}"] if pv else []) + ([f"deferred {pd.label()}"] if pd else [])
    return f"{name}: " + "; ".join(parts)


_TITLES = {"treewy_verify": "TreeWY verify", "treewy_verify_commit": "TreeWY v+c",
           "deferred": "TreeWY deferred"}  # fmt: skip
_BUILDERS = {"treewy_verify": build_verify, "treewy_verify_commit": build_verify_commit,
             "deferred": build_deferred}  # fmt: skip


def _entry(fam: str, name: str, policy: LaunchPolicy) -> Kernel:
    """Registry entry ``<fam>@<name>``: the family's builder with this policy (verify
    commits no state: no state check of its own)."""
    cfg, build = _label(name), _BUILDERS[fam]
    return Kernel(
        f"{fam}@{name}", f"{_TITLES[fam]}, {name}",
        lambda c, x, p=policy, s=cfg, f=build: _with_config(f(c, x, p), s),
        bytes_fn=lambda s, d, w, b, t=None, f=fam: bytes_moved(f, s, d, w, b),
        state_check=fam != "treewy_verify",
    )  # fmt: skip


def _entries() -> tuple[Kernel, ...]:
    out = [Kernel("treewy_prep", "TreeWY stage 1 alone", build_prep, bytes_fn=_prep_bytes,
                  state_check=False)]  # fmt: skip
    for name, policy in VARIANTS.items():
        pv, pd = _PIPES.get(name, (True, None))  # reg168: a verify variant, no deferred
        fams = (("treewy_verify", "treewy_verify_commit") if pv is not None else ()) + (
            ("deferred",) if pd is not None else ())  # fmt: skip
        out += [_entry(f, name, policy) for f in fams]
    return tuple(out)


def _prep_bytes(shape, state_dtype: str, w: int, b: int, tree=None) -> int:
    """Stage 1 alone: q, k (bf16), gates and betas read; m1, pm [W, W] and ck, cq [W]
    (fp32) written per (request, value head)."""
    hv = shape.num_v_heads
    reads = 2 * b * w * shape.num_k_heads * shape.dk * 2 + 2 * b * w * hv * 4
    return reads + 2 * b * hv * (w * w + w) * 4


def build_prep(case, ctx: dict):
    """Stage 1 (the per-head window kernel) alone: a diagnostic of where the verify time
    goes (verify = stage 1 + the stream). Its outputs are checked through the verify rows
    of the same cell (same inputs); this row carries their o_err."""
    from ...gdn_verify import treewy as tw
    from ...gdn_verify._jit import dot_precision
    from .registry import Prepared, _treewy_math

    hk, hv = case.q.shape[2], case.v.shape[2]
    prec = dot_precision(case.pool.dtype, case.q.dtype, None, case.q.device.type)
    scale = case.q.shape[3] ** -0.5

    def fn():
        return tw.launch_prep(
            case.q, case.k, case.log_gate, case.beta, case.parent,
            scale=scale, num_heads=(hk, hv), gram_precision=prec.gram,
        )  # fmt: skip

    fn()
    check = {"err_max_req_head": float("nan"), "state_err": float("nan"),
             "o_err": float("nan")}  # fmt: skip
    return Prepared(fn, check, _treewy_math(case), "stage 1 alone (diagnostic)")


def _with_config(prep, config: str):
    from dataclasses import replace

    return replace(prep, config=config)


VARIANT_KERNELS: tuple[Kernel, ...] = _entries()


def family(kernel: str) -> str:
    """The registry family of a row's kernel name (``treewy_verify@pipe_a`` ->
    ``treewy_verify``)."""
    return kernel.split("@", 1)[0]


def variant_cells(dry: bool, only: str | None = None) -> list:
    """The cells that time the variants next to the defaults, most informative first:
    B = 256 at T = 4 for both shapes, then (35B) T = 5 and 9 (reg168's test), 3, 2,
    6, 7, 8, 15 and (2,2,2), then B = 64 at T = 4; every cell also times the default
    kernels of the three families. ``only`` (default: env R6_KC_KERNELS, a comma list of
    registry names): time only those kernels, to fit a short device budget."""
    import os

    from ...gdn_verify.tree import TreeSpec
    from .round6_cells import Cell, main_shapes

    names = tuple(FAMILIES) + tuple(k.name for k in VARIANT_KERNELS)
    only = os.environ.get("R6_KC_KERNELS", "") if only is None else only
    if only:
        keep = {n.strip() for n in only.split(",") if n.strip()}
        unknown = keep - set(names)
        if unknown:
            raise ValueError(f"R6_KC_KERNELS: unknown kernel(s) {sorted(unknown)}")
        names = tuple(n for n in names if n in keep)
    shapes = main_shapes(dry)
    if dry:
        return [Cell(shapes[0], "float32", TreeSpec.chain(4), 8, names, "gdn_kc")]
    b = 256
    cells = [Cell(s, "float32", TreeSpec.chain(4), b, names, "gdn_kc") for s in shapes]
    for t in (TreeSpec.chain(n) for n in (5, 9, 3, 2, 6, 7, 8, 15)):
        cells.append(Cell(shapes[0], "float32", t, b, names, "gdn_kc"))
    cells.append(Cell(shapes[0], "float32", TreeSpec((2, 2, 2)), b, names, "gdn_kc"))
    cells.append(Cell(shapes[0], "float32", TreeSpec.chain(4), 64, names, "gdn_kc"))
    return cells


# verify commits no state: its fp32 pseudo-values (vt_err, norm-wise vs float64) must
# also match, within VT_TOL or twice the default's own error on the same inputs
VT_TOL = 1e-6


def _passes(r: dict, default: dict | None) -> bool:
    if r["check_ok"] != "True" or r["contract_ok"] != "True":
        return False
    if family(r["kernel"]) != "treewy_verify":
        return True
    vt = float(r.get("vt_err") or "nan")
    ref = float(default.get("vt_err") or "nan") if default else float("nan")
    limit = max(VT_TOL, 2.0 * ref) if ref == ref else VT_TOL
    return vt <= limit  # nan fails


def best_rows(rows: list[dict]) -> list[dict]:
    """Per (shape, state dtype, tree, T, B, family): the fastest timed row that passed its
    float64 check and the per-request contract (verify: also its pseudo-values, _passes),
    with the default's p50 next to it."""
    groups: dict[tuple, list[dict]] = {}
    for r in rows:
        if r.get("p50_us") in (None, "") or family(r["kernel"]) not in FAMILIES:
            continue
        key = (r["model_shape"], r["state_dtype"], r["tree"], int(r["T"]), int(r["B"]),
               family(r["kernel"]))  # fmt: skip
        groups.setdefault(key, []).append(r)
    out = []
    for key in sorted(groups):
        cand = groups[key]
        default = next((r for r in cand if r["kernel"] == key[5]), None)
        ok = [r for r in cand if _passes(r, default)]
        if not ok:
            continue
        best = min(ok, key=lambda r: float(r["p50_us"]))
        out.append({
            "model_shape": key[0], "state_dtype": key[1], "tree": key[2], "T": key[3],
            "B": key[4], "family": key[5], "best_kernel": best["kernel"],
            "best_p50_us": best["p50_us"], "best_floor_ratio": best["floor_ratio"],
            "best_err_max_req_head": best["err_max_req_head"], "best_config": best["config"],
            "default_p50_us": default["p50_us"] if default else "",
            "speedup_vs_default": (round(float(default["p50_us"]) / float(best["p50_us"]), 3)
                                   if default else ""),
            "candidates": len(cand), "passed": len(ok),
        })  # fmt: skip
    return out


BEST_COLUMNS = ("model_shape", "state_dtype", "tree", "T", "B", "family", "best_kernel",
                "best_p50_us", "best_floor_ratio", "best_err_max_req_head", "best_config",
                "default_p50_us", "speedup_vs_default", "candidates", "passed")  # fmt: skip


def main(argv: list[str] | None = None) -> int:
    from ..timing import write_csv

    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--results", type=Path, required=True, help="folder of round6_gdn_*.csv")
    p.add_argument("--out", type=Path, default=None, help="write the picks as CSV here")
    args = p.parse_args(argv)
    rows = []
    for path in sorted(args.results.glob("round6_gdn_*.csv")):
        with path.open() as f:
            rows += list(csv.DictReader(f))
    best = best_rows(rows)
    for r in best:
        print(f"{r['model_shape']} {r['tree']} T={r['T']} B={r['B']} {r['family']}: "
              f"{r['best_kernel']} {r['best_p50_us']} us ({r['best_floor_ratio']}x floor, err "
              f"{r['best_err_max_req_head']}); default {r['default_p50_us']} us, "
              f"x{r['speedup_vs_default']}")  # fmt: skip
    if args.out is not None:
        write_csv(args.out, best, BEST_COLUMNS)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
