"""Factories and a named closeness check for the GDN verify kernel tests."""

from __future__ import annotations

from dataclasses import dataclass

import torch


@dataclass(frozen=True)
class Window:
    q: torch.Tensor
    k: torch.Tensor
    v: torch.Tensor
    log_gate: torch.Tensor
    beta: torch.Tensor
    pool: torch.Tensor  # [num_slots, Hv, dv, dk]; unused slots are NaN
    slot: torch.Tensor  # [B] int32: committed state of each request
    parent: torch.Tensor  # [W] int32

    @property
    def state0(self) -> torch.Tensor:
        return self.pool[self.slot.long()].clone()


def make_window(
    *,
    parent: tuple[int, ...],
    batch: int = 2,
    num_k_heads: int = 2,
    num_v_heads: int = 4,
    dk: int = 32,
    dv: int = 32,
    in_dtype: torch.dtype = torch.bfloat16,
    state_dtype: torch.dtype = torch.float32,
    gate_range: tuple[float, float] = (0.02, 1.0),
    beta_range: tuple[float, float] = (0.05, 0.95),
    extra_slots: int = 0,
    device: str = "cpu",
    seed: int = 0,
) -> Window:
    """Random window. Gates a = exp(log_gate) drawn uniform in ``gate_range``; betas
    uniform in ``beta_range``; committed states placed at scattered slots of a pool whose
    other slots hold NaN, so a read from a wrong slot shows up."""
    gen = torch.Generator().manual_seed(seed)
    w = len(parent)

    def randn(*shape):
        return torch.randn(*shape, generator=gen)

    def uniform(lo, hi, *shape):
        return lo + (hi - lo) * torch.rand(*shape, generator=gen)

    q = randn(batch, w, num_k_heads, dk).to(in_dtype)
    k = randn(batch, w, num_k_heads, dk).to(in_dtype)
    v = randn(batch, w, num_v_heads, dv).to(in_dtype)
    a = uniform(*gate_range, batch, w, num_v_heads).double()
    log_gate = torch.log(a).float()
    beta = uniform(*beta_range, batch, w, num_v_heads).float()
    num_slots = 2 * batch + 1 + extra_slots
    pool = torch.full((num_slots, num_v_heads, dv, dk), float("nan"), dtype=state_dtype)
    slot = torch.randperm(num_slots, generator=gen)[:batch].to(torch.int32)
    pool[slot.long()] = (0.3 * randn(batch, num_v_heads, dv, dk)).to(state_dtype)
    return Window(
        q=q.to(device),
        k=k.to(device),
        v=v.to(device),
        log_gate=log_gate.to(device),
        beta=beta.to(device),
        pool=pool.to(device),
        slot=slot.to(device),
        parent=torch.tensor(parent, dtype=torch.int32, device=device),
    )


def rel_rms(ref: torch.Tensor, out: torch.Tensor) -> float:
    ref = ref.detach().double().cpu()
    out = out.detach().double().cpu()
    return ((out - ref).pow(2).mean().sqrt() / ref.pow(2).mean().sqrt().clamp_min(1e-30)).item()


def assert_close(name: str, ref: torch.Tensor, out: torch.Tensor, rtol: float) -> None:
    """Relative RMS error within ``rtol``; NaN anywhere fails. Names the tensor."""
    out_d = out.detach().double().cpu()
    assert out_d.shape == ref.shape, f"{name}: shape {tuple(out_d.shape)} != {tuple(ref.shape)}"
    assert torch.isfinite(out_d).all(), f"{name}: {(~torch.isfinite(out_d)).sum()} non-finite"
    err = rel_rms(ref, out_d)
    max_abs = (out_d - ref.double().cpu()).abs().max().item()
    assert err <= rtol, f"{name}: relative RMS error {err:.3e} > {rtol:.1e} (max abs {max_abs:.3e})"


def nan_like(x: torch.Tensor, dtype: torch.dtype | None = None) -> torch.Tensor:
    return torch.full(x.shape, float("nan"), dtype=dtype or x.dtype, device=x.device)
