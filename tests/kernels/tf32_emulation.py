"""Triton's interpreter multiplies every fp32 ``tl.dot`` exactly, whatever its
``input_precision``: a kernel that runs in tf32 on a GPU looks fp32-accurate on the CPU.
``emulate_tf32`` makes the interpreter round as the tensor cores do, so the accuracy
contract (kernels/gdn_verify/_jit.py, DotPrecision) can be tested without a GPU:

- "tf32": both fp32 operands rounded to 10 mantissa bits, fp32 sums;
- "tf32x3": Triton's split, big = tf32(x), small = tf32(x - big),
  a_big b_small + a_small b_big + a_big b_big;
- "ieee" and products of non-fp32 operands: unchanged.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

import numpy as np


def tf32(x: np.ndarray) -> np.ndarray:
    """Round fp32 to tf32 (10 mantissa bits), to nearest even; Inf/NaN kept."""
    bits = np.asarray(x, dtype=np.float32).view(np.uint32)
    special = (bits & np.uint32(0x7F800000)) == np.uint32(0x7F800000)
    bias = ((bits >> np.uint32(13)) & np.uint32(1)) + np.uint32(0x00000FFF)
    return np.where(special, bits, (bits + bias) & np.uint32(0xFFFFE000)).view(np.float32)


@contextmanager
def emulate_tf32() -> Iterator[None]:
    import triton.runtime.interpreter as interp

    orig = interp.InterpreterBuilder.create_dot

    def create_dot(self, a, b, d, input_precision, max_num_imprecise_acc):
        mode = getattr(input_precision, "name", str(input_precision)).upper()
        if str(a.dtype) != "fp32" or str(b.dtype) != "fp32" or mode not in ("TF32", "TF32X3"):
            return orig(self, a, b, d, input_precision, max_num_imprecise_acc)
        x, y = a.data.astype(np.float32), b.data.astype(np.float32)
        if mode == "TF32":
            out = np.matmul(tf32(x), tf32(y), dtype=np.float32)
        else:
            xb, yb = tf32(x), tf32(y)
            xs, ys = tf32(x - xb), tf32(y - yb)
            out = np.matmul(xb, ys, dtype=np.float32) + np.matmul(xs, yb, dtype=np.float32)
            out = out + np.matmul(xb, yb, dtype=np.float32)
        return interp.TensorHandle((out + d.data).astype(d.data.dtype), d.dtype.scalar)

    interp.InterpreterBuilder.create_dot = create_dot
    try:
        yield
    finally:
        interp.InterpreterBuilder.create_dot = orig
