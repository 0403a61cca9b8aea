"""Float64 references for GDN speculative verification (SPEC.md section 2), on the CPU.

Layouts follow vLLM: q, k [B, W, Hk, dk]; v [B, W, Hv, dv]; log_gate, beta [B, W, Hv];
states [B, Hv, dv, dk] (value rows, key columns); parent [W] shared by the batch. Value
head h reads key head ``h // (Hv // Hk)``. q and k are L2-normalised with eps 1e-6
(``x / sqrt(|x|^2 + 1e-6)``) and q is scaled by ``1/sqrt(dk)`` unless ``scale`` is given.

Everything is computed in float64 whatever the input dtype, so these are the oracles
the Triton kernels are tested against. They are slow on purpose: one readable loop or
one batched solve per formula.
"""

from __future__ import annotations

import torch

from .tree import validate_parent

__all__ = [
    "ancestor_matrix",
    "commit_reference",
    "conv_state_commit_reference",
    "conv_tree_reference",
    "l2norm",
    "recurrence_reference",
    "replay_state_reference",
    "treewy_reference",
]

L2_EPS = 1e-6


def l2norm(x: torch.Tensor) -> torch.Tensor:
    """``x / sqrt(|x|^2 + 1e-6)`` over the last dimension, as fla and vLLM do in-kernel."""
    return x / torch.sqrt((x * x).sum(-1, keepdim=True) + L2_EPS)


def _parent_list(parent: torch.Tensor | list[int] | tuple[int, ...]) -> tuple[int, ...]:
    if isinstance(parent, torch.Tensor):
        parent = parent.detach().cpu().tolist()
    return validate_parent(parent)


def ancestor_matrix(parent: torch.Tensor | list[int] | tuple[int, ...]) -> torch.Tensor:
    """Bool [W, W]: ``A[t, i]`` is True when i is an ancestor of t or t itself."""
    par = _parent_list(parent)
    n = len(par)
    a = torch.zeros(n, n, dtype=torch.bool)
    for t in range(n):
        i = t
        while i >= 0:
            a[t, i] = True
            i = par[i]
    return a


def _prepare(q, k, v, log_gate, beta, scale):
    hk, dk = q.shape[2], q.shape[3]
    hv = v.shape[2]
    if hv % hk != 0:
        raise ValueError(f"Hv ({hv}) must be a multiple of Hk ({hk})")
    if scale is None:
        scale = dk**-0.5
    group = hv // hk
    qn = l2norm(q.double()).repeat_interleave(group, dim=2) * scale  # [B, W, Hv, dk]
    kn = l2norm(k.double()).repeat_interleave(group, dim=2)
    return qn, kn, v.double(), log_gate.double(), beta.double()


def recurrence_reference(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    log_gate: torch.Tensor,
    beta: torch.Tensor,
    state0: torch.Tensor,
    parent: torch.Tensor | list[int] | tuple[int, ...],
    scale: float | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Per-node recurrence over the tree: every node's output and state.

    ``S_t = a_t S_p (I - b_t k_t k_t^T) + b_t v_t k_t^T``, ``o_t = S_t q_t`` with
    ``a_t = exp(log_gate_t)`` and S_p the parent's state (``state0`` for the root).

    Returns o [B, W, Hv, dv] and states [B, W, Hv, dv, dk], both float64.
    """
    par = _parent_list(parent)
    qn, kn, vd, gd, bd = _prepare(q, k, v, log_gate, beta, scale)
    w = qn.shape[1]
    if len(par) != w:
        raise ValueError(f"parent has {len(par)} nodes but the window has W={w}")
    states = []
    outs = []
    for t in range(w):
        s_p = state0.double() if par[t] < 0 else states[par[t]]
        a_t = torch.exp(gd[:, t])[..., None, None]  # [B, Hv, 1, 1]
        k_t = kn[:, t]  # [B, Hv, dk]
        s_dec = a_t * s_p
        vt = bd[:, t, :, None] * (vd[:, t] - torch.einsum("bhvk,bhk->bhv", s_dec, k_t))
        s_t = s_dec + vt[..., :, None] * k_t[..., None, :]
        states.append(s_t)
        outs.append(torch.einsum("bhvk,bhk->bhv", s_t, qn[:, t]))
    return torch.stack(outs, dim=1), torch.stack(states, dim=1)


def _log_gamma(gd: torch.Tensor, anc: torch.Tensor) -> torch.Tensor:
    """L_t = sum of log gates over the ancestor path root..t: [B, W, Hv]."""
    return torch.einsum("ti,bih->bth", anc.double(), gd)


def treewy_reference(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    log_gate: torch.Tensor,
    beta: torch.Tensor,
    state0: torch.Tensor,
    parent: torch.Tensor | list[int] | tuple[int, ...],
    scale: float | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """TreeWY closed form: outputs and pseudo-values from the committed state only.

    Solves ``(I + diag(b) G) Vt = R`` with ``G[t, i] = exp(L_t - L_i) (k_t . k_i)`` for
    strict ancestors i of t and ``R[t] = b_t v_t - b_t g_t S_0 k_t``; then
    ``o_t = g_t S_0 q_t + sum_{i <= t} exp(L_t - L_i) vt_i (k_i . q_t)``.

    Returns o [B, W, Hv, dv] and vt [B, W, Hv, dv], both float64.
    """
    anc = ancestor_matrix(parent)
    qn, kn, vd, gd, bd = _prepare(q, k, v, log_gate, beta, scale)
    w = qn.shape[1]
    if anc.shape[0] != w:
        raise ValueError(f"parent has {anc.shape[0]} nodes but the window has W={w}")
    s0 = state0.double()
    big_l = _log_gamma(gd, anc)  # [B, W, Hv]
    # decay[b, h, t, i] = exp(L_t - L_i) on ancestor-or-self pairs, 0 elsewhere
    diff = big_l.permute(0, 2, 1)[..., :, None] - big_l.permute(0, 2, 1)[..., None, :]
    decay = torch.where(anc, torch.exp(torch.where(anc, diff, 0.0)), 0.0)
    strict = anc & ~torch.eye(w, dtype=torch.bool)
    kh = kn.permute(0, 2, 1, 3)  # [B, Hv, W, dk]
    qh = qn.permute(0, 2, 1, 3)
    kk = kh @ kh.transpose(-1, -2)
    bh = bd.permute(0, 2, 1)  # [B, Hv, W]
    gam = torch.exp(big_l).permute(0, 2, 1)
    lhs = torch.eye(w, dtype=torch.float64) + bh[..., None] * torch.where(strict, decay * kk, 0.0)
    s0k = torch.einsum("bhvk,bhtk->bhtv", s0, kh)
    s0q = torch.einsum("bhvk,bhtk->bhtv", s0, qh)
    rhs = bh[..., None] * (vd.permute(0, 2, 1, 3) - gam[..., None] * s0k)
    vt = torch.linalg.solve_triangular(lhs, rhs, upper=False, unitriangular=True)
    qk = qh @ kh.transpose(-1, -2)
    o = gam[..., None] * s0q + (decay * qk) @ vt
    return o.permute(0, 2, 1, 3), vt.permute(0, 2, 1, 3)


def commit_reference(
    state0: torch.Tensor,
    k: torch.Tensor,
    vt: torch.Tensor,
    log_gate: torch.Tensor,
    parent: torch.Tensor | list[int] | tuple[int, ...],
    accepted: torch.Tensor | list[int],
) -> torch.Tensor:
    """State of the accepted node: ``S_a = g_a S_0 + sum_{i <= a} exp(L_a - L_i) vt_i k_i^T``.

    ``accepted`` [B] holds one node index per request. Returns [B, Hv, dv, dk] float64
    on the CPU (inputs on any device are copied there).
    """
    anc = ancestor_matrix(parent)
    state0, k, vt, log_gate = (t.detach().cpu() for t in (state0, k, vt, log_gate))
    bsz, w, hk, _ = k.shape
    hv = vt.shape[2]
    kn = l2norm(k.double()).repeat_interleave(hv // hk, dim=2)
    gd = log_gate.double()
    big_l = _log_gamma(gd, anc)
    acc = accepted.tolist() if isinstance(accepted, torch.Tensor) else list(accepted)
    if len(acc) != bsz:
        raise ValueError(f"accepted must hold B={bsz} entries, got {len(acc)}")
    out = []
    for b, a in enumerate(acc):
        if not 0 <= a < w:
            raise ValueError(f"accepted[{b}] must be in [0, {w}), got {a}")
        path = anc[a]
        coef = torch.where(path[:, None], torch.exp(big_l[b, a][None, :] - big_l[b]), 0.0)
        s = torch.exp(big_l[b, a])[:, None, None] * state0[b].double()
        s = s + torch.einsum("th,thv,thk->hvk", coef, vt[b].double(), kn[b])
        out.append(s)
    return torch.stack(out)


def _conv_window(x: torch.Tensor, conv_state: torch.Tensor, par: tuple[int, ...], t: int):
    """Inputs [B, C, K] seen by node t: its ancestor path, padded with the conv state."""
    kernel = conv_state.shape[-1] + 1
    cols = []
    node = t
    while node >= 0 and len(cols) < kernel:
        cols.append(x[:, node])
        node = par[node]
    need = kernel - len(cols)
    hist = [conv_state[..., kernel - 1 - j - 1] for j in range(need)] if need else []
    # cols holds newest first; hist holds the newest history column first
    newest_first = cols + hist
    return torch.stack(list(reversed(newest_first)), dim=-1)


def conv_tree_reference(
    x: torch.Tensor,
    conv_state: torch.Tensor,
    weight: torch.Tensor,
    bias: torch.Tensor | None,
    parent: torch.Tensor | list[int] | tuple[int, ...],
    activation: str | None = "silu",
) -> torch.Tensor:
    """Causal depthwise conv1d whose window is each node's ancestor path.

    x [B, W, C]; conv_state [B, C, K-1] holding the last K-1 committed inputs, oldest in
    column 0; weight [C, K] (column K-1 multiplies the newest input); bias [C] or None.
    Returns y [B, W, C] float64, ``silu`` applied when ``activation == 'silu'``.
    """
    if activation not in (None, "silu"):
        raise ValueError(f"activation must be None or 'silu', got {activation!r}")
    par = _parent_list(parent)
    xd, sd, wd = x.double(), conv_state.double(), weight.double()
    ys = []
    for t in range(x.shape[1]):
        win = _conv_window(xd, sd, par, t)  # [B, C, K]
        y = (win * wd[None]).sum(-1)
        if bias is not None:
            y = y + bias.double()[None]
        ys.append(y)
    y = torch.stack(ys, dim=1)
    return y * torch.sigmoid(y) if activation == "silu" else y


def conv_state_commit_reference(
    x: torch.Tensor,
    conv_state: torch.Tensor,
    parent: torch.Tensor | list[int] | tuple[int, ...],
    accepted: torch.Tensor | list[int],
) -> torch.Tensor:
    """Conv state after accepting node a: the last K-1 inputs of its ancestor path."""
    par = _parent_list(parent)
    acc = accepted.tolist() if isinstance(accepted, torch.Tensor) else list(accepted)
    xd, sd = x.double(), conv_state.double()
    out = []
    for b, a in enumerate(acc):
        win = _conv_window(xd[b : b + 1], sd[b : b + 1], par, a)  # [1, C, K]
        out.append(win[0, :, 1:])
    return torch.stack(out)


def replay_state_reference(
    state0: torch.Tensor,
    ring_k: torch.Tensor,
    ring_vt: torch.Tensor,
    ring_log_gate: torch.Tensor,
    length: torch.Tensor | list[int],
) -> torch.Tensor:
    """State after a replay ring (replay.py): the checkpoint ``state0`` [B, Hv, dv, dk]
    with the first ``length[b]`` ring entries applied as a chain,
    ``S = exp(L_n) S_c + sum_{j < n} exp(L_n - L_j) u_j k_j^T / |k_j|``. float64."""
    # float64 on the CPU whatever the inputs' device (commit_reference's ancestor matrix is
    # a CPU tensor; round 6's GPU harness passed CUDA tensors and lost its replay rows)
    state0, ring_k, ring_vt, ring_log_gate = (
        t.detach().cpu() for t in (state0, ring_k, ring_vt, ring_log_gate)
    )
    lens = length.tolist() if isinstance(length, torch.Tensor) else list(length)
    out = []
    for b, n in enumerate(lens):
        if n == 0:
            out.append(state0[b].double())
            continue
        chain = tuple(range(-1, n - 1))
        s = commit_reference(
            state0[b : b + 1], ring_k[b : b + 1, :n], ring_vt[b : b + 1, :n],
            ring_log_gate[b : b + 1, :n], chain, [n - 1],
        )  # fmt: skip
        out.append(s[0])
    return torch.stack(out)
