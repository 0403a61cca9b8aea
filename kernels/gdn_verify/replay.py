"""Replay commit mode: one checkpoint state plus a ring of the accepted tokens' inputs.

The design is ReplaySSM's (Dao AI Lab and NVIDIA; vLLM RFC #49232, PRs #47576 / #49847,
blog https://dao-lab.ai/blog/2026/replayssm/), written here from its description, for
TreeWY windows (chains and trees). Per request, GDN layer and value head:

* a checkpoint S_c (the committed state pool slot) that is read every step and written
  only on a *flush*;
* a ring of R entries, the accepted tokens since the last flush, as a chain: raw key k_j
  (per key head), log gate g_j and the GDN update vector u_j = b_j (v_j - a_j S_{j-1} k_j)
  (the TreeWY pseudo-value vt_j of the accepted node; caching u rather than v, as the
  published GDN design does, keeps the replay free of serial dependence). The state
  after the ring is S = exp(L_n) S_c + sum_{j < n} exp(L_n - L_j) u_j k_j^T / |k_j|.

``replay_verify`` computes S in registers from S_c and the ring (the stream kernel of
treewy_stream.py with PENDING + REPLAY, or the single-launch kernel for small windows),
verifies the window from it and writes S back to the checkpoint only for requests whose
ring could not take this window's longest path (length + max_path > R): the flush.
``replay_append``, after sampling, appends the accepted path's (k, vt, g) to each ring
(at 0 after a flush): a cursor move and W-row copies, no state write. Rollback of
rejected drafts costs nothing: their entries are never appended.

Shapes: ring k [B, R, Hk, dk] (q/k dtype), vt [B, R, Hv, dv] fp32, log_gate [B, R, Hv]
fp32, length [B] int32. Bytes: ``replay_memory_bytes`` (held per request) and
``replay_step_bytes`` (moved per step, the roofline's numerator). Nothing runs at import.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import triton
import triton.language as tl

from ._jit import pad_window, path_mask
from .policy import LaunchPolicy
from .tree import chain_parent, depths
from .treewy_inputs import check_parent
from .treewy_stream import launch_window

__all__ = [
    "ReplayRing",
    "replay_append",
    "replay_append_kernel",
    "replay_memory_bytes",
    "replay_step",
    "replay_step_bytes",
    "replay_verify",
]


@dataclass(frozen=True, slots=True)
class ReplayRing:
    """The ring of one GDN layer for a batch (device tensors; ``max_path`` a host int).

    ``max_path``: the longest root-to-node path (tree depth + 1) of the windows this ring
    serves; a ring holding n entries is flushed by the next verify when n + max_path > R,
    so every append fits. ``chain``: parent array of the ring (a chain of R entries).
    """

    k: torch.Tensor
    vt: torch.Tensor
    log_gate: torch.Tensor
    length: torch.Tensor
    chain: torch.Tensor
    max_path: int

    def __post_init__(self) -> None:
        bsz, cap = self.k.shape[:2]
        if self.vt.shape[:2] != (bsz, cap) or self.vt.dtype != torch.float32:
            raise ValueError(
                f"ring vt must be float32 [B={bsz}, R={cap}, Hv, dv], got {self.vt.shape}"
            )
        if self.log_gate.shape != (bsz, cap, self.vt.shape[2]):
            raise ValueError(f"ring log_gate must be [B, R, Hv], got {tuple(self.log_gate.shape)}")
        if self.length.shape != (bsz,) or self.length.dtype != torch.int32:
            raise ValueError(f"ring length must be int32 [B={bsz}], got {self.length.shape}")
        if not 1 <= self.max_path <= cap:
            raise ValueError(f"max_path must be in [1, R={cap}], got {self.max_path}")

    @property
    def capacity(self) -> int:
        return self.k.shape[1]

    @classmethod
    def empty(
        cls, k_like: torch.Tensor, v_like: torch.Tensor, parent: torch.Tensor, capacity: int
    ) -> ReplayRing:
        """An empty ring (length 0) for windows shaped like ``k_like`` / ``v_like`` with
        tree ``parent``; ``capacity`` R >= the window's longest path."""
        bsz, _, hk, dk = k_like.shape
        hv, dv = v_like.shape[2], v_like.shape[3]
        dev = k_like.device
        max_path = max(depths(parent.tolist())) + 1
        if capacity < max_path:
            raise ValueError(f"capacity must be >= the longest path {max_path}, got {capacity}")
        return cls(
            k=torch.zeros(bsz, capacity, hk, dk, dtype=k_like.dtype, device=dev),
            vt=torch.zeros(bsz, capacity, hv, dv, dtype=torch.float32, device=dev),
            log_gate=torch.zeros(bsz, capacity, hv, dtype=torch.float32, device=dev),
            length=torch.zeros(bsz, dtype=torch.int32, device=dev),
            chain=torch.tensor(chain_parent(capacity), dtype=torch.int32, device=dev),
            max_path=max_path,
        )

    def flush_mask(self) -> torch.Tensor:
        """[B] int32: 1 where the next verify writes the checkpoint (n + max_path > R)."""
        return (self.length + self.max_path > self.capacity).to(torch.int32)


def replay_verify(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    log_gate: torch.Tensor,
    beta: torch.Tensor,
    state_pool: torch.Tensor,
    state_slot: torch.Tensor,
    parent: torch.Tensor,
    ring: ReplayRing,
    scale: float | None = None,
    *,
    out: torch.Tensor | None = None,
    vt: torch.Tensor | None = None,
    state_math: str | None = None,
    policy: LaunchPolicy | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Outputs and pseudo-values of a window verified from checkpoint + ring.

    Arguments as ``treewy_verify``; state_pool[state_slot[b]] is the checkpoint, written
    (checkpoint <- checkpoint + ring) only where ``ring.flush_mask()`` is 1. Call
    ``replay_append`` after every call (accepted = -1 where nothing is accepted): a
    flushed ring is emptied there. CUDA-graph capturable.
    """
    if ring.k.shape[0] != q.shape[0] or ring.k.shape[2:] != k.shape[2:]:
        raise ValueError(
            f"ring k must be [B, R, Hk, dk] like k {tuple(k.shape)}, got {ring.k.shape}"
        )
    if ring.vt.shape[2:] != v.shape[2:]:
        raise ValueError(
            f"ring vt must be [B, R, Hv, dv] like v {tuple(v.shape)}, got {ring.vt.shape}"
        )
    last = ring.length - 1  # [B] int32: the ring's newest entry, -1 when empty
    return launch_window(
        q, k, v, log_gate, beta, state_pool, state_slot, parent,
        scale=scale, store_vt=True,
        pending=(ring.k, ring.vt, ring.log_gate, ring.chain, last),
        replay_flush=ring.flush_mask(), vt=vt, out=out, state_math=state_math, policy=policy,
    )  # fmt: skip


@triton.jit
def replay_append_kernel(
    k,
    vt,
    g,
    parent,
    accepted,
    ring_k,
    ring_vt,
    ring_g,
    length,
    length_out,
    H: tl.constexpr,
    HV: tl.constexpr,
    W: tl.constexpr,
    R: tl.constexpr,
    MAXP: tl.constexpr,
    K: tl.constexpr,
    V: tl.constexpr,
    BW: tl.constexpr,
    BK: tl.constexpr,
    BV: tl.constexpr,
):
    """One (request, value head): copy the accepted path's rows into the ring.

    Path node of depth d goes to ring entry base + d, base = 0 if this step's verify
    flushed (length + MAXP > R), else length. Value head h writes its vt rows and gates;
    the first value head of a key-head group writes the keys; head 0 writes length_out.
    """
    i_bh = tl.program_id(0)
    i_b, i_h = i_bh // HV, i_bh % HV
    i_hk = i_h // (HV // H)
    o_w = tl.arange(0, BW)
    i_n = tl.load(length + i_b)
    i_base = tl.where(i_n + MAXP > R, 0, i_n)
    i_a = tl.load(accepted + i_b)
    m_path = path_mask(parent, i_a, W, BW) & (o_w < W)
    n_path = tl.sum(m_path.to(tl.int32), 0)
    o_dst = i_base + tl.cumsum(m_path.to(tl.int32), 0) - 1  # ring entry of each path node
    m_put = m_path & (o_dst < R)
    o_v = tl.arange(0, BV)
    m_v = o_v < V
    b_vt = tl.load(
        vt + ((i_b * W + o_w).to(tl.int64) * HV + i_h)[:, None] * V + o_v[None, :],
        mask=m_put[:, None] & m_v[None, :],
        other=0.0,
    )
    tl.store(
        ring_vt + ((i_b * R + o_dst).to(tl.int64) * HV + i_h)[:, None] * V + o_v[None, :],
        b_vt,
        mask=m_put[:, None] & m_v[None, :],
    )
    b_g = tl.load(g + (i_b * W + o_w).to(tl.int64) * HV + i_h, mask=m_put, other=0.0)
    tl.store(ring_g + (i_b * R + o_dst).to(tl.int64) * HV + i_h, b_g, mask=m_put)
    if i_h % (HV // H) == 0:
        o_k = tl.arange(0, BK)
        m_k = o_k < K
        b_k = tl.load(
            k + ((i_b * W + o_w).to(tl.int64) * H + i_hk)[:, None] * K + o_k[None, :],
            mask=m_put[:, None] & m_k[None, :],
            other=0.0,
        )
        tl.store(
            ring_k + ((i_b * R + o_dst).to(tl.int64) * H + i_hk)[:, None] * K + o_k[None, :],
            b_k,
            mask=m_put[:, None] & m_k[None, :],
        )
    if i_h == 0:
        tl.store(length_out + i_b, i_base + n_path)


def replay_append(
    ring: ReplayRing,
    k: torch.Tensor,
    vt: torch.Tensor,
    log_gate: torch.Tensor,
    parent: torch.Tensor,
    accepted: torch.Tensor,
) -> None:
    """Append each request's accepted path (k, vt, gates of ``replay_verify``'s window) to
    its ring; ``accepted`` [B] int32 node indices, -1 = nothing accepted. Updates
    ``ring.length`` in place. CUDA-graph capturable.

    Bytes per (request, value head): reads and writes the path's rows, d <= max_path of
    them: d*(dv*4 + 4) plus d*dk*2 per key head; one int per request.
    """
    bsz, w, hk, dk = k.shape
    hv, dv = vt.shape[2], vt.shape[3]
    if vt.shape[:2] != (bsz, w) or vt.dtype != torch.float32:
        raise ValueError(f"vt must be float32 [B={bsz}, W={w}, Hv, dv], got {vt.dtype} {vt.shape}")
    if log_gate.shape != (bsz, w, hv):
        raise ValueError(f"log_gate must be [B, W, Hv] = {(bsz, w, hv)}, got {log_gate.shape}")
    if accepted.shape != (bsz,) or accepted.dtype != torch.int32:
        raise ValueError(f"accepted must be int32 [B={bsz}], got {accepted.dtype} {accepted.shape}")
    if (
        ring.k.shape[0] != bsz
        or ring.k.shape[2:] != k.shape[2:]
        or ring.vt.shape[2:] != vt.shape[2:]
    ):
        raise ValueError(f"ring must match the window's B, heads and dims, got k {ring.k.shape}")
    check_parent(parent, w)
    length_out = torch.empty_like(ring.length)
    bw, _ = pad_window(w)
    replay_append_kernel[(bsz * hv,)](
        k, vt, log_gate, parent, accepted, ring.k, ring.vt, ring.log_gate, ring.length, length_out,
        H=hk, HV=hv, W=w, R=ring.capacity, MAXP=ring.max_path, K=dk, V=dv, BW=bw,
        BK=triton.next_power_of_2(dk), BV=triton.next_power_of_2(dv), num_warps=4,
    )  # fmt: skip
    ring.length.copy_(length_out)


def replay_step(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    log_gate: torch.Tensor,
    beta: torch.Tensor,
    state_pool: torch.Tensor,
    state_slot: torch.Tensor,
    parent: torch.Tensor,
    ring: ReplayRing,
    accepted: torch.Tensor,
    scale: float | None = None,
    *,
    out: torch.Tensor | None = None,
    vt: torch.Tensor | None = None,
    state_math: str | None = None,
    policy: LaunchPolicy | None = None,
) -> torch.Tensor:
    """One whole replay step with ``accepted`` known (benchmarks, replayed windows):
    ``replay_verify`` then ``replay_append``; returns the outputs. Timed over many
    CUDA-graph replays with a fixed ``accepted`` it averages the flush steps in at their
    real rate (one per ``replay_step_bytes(...)["steps_per_flush"]`` steps)."""
    o, vt = replay_verify(
        q, k, v, log_gate, beta, state_pool, state_slot, parent, ring, scale,
        out=out, vt=vt, state_math=state_math, policy=policy,
    )  # fmt: skip
    replay_append(ring, k, vt, log_gate, parent, accepted)
    return o


def replay_memory_bytes(
    *, num_v_heads: int, num_k_heads: int, dk: int, dv: int, capacity: int,
    state_bytes: int, qk_bytes: int = 2,
) -> dict[str, int]:  # fmt: skip
    """Bytes held per request per GDN layer: the checkpoint and the ring (k per key head
    in the q/k dtype, vt fp32 and gates fp32 per value head, the int32 length).

    35B TP1 (Hv 32, Hk 16, dk = dv = 128), fp32 state, R = 16: checkpoint 2,097,152 +
    ring 16 * (16*128*2 + 32*128*4 + 32*4) + 4 = 329,732 bytes.
    """
    checkpoint = num_v_heads * dv * dk * state_bytes
    ring = capacity * (num_k_heads * dk * qk_bytes + num_v_heads * (dv * 4 + 4)) + 4
    return {"checkpoint_bytes": checkpoint, "ring_bytes": ring, "total_bytes": checkpoint + ring}


def replay_step_bytes(
    *, num_v_heads: int, num_k_heads: int, dk: int, dv: int, window_tok: int, capacity: int,
    max_path: int, accepted_path_tok: float, state_bytes: int, qk_bytes: int = 2,
    io_bytes: int = 2,
) -> dict[str, float]:  # fmt: skip
    """HBM bytes one request moves per GDN layer per step (verify + append), amortised.

    Verify reads the checkpoint (Hv*dv*dk*s), the ring up to R entries (at most; the
    mean fill is about half), the window's q, k (W*Hk*dk*2 each), v (W*Hv*dv*2), gates
    and betas (W*Hv*4 each); writes o (W*Hv*dv*2) and vt (W*Hv*dv*4). A flush writes one
    checkpoint; with d = ``accepted_path_tok`` (accepted drafts + 1) entries appended per
    step a ring is flushed once per floor((R - max_path) / d) + 1 steps. Append reads and
    writes d rows. The ring read is counted at its mean fill, (R - max_path + d) / 2.
    """
    w, d = window_tok, accepted_path_tok
    if not 1 <= d <= max_path <= capacity:
        raise ValueError(
            f"need 1 <= accepted_path_tok ({d}) <= max_path ({max_path}) <= R ({capacity})"
        )
    state = num_v_heads * dv * dk * state_bytes
    entry = num_k_heads * dk * qk_bytes + num_v_heads * (dv * 4 + 4)
    steps_per_flush = int((capacity - max_path) // d) + 1
    mean_fill = min(capacity, (capacity - max_path + d) / 2)
    window_in = 2 * w * num_k_heads * dk * qk_bytes + w * num_v_heads * (dv * io_bytes + 8)
    window_out = w * num_v_heads * dv * (io_bytes + 4)
    read = state + mean_fill * entry + window_in + d * entry
    write = state / steps_per_flush + window_out + d * entry
    return {"read_bytes": read, "write_bytes": write, "total_bytes": read + write,
            "steps_per_flush": float(steps_per_flush)}  # fmt: skip
