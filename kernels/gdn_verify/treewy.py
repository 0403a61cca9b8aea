"""TreeWY verification and commit kernels (SPEC.md section 2, variants of section 3).

``treewy_verify`` computes every window output in closed form from the committed state
S_0 and writes only the pseudo-values ``vt`` (W x dv per head, not W states);
``treewy_commit`` rebuilds the accepted node's state in place::

    A        = ancestor-or-self mask of the tree               [BW, BW]  (tl.dot doubling)
    L        = A @ log_gate      (log gamma along the path, never a division)
    N[t, i]  = b_t exp(L_t - L_i) (k_t . k_i),  i strict ancestor of t
    Vt       = (I + N)^-1 (b * (v - exp(L) * (K S_0^T)))      [BW, BV]
    O        = exp(L) * (Q S_0^T) + (A * exp(L_t - L_i) * Q K^T) @ Vt
    S_a      = exp(L_a) S_0 + sum_{i <= a} exp(L_a - L_i) vt_i k_i^T

Stages, one file each (STYLE.md): treewy_prep.py (the per-head window kernel),
treewy_stream.py (the state stream and ``launch_window``), treewy_commit.py (the
separate commit), treewy_inputs.py (host checks); this module keeps the public
``treewy_verify`` and re-exports the stage kernels for kernels/bench.

Verify is two launches (second GPU round, kernels/BENCHMARKS.md): the window math of one
(request, value head) runs once in ``treewy_prep_kernel`` (ancestor mask, forward
substitution, blocked on 16 x 16 tiles for 16 < W <= 64 since round 3, decay-weighted
products; [W, W] fp32 results, tiny next to a state), and
``treewy_stream_kernel`` does only the state-sized work per (request, value head, dv
tile): K S^T and Q S^T on raw bf16 q, k (the l2-norms become per-row scales), two
[W, W] x [W, BV] products and the stores, BKC keys at a time (<= ~140 registers).
``treewy_commit_kernel`` walks the accepted node's path (no [W, W] mask) and streams
the state the same way.

Bytes per (request, value head): verify reads S_0 (dv*dk*s), q/k (W*dk*2 each, shared by
Hv/Hk heads), v (W*dv*2), gates and betas (W*4 each) and writes o (W*dv*2) and vt
(W*dv*4), plus 2*W*W*4 scratch written once and read per dv tile (from L2); commit
reads S_0, k, vt and gates and writes one state.

The streaming kernel, with compile-time flags, also gives the fused verify+commit and
the deferred-commit variants (``treewy_fused.py``). Nothing runs at import.
"""

from __future__ import annotations

import torch

from ._jit import pick_block_v
from .policy import LaunchPolicy
from .treewy_commit import treewy_commit, treewy_commit_kernel
from .treewy_inputs import check_inputs, check_parent, launch_split
from .treewy_prep import PREP_BLOCK_K, launch_prep, treewy_prep_kernel
from .treewy_stream import launch_window, treewy_stream_kernel

__all__ = [
    "PREP_BLOCK_K",
    "check_inputs",
    "check_parent",
    "launch_prep",
    "launch_split",
    "launch_window",
    "pick_block_v",
    "treewy_commit",
    "treewy_commit_kernel",
    "treewy_prep_kernel",
    "treewy_stream_kernel",
    "treewy_verify",
]


def treewy_verify(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    log_gate: torch.Tensor,
    beta: torch.Tensor,
    state_pool: torch.Tensor,
    state_slot: torch.Tensor,
    parent: torch.Tensor,
    scale: float | None = None,
    *,
    out: torch.Tensor | None = None,
    vt: torch.Tensor | None = None,
    state_math: str | None = None,
    policy: LaunchPolicy | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Outputs and pseudo-values of a draft window, reading S_0 = state_pool[state_slot[b]].

    Args: q, k [B, W, Hk, dk] and v [B, W, Hv, dv] (bf16 or fp32); log_gate, beta
    [B, W, Hv] fp32; state_pool [num_slots, Hv, dv, dk] fp32 or bf16 (not modified);
    state_slot [B] int32; parent [W] int32 (DFS preorder, parent[0] = -1).
    Returns o [B, W, Hv, dv] in v's dtype and vt [B, W, Hv, dv] fp32 (written into
    ``out`` / ``vt`` when given). CUDA-graph capturable (no host synchronisation; the
    parent array is validated on the host outside capture). ``state_math``: None (the
    contract of _jit.dot_precision: fp32-grade for an fp32 state) or "fp32" / "tf32".
    ``policy``: launch configurations (policy.py; None: DEFAULT_POLICY).
    """
    return launch_window(
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
        out=out,
        vt=vt,
        state_math=state_math,
        policy=policy,
    )
