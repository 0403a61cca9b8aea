"""Host-side checks and the split launch shared by the TreeWY stages (no kernels here).

``check_inputs`` validates shapes and dtypes, ``check_parent`` the DFS-preorder parent
array (on the host, before any launch; skipped under CUDA-graph capture), and
``launch_split`` launches ``kernel[(num_v_tiles, B * Hv)]`` in pieces of at most
65,535 programs along axis 1. ``pending_operands`` picks the pending-path operands of a
launch (the pending window's, or stand-ins the kernel never reads).
"""

from __future__ import annotations

import torch

from ._jit import grid_chunks, pad_window
from .tree import validate_parent

__all__ = ["check_inputs", "check_parent", "launch_split", "pending_operands"]


def check_inputs(q, k, v, log_gate, beta, state_pool, parent) -> tuple[int, int, int, int, int]:
    """Validate shapes and dtypes; return (B, W, Hk, Hv, dk, dv)-style dims (B, W, Hk, Hv, dv)."""
    if q.dim() != 4 or k.shape != q.shape:
        raise ValueError(f"q and k must be [B, W, Hk, dk] and equal, got {q.shape}, {k.shape}")
    bsz, w, hk, dk = q.shape
    if v.dim() != 4 or v.shape[:2] != (bsz, w):
        raise ValueError(f"v must be [B={bsz}, W={w}, Hv, dv], got {tuple(v.shape)}")
    hv, dv = v.shape[2], v.shape[3]
    if hv % hk != 0:
        raise ValueError(f"Hv ({hv}) must be a multiple of Hk ({hk})")
    for name, t in (("log_gate", log_gate), ("beta", beta)):
        if t.shape != (bsz, w, hv):
            raise ValueError(f"{name} must be [B, W, Hv] = {(bsz, w, hv)}, got {tuple(t.shape)}")
        if t.dtype != torch.float32:
            raise ValueError(f"{name} must be float32, got {t.dtype}")
    if state_pool.dim() != 4 or tuple(state_pool.shape[1:]) != (hv, dv, dk):
        raise ValueError(
            f"state_pool must be [num_slots, Hv, dv, dk] = [*, {hv}, {dv}, {dk}], "
            f"got {tuple(state_pool.shape)}"
        )
    if state_pool.dtype not in (torch.float32, torch.bfloat16):
        raise ValueError(f"state_pool dtype must be float32 or bfloat16, got {state_pool.dtype}")
    check_parent(parent, w)
    for name, t in (("q", q), ("k", k), ("v", v), ("state_pool", state_pool)):
        if not t.is_contiguous():
            raise ValueError(f"{name} must be contiguous")
    return bsz, w, hk, hv, dv


def check_parent(parent: torch.Tensor, num_nodes: int) -> None:
    """parent must be an int32 [W] DFS-preorder tree (tree.validate_parent: no cycles, no
    parent >= its index, none out of range), checked on the host before any launch.
    Under CUDA-graph capture the values cannot be read (the check is skipped; the
    kernels' parent walks stop after W steps whatever the values)."""
    if parent.shape != (num_nodes,) or parent.dtype != torch.int32:
        raise ValueError(
            f"parent must be int32 [W={num_nodes}], got {parent.dtype} {tuple(parent.shape)}"
        )
    if parent.is_cuda and torch.cuda.is_current_stream_capturing():
        return
    try:
        validate_parent(parent.tolist())
    except ValueError as e:
        raise ValueError(f"parent: {e}") from None


def pending_operands(pending: tuple | None, stand_ins: tuple, w: int, bwp: int) -> tuple:
    """(pk, pvt, pg, pparent, paccepted, WP, BWP) of a launch: ``pending``'s five tensors
    and its padded width, or (pending None) ``stand_ins`` (five tensors the kernel does not
    read with PENDING off), WP = ``w`` and BWP = ``bwp``."""
    if pending is not None:
        pk, pvt, pg, pparent, paccepted = pending
        wp = pk.shape[1]
        bwp, _ = pad_window(wp)
    else:
        pk, pvt, pg, pparent, paccepted = stand_ins
        wp = w
    return pk, pvt, pg, pparent, paccepted, wp, bwp


def launch_split(kernel, num_v_tiles: int, num_heads_total: int, *args, **kwargs) -> None:
    """``kernel[(num_v_tiles, B * Hv)]``, split along axis 1 into pieces of at most
    MAX_GRID_Y programs (each told its first head by ``BH0``)."""
    for bh0, count in grid_chunks(num_heads_total):
        kernel[(num_v_tiles, count)](*args, BH0=bh0, **kwargs)
