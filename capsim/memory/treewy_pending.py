"""Memory the TreeWY deferred-commit kernel keeps per request between decode steps.

``kernels/gdn_verify/treewy_fused.py:treewy_deferred_verify`` applies the previous step's
accepted path inside the next verify, so each request keeps its last window in a
``PendingCommit`` (same file) per GDN layer: ``k`` [W, Hk, dk] in the q/k dtype, ``vt``
[W, Hv, dv] fp32, ``log_gate`` [W, Hv] fp32 and ``accepted`` (one int32); ``parent`` [W]
int32 is shared by the batch. The kernel reads ``pending_in`` and writes ``pending_out``,
and refuses one buffer for both, so two sets are live during a step (in and out, swapped
each step). Heads are per rank (Hk/tp, Hv/tp). Chains and trees differ only in W
(= drafted nodes + 1). capsim.core does not import the kernels: the shapes are restated
here and a test compares them with the kernel's buffers.
"""

from __future__ import annotations

from capsim.commit_modes import get_mode
from capsim.config import SpecDecodeConfig
from capsim.models import ModelSpec
from capsim.units import dtype_bytes

PENDING_SETS: int = 2  # pending_in and pending_out (treewy_deferred_verify)


def pending_bytes_per_layer(model: ModelSpec, tp: int, window_tok: int) -> int:
    """Bytes of one ``PendingCommit`` entry (one request, one GDN layer, one rank)."""
    hk, hv = model.linear_num_key_heads // tp, model.linear_num_value_heads // tp
    k = window_tok * hk * model.linear_key_head_dim * dtype_bytes(model.weight_dtype)
    vt = window_tok * hv * model.linear_value_head_dim * 4
    log_gate = window_tok * hv * 4
    accepted = 4
    return k + vt + log_gate + accepted


def pending_bytes_per_request(model: ModelSpec, tp: int, spec: SpecDecodeConfig) -> int:
    """Bytes a running request holds for deferred commit (two PendingCommit sets) or for
    replay (one ring of R = ring_windows * (depth + 1) entries of the same layout, plus its int32
    length: ``kernels/gdn_verify/replay.py:replay_memory_bytes``) on one rank; 0 in the
    other modes."""
    mode = get_mode(spec.commit)
    if not mode.holds_pending or not model.is_hybrid or spec.depth == 0:
        return 0
    if mode.ring_windows:
        return model.num_gdn_layers * pending_bytes_per_layer(
            model, tp, mode.ring_tok(spec.depth + 1)
        )
    per_layer = pending_bytes_per_layer(model, tp, spec.window_tok)
    return PENDING_SETS * model.num_gdn_layers * per_layer
