"""Benchmark cases as data: random inputs of one (shape, state dtype, B, window) cell and
the float64 truth of its committed state, on any device (a GPU, or the CPU interpreter
at small shapes for the tests).

The inputs follow run.py's ``Cell`` (bf16 q/k/v, gates a = 0.3 + 0.7 U, betas
0.05 + 0.9 U, states 0.1 N(0, 1)); vLLM's op gets gate inputs that reproduce the same gates
(vllm_ops.gate_inputs) and its own float64 truth from the gates it computes.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from ...gdn_verify.reference import l2norm, recurrence_reference
from ...gdn_verify.tree import TreeSpec
from .shapes import ModelShape


@dataclass(frozen=True)
class Case:
    """One measured cell: inputs, slots and the accepted node of each request."""

    shape: ModelShape
    state_dtype: str
    tree: TreeSpec
    q: torch.Tensor
    k: torch.Tensor
    v: torch.Tensor
    log_gate: torch.Tensor
    beta: torch.Tensor
    pool: torch.Tensor  # [B, Hv, dv, dk]: request b's committed state at slot[b]
    slot: torch.Tensor
    parent: torch.Tensor
    accepted: torch.Tensor

    @property
    def batch(self) -> int:
        return self.q.shape[0]

    @property
    def num_nodes(self) -> int:
        return self.q.shape[1]

    def state0(self) -> torch.Tensor:
        return self.pool[self.slot.long()].clone()


def make_case(
    shape: ModelShape,
    state_dtype: str,
    batch: int,
    tree: TreeSpec,
    *,
    seed: int,
    device: str = "cuda",
    gate_floor: float = 0.3,
) -> Case:
    """Random inputs; gates a = gate_floor + (1 - gate_floor) U(0, 1)."""
    gen = torch.Generator(device=device).manual_seed(seed)
    b, w = batch, tree.num_nodes
    hv, hk, dk, dv = shape.num_v_heads, shape.num_k_heads, shape.dk, shape.dv

    def randn(*s):
        return torch.randn(*s, device=device, generator=gen)

    def rand(*s):
        return torch.rand(*s, device=device, generator=gen)

    return Case(
        shape=shape,
        state_dtype=state_dtype,
        tree=tree,
        q=randn(b, w, hk, dk).bfloat16(),
        k=randn(b, w, hk, dk).bfloat16(),
        v=randn(b, w, hv, dv).bfloat16(),
        log_gate=torch.log(gate_floor + (1 - gate_floor) * rand(b, w, hv)),
        beta=0.05 + 0.9 * rand(b, w, hv),
        pool=(0.1 * randn(b, hv, dv, dk)).to(getattr(torch, state_dtype)),
        slot=torch.randperm(b, device=device, generator=gen).to(torch.int32),
        parent=torch.tensor(tree.parent, dtype=torch.int32, device=device),
        accepted=torch.randint(0, w, (b,), device=device, generator=gen, dtype=torch.int32),
    )


def truth(case: Case, num_requests: int, log_gate=None, beta=None):
    """float64 (o [n, W, Hv, dv], states [n, W, Hv, dv, dk]) of the first ``num_requests``
    requests from their committed states (gates and betas overridable, float64 allowed)."""
    n = num_requests
    g = case.log_gate if log_gate is None else log_gate
    bt = case.beta if beta is None else beta
    s0 = case.state0()[:n].double()
    return recurrence_reference(
        case.q[:n], case.k[:n], case.v[:n], g[:n], bt[:n], s0, case.tree.parent
    )


def pseudo_values(case: Case, states: torch.Tensor, num_requests: int) -> torch.Tensor:
    """float64 vt_t = b_t (v_t - a_t S_parent k_t) of the first requests (run.py's checks)."""
    n = num_requests
    sh = case.shape
    kn = l2norm(case.k[:n].double()).repeat_interleave(sh.num_v_heads // sh.num_k_heads, 2)
    s0 = case.state0()[:n].double()
    s_par = torch.stack([s0 if p < 0 else states[:, p] for p in case.tree.parent], dim=1)
    a = torch.exp(case.log_gate[:n].double())
    return case.beta[:n].double()[..., None] * (
        case.v[:n].double() - a[..., None] * torch.einsum("bthvk,bthk->bthv", s_par, kn)
    )


def rel_err(ref: torch.Tensor, out: torch.Tensor) -> float:
    """||out - ref|| / ||ref|| (inf if out has a non-finite value)."""
    ref, out = ref.double(), out.double()
    if not bool(out.isfinite().all()):
        return float("inf")
    return float((out - ref).norm() / ref.norm().clamp_min(1e-300))


def max_head_rel_err(ref: torch.Tensor, out: torch.Tensor) -> float:
    """Largest per-(request, head) relative error of [n, Hv, dv, dk] states."""
    ref, out = ref.double(), out.double()
    if not bool(out.isfinite().all()):
        return float("inf")
    num = (out - ref).flatten(2).norm(dim=2)
    return float((num / ref.flatten(2).norm(dim=2).clamp_min(1e-300)).max())
