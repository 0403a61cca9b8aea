"""Compile the verify kernels for sm_90 on any machine (no GPU) and print their resources.

    python -m capsim_kernels.bench.resources

Registers, stack (spill) bytes and shared memory per program, read with the cuobjdump
bundled in Triton's package. Costs no device time: use it before a GPU run to check
occupancy (65536 registers and 228 KB of shared memory per H200 multiprocessor).
"""

from __future__ import annotations

import os
import subprocess
import tempfile

PTRS = ("q", "k", "v", "g", "beta", "state", "state_slot", "parent", "o", "vt", "accepted")
PTRS += ("pk", "pvt", "pg", "pparent", "paccepted", "k_out", "g_out")
BF16_PTRS = {"q", "k", "v", "o", "pk", "k_out"}
INT_PTRS = {"state_slot", "parent", "accepted", "pparent", "paccepted"}


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


def window_config(
    w: int,
    state: str,
    *,
    commit: bool = False,
    pending: bool = False,
    block_v: int | None = None,
    small_prec: str | None = None,
):
    from ..gdn_verify._jit import pad_window
    from ..gdn_verify.treewy import BIG_DOT_PRECISION, SMALL_DOT_PRECISION, treewy_window_kernel

    bw, log2_bw = pad_window(w)
    sig = {p: "*bf16" if p in BF16_PTRS else "*i32" if p in INT_PTRS else "*fp32" for p in PTRS}
    sig["state"] = "*fp32" if state == "float32" else "*bf16"
    sig["scale"] = "fp32"
    consts = {
        "H": 16, "HV": 32, "W": w, "K": 128, "V": 128, "BW": bw, "LOG2_BW": log2_bw, "BK": 128,
        "BV": block_v or (64 if bw <= 32 else 32), "WP": w, "BWP": bw, "LOG2_BWP": log2_bw,
        "STORE_VT": not commit, "COMMIT": commit, "PENDING": pending,
        "BIG_PREC": BIG_DOT_PRECISION, "SMALL_PREC": small_prec or SMALL_DOT_PRECISION,
    }  # fmt: skip
    return treewy_window_kernel, sig, consts, 4 if bw <= 16 else 8


def main() -> None:
    for w in (4, 15, 40):
        for name, flags in (
            ("verify", {}),
            ("fused", {"commit": True}),
            ("deferred", {"pending": True}),
        ):
            fn, sig, consts, nw = window_config(w, "float32", **flags)
            print(f"{name:9s} W={w:2d} fp32 state: {_report(fn, sig, consts, nw)}", flush=True)


if __name__ == "__main__":
    main()
