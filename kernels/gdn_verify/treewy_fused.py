"""Single-launch TreeWY variants: fused verify+commit and deferred commit.

Both reuse the per-head window kernel and the streaming kernel of treewy.py (the latter
with compile-time flags), take every
per-step value (slots, accepted nodes) as device tensors and never synchronise with the
host, so they can be captured in a CUDA graph.

- ``treewy_fused_verify_commit``: verify the window and rebuild the state of the node
  ``accepted[b]`` in the same launch: S_0 is read once and one state is written. The
  accepted node must be known when the kernel runs (the chain/MTP case once the accepted
  length is fixed, or a replayed window); it is the published TreeWY fused chain kernel,
  written here for any tree.
- ``treewy_deferred_verify``: the commit of the previous step is applied inside the
  next verify. The kernel reads S_c, applies the pending accepted path in registers,
  writes S_0 back once, and verifies the new window from it, handing this window's keys,
  gates and pseudo-values to the next step. After sampling, the engine writes the
  accepted node into ``pending_out.accepted`` (``-1`` = nothing to apply). S_c is read
  once and written once per step.

Bytes per (request, value head) on top of verify's (treewy.py): deferred also reads the
previous window's k, vt, gates (W*dk*2/group + W*dv*4 + W*4) and writes one state plus
this window's k and gates; fused writes one state and no vt.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from .policy import LaunchPolicy
from .treewy_stream import launch_window

__all__ = ["PendingCommit", "treewy_deferred_verify", "treewy_fused_verify_commit"]


@dataclass(frozen=True, slots=True)
class PendingCommit:
    """A window whose accepted path is not yet applied to the state pool.

    k [B, W, Hk, dk] (raw keys, q/k dtype), vt [B, W, Hv, dv] fp32, log_gate [B, W, Hv]
    fp32, parent [W] int32 and accepted [B] int32 (-1: nothing pending for that request).
    """

    k: torch.Tensor
    vt: torch.Tensor
    log_gate: torch.Tensor
    parent: torch.Tensor
    accepted: torch.Tensor

    def __post_init__(self) -> None:
        bsz, w = self.k.shape[:2]
        if self.vt.shape[:2] != (bsz, w) or self.vt.dtype != torch.float32:
            raise ValueError(f"vt must be float32 [B={bsz}, W={w}, Hv, dv], got {self.vt.shape}")
        if self.log_gate.shape != (bsz, w, self.vt.shape[2]):
            raise ValueError(f"log_gate must be [B, W, Hv], got {tuple(self.log_gate.shape)}")
        if self.parent.shape != (w,) or self.parent.dtype != torch.int32:
            raise ValueError(f"parent must be int32 [W={w}], got {self.parent.shape}")
        if self.accepted.shape != (bsz,) or self.accepted.dtype != torch.int32:
            raise ValueError(f"accepted must be int32 [B={bsz}], got {self.accepted.shape}")

    @classmethod
    def empty(
        cls, k_like: torch.Tensor, v_like: torch.Tensor, parent: torch.Tensor
    ) -> PendingCommit:
        """Buffers shaped like a window's k and v, with nothing pending (accepted = -1)."""
        bsz, w = k_like.shape[:2]
        return cls(
            k=torch.zeros_like(k_like),
            vt=torch.zeros(v_like.shape, dtype=torch.float32, device=v_like.device),
            log_gate=torch.zeros(bsz, w, v_like.shape[2], device=v_like.device),
            parent=parent.clone(),
            accepted=torch.full((bsz,), -1, dtype=torch.int32, device=v_like.device),
        )


def treewy_fused_verify_commit(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    log_gate: torch.Tensor,
    beta: torch.Tensor,
    state_pool: torch.Tensor,
    state_slot: torch.Tensor,
    parent: torch.Tensor,
    accepted: torch.Tensor,
    scale: float | None = None,
    *,
    out: torch.Tensor | None = None,
    state_math: str | None = None,
    policy: LaunchPolicy | None = None,
) -> torch.Tensor:
    """Outputs of the window; state_pool[state_slot[b]] becomes the state of accepted[b].
    ``state_math`` and ``policy`` as for ``treewy_verify``."""
    if accepted.shape != (q.shape[0],) or accepted.dtype != torch.int32:
        raise ValueError(f"accepted must be int32 [B={q.shape[0]}], got {accepted.shape}")
    o, _ = launch_window(
        q,
        k,
        v,
        log_gate,
        beta,
        state_pool,
        state_slot,
        parent,
        scale=scale,
        store_vt=False,
        accepted=accepted,
        out=out,
        state_math=state_math,
        policy=policy,
    )
    return o


def treewy_deferred_verify(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    log_gate: torch.Tensor,
    beta: torch.Tensor,
    state_pool: torch.Tensor,
    state_slot: torch.Tensor,
    parent: torch.Tensor,
    pending_in: PendingCommit,
    pending_out: PendingCommit,
    scale: float | None = None,
    *,
    out: torch.Tensor | None = None,
    state_math: str | None = None,
    policy: LaunchPolicy | None = None,
) -> torch.Tensor:
    """Apply ``pending_in`` to the pool, then verify this window; fill ``pending_out``.

    ``pending_out`` receives this window's k, vt and log gates; its ``accepted`` is left
    for the engine to set after sampling. The two must not share buffers.
    """
    if pending_in.k.shape[0] != q.shape[0]:
        raise ValueError(f"pending_in must hold B={q.shape[0]} requests, got {pending_in.k.shape}")
    if pending_out.k.shape != k.shape or pending_out.vt.shape != v.shape:
        raise ValueError("pending_out must be shaped like this window's k and v")
    if pending_out.vt.data_ptr() == pending_in.vt.data_ptr():
        raise ValueError("pending_in and pending_out must be different buffers")
    o, _ = launch_window(
        q,
        k,
        v,
        log_gate,
        beta,
        state_pool,
        state_slot,
        parent,
        scale=scale,
        store_vt=True,
        pending=(
            pending_in.k,
            pending_in.vt,
            pending_in.log_gate,
            pending_in.parent,
            pending_in.accepted,
        ),
        k_out=pending_out.k,
        g_out=pending_out.log_gate,
        vt=pending_out.vt,
        out=out,
        state_math=state_math,
        policy=policy,
    )
    return o
