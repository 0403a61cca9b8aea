"""Compile the verify kernels for sm_90 on any machine (no GPU) and print their resources.

    python -m capsim_kernels.bench.gdn.resources [float32|bfloat16] [fp32|tf32]  # state, math

Registers, stack (spill) bytes and shared memory per program, read with the cuobjdump
bundled in Triton's package. Costs no device time: use it before a GPU run to check
occupancy (65536 registers and 228 KB of shared memory per H200 multiprocessor).
"""

from __future__ import annotations

import os
import subprocess
import tempfile

BF16_PTRS = {"q", "k", "v", "o", "pk", "k_out"}
INT_PTRS = {"state_slot", "parent", "accepted", "pparent", "paccepted"}


def _signature(fn, state: str) -> tuple[dict, list[str]]:
    """Pointer and scalar arguments of ``fn`` with their Triton types; constexpr names."""
    sig, consts = {}, []
    for p in fn.params:
        if p.is_constexpr:
            consts.append(p.name)
        elif p.name == "scale":
            sig[p.name] = "fp32"
        elif p.name == "BH0":
            sig[p.name] = "i32"
        elif p.name == "state":
            sig[p.name] = "*fp32" if state == "float32" else "*bf16"
        else:
            sig[p.name] = (
                "*bf16" if p.name in BF16_PTRS else "*i32" if p.name in INT_PTRS else "*fp32"
            )
    return sig, consts


def _report(fn, signature: dict, constexprs: dict, num_warps: int) -> dict:
    import triton
    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource

    sig = dict(signature) | dict.fromkeys(constexprs, "constexpr")
    src = ASTSource(fn=fn, signature=sig, constexprs=constexprs)
    kernel = triton.compile(src, target=GPUTarget("cuda", 90, 32), options={"num_warps": num_warps})
    cuobjdump = os.path.join(os.path.dirname(triton.__file__), "backends/nvidia/bin/cuobjdump")
    with tempfile.NamedTemporaryFile(suffix=".cubin") as f:
        f.write(kernel.asm["cubin"])
        f.flush()
        text = subprocess.run(
            [cuobjdump, "-res-usage", f.name], capture_output=True, text=True, check=True
        ).stdout
    line = next(x for x in text.splitlines() if "REG:" in x)
    fields = dict(item.split(":", 1) for item in line.split() if ":" in item)
    return {
        "regs": int(fields["REG"]),
        "stack_bytes": int(fields["STACK"]),
        "shared_bytes": kernel.metadata.shared,
        "num_warps": num_warps,
    }


def kernel_configs(w: int, state: str, block_v: int | None = None, state_math=None):
    """(name, kernel, signature, constexprs, num_warps) as ``launch_window`` and
    ``treewy_commit`` launch them for window w at the 35B TP1 head shape, B = 256."""
    import torch

    from ...gdn_verify import treewy as tw
    from ...gdn_verify import treewy_small as ts
    from ...gdn_verify._jit import dot_precision, pad_window
    from ...gdn_verify.policy import DEFAULT_POLICY as pol

    prec = dot_precision(getattr(torch, state), torch.bfloat16, state_math, "cuda")

    bw, log2_bw = pad_window(w)
    heads = {"H": 16, "HV": 32, "W": w, "K": 128, "BW": bw, "BK": 128}
    out = []
    sig, _ = _signature(tw.treewy_prep_kernel, state)
    consts = heads | {
        "LOG2_BW": log2_bw, "BKC": tw.PREP_BLOCK_K, "PREC": prec.gram,
        "BLOCKED": pol.prep_blocked, "NATIVE": True, "WP": w, "BWP": bw, "PENDING": False,
        "GRAM": False,
    }  # fmt: skip
    out.append(("prep", tw.treewy_prep_kernel, sig, consts, pol.prep_warps(bw)))
    out.append(("prep+pend", tw.treewy_prep_kernel, sig, consts | {"PENDING": True},
                pol.prep_warps(bw)))  # fmt: skip
    out.append(("prep+gram", tw.treewy_prep_kernel, sig,
                consts | {"PENDING": True, "GRAM": True}, pol.prep_warps(bw)))  # fmt: skip
    sig, _ = _signature(tw.treewy_stream_kernel, state)
    for name, flags in (
        ("verify", {"STORE_VT": True, "COMMIT": False, "PENDING": False, "REPLAY": False}),
        ("fused", {"STORE_VT": False, "COMMIT": True, "PENDING": False, "REPLAY": False}),
        ("deferred", {"STORE_VT": True, "COMMIT": False, "PENDING": True, "REPLAY": False}),
    ):
        scfg = pol.stream_config(bw, "deferred" if flags["PENDING"] else "verify")
        bv = block_v or tw.pick_block_v(256 * 32, 128, widest=scfg["block_v"])
        consts = heads | flags | {
            "V": 128, "BV": bv, "WP": w, "BWP": bw, "BKC": scfg["bkc"],
            "STATE_PREC": prec.state, "SMALL_PREC": prec.small, "NATIVE": True,
        }  # fmt: skip
        out.append((name, tw.treewy_stream_kernel, sig, consts, scfg["num_warps"]))
    sig, _ = _signature(tw.treewy_commit_kernel, state)

    cfg = pol.commit_config(bw, getattr(torch, state))
    bv = block_v or tw.pick_block_v(256 * 32, 128, widest=cfg["block_v"])
    consts = heads | {"V": 128, "BV": bv, "BKC": cfg["bkc"], "PREC": prec.state, "NATIVE": True}
    out.append(("commit", tw.treewy_commit_kernel, sig, consts, cfg["num_warps"]))
    if w <= ts.KERNEL_MAX_W:
        sig, _ = _signature(ts.treewy_small_kernel, state)
        half = 8 if w <= 8 else 16
        cfg = pol.small_config(half, "verify")
        bv = block_v or tw.pick_block_v(256 * 32, 128, widest=cfg["block_v"])
        for name, flags in (
            ("1l-verify", {"STORE_VT": True, "COMMIT": False, "PENDING": False, "REPLAY": False}),
            ("1l-fused", {"STORE_VT": False, "COMMIT": True, "PENDING": False, "REPLAY": False}),
            ("1l-defer", {"STORE_VT": True, "COMMIT": False, "PENDING": True, "REPLAY": False}),
        ):
            consts = {k: heads[k] for k in ("H", "HV", "W", "K", "BK")} | flags | {
                "V": 128, "HALF": half, "LOG2_HALF": half.bit_length() - 1, "P": 2 * half,
                "BV": bv, "WP": w, "BWP": bw, "STATE_PREC": prec.state,
                "SMALL_PREC": prec.small, "SOLVE_PREC": ts.SOLVE_PRECISION,
                "GRAM_PREC": prec.gram, "NATIVE_DOT": True, "EARLY_S": cfg["early_s"],
            }  # fmt: skip
            out.append((name, ts.treewy_small_kernel, sig, consts, cfg["num_warps"]))
    return out


def pipe_configs(w: int, state: str, pipe, deferred: bool, state_math=None):
    """(name, kernel, signature, constexprs, num_warps) of the pipelined stream
    (treewy_pipe.py) and, for deferred, the hoisted-pending kernel, at 35B TP1, B = 256."""
    import torch

    from ...gdn_verify._jit import dot_precision, pad_window, pick_block_v
    from ...gdn_verify.treewy_pending import PENDING_BLOCK_K, treewy_pending_kernel
    from ...gdn_verify.treewy_pipe import treewy_pipe_kernel

    prec = dot_precision(getattr(torch, state), torch.bfloat16, state_math, "cuda")
    bw, _ = pad_window(w)
    bv = pick_block_v(256 * 32, 128, widest=pipe.block_v)
    sig, _ = _signature(treewy_pipe_kernel, state)
    sig["NUM_TILES"] = "i32"
    consts = {
        "H": 16, "HV": 32, "W": w, "K": 128, "V": 128, "BW": bw, "BK": 128,
        "BKC": min(128, pipe.bkc), "BV": bv, "NV": 128 // bv, "WP": w, "BWP": bw,
        "STORE_VT": True, "PENDING": deferred, "GRAM": deferred and pipe.pending_gram,
        "STATE_PREC": prec.state,
        "SMALL_PREC": prec.small, "NATIVE": True, "NUM_STAGES": pipe.stages,
        "PACK": pipe.pack_qk and not (deferred and pipe.pending_gram) and 2 * w <= bw,
        "TMA": pipe.tma, "SLOT_AHEAD": pipe.slot_ahead, "EARLY_ROWS": pipe.early_rows and 2 * w <= bw,
    }  # fmt: skip
    if pipe.tma:  # the state through a tensor descriptor of [BV, BKC] boxes
        sig["sdesc"] = f"tensordesc<{'fp32' if state == 'float32' else 'bf16'}[{bv}, {consts['BKC']}]>"
    out = [("pipe-defer" if deferred else "pipe-verify", treewy_pipe_kernel, sig, consts,
            pipe.num_warps)]  # fmt: skip
    if deferred:
        sig, _ = _signature(treewy_pending_kernel, state)
        consts = {"H": 16, "HV": 32, "W": w, "K": 128, "BW": bw, "BK": 128,
                  "BKC": PENDING_BLOCK_K, "WP": w, "BWP": bw, "GRAM": pipe.pending_gram,
                  "GRAM_PREC": prec.gram}  # fmt: skip
        out.append(("pending", treewy_pending_kernel, sig, consts, 1))
    return out


def main() -> None:
    import sys

    state = sys.argv[1] if len(sys.argv) > 1 else "float32"
    math = sys.argv[2] if len(sys.argv) > 2 else None
    for w in (4, 15, 40):
        for name, fn, sig, consts, nw in kernel_configs(w, state, state_math=math):
            print(
                f"{name:9s} W={w:2d} {state} state ({math or 'default'} math): "
                f"{_report(fn, sig, consts, nw)}",
                flush=True,
            )


if __name__ == "__main__":
    main()
