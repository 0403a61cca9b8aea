"""GDN prefill transients: vLLM's vendored FLA chunk rule, its layer-core path, fla-core 0.6.0."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch

from .probe import Probe, measure_call
from .probe import randn as _randn
from .shapes import GpuShape

# ----------------------------------------------------------------------------- measuring


def gdn_inputs(
    s: GpuShape, tokens: int, device: torch.device, *, expand_qk: bool = False
) -> dict[str, Any]:
    hq = s.hv if expand_qk else s.hk
    q = torch.nn.functional.normalize(
        _randn(1, tokens, hq, s.dk, dtype=torch.float32, device=device), dim=-1
    )
    k = torch.nn.functional.normalize(
        _randn(1, tokens, hq, s.dk, dtype=torch.float32, device=device), dim=-1
    )
    return {
        "q": q.to(torch.bfloat16),
        "k": k.to(torch.bfloat16),
        "v": _randn(1, tokens, s.hv, s.dv, dtype=torch.bfloat16, device=device),
        "g": torch.nn.functional.logsigmoid(torch.randn(1, tokens, s.hv, device=device)),
        "beta": torch.rand(1, tokens, s.hv, device=device).sigmoid(),
        "initial_state": _randn(1, s.hv, s.dv, s.dk, dtype=torch.float32, device=device, scale=0.1),
        "cu_seqlens": torch.tensor([0, tokens], device=device, dtype=torch.int32),
    }


def _measure_chunk_rule(
    probe: Probe,
    rule: Callable[..., Any],
    x: dict[str, torch.Tensor],
    long_cu_seqlens: bool = False,
    **extra: Any,
) -> dict[str, int]:
    """Measure one call of a chunked gated-delta rule (vLLM's or fla-core's) on ``x``."""

    def run() -> Any:
        cu = x["cu_seqlens"].long() if long_cu_seqlens else x["cu_seqlens"]
        return rule(
            q=x["q"],
            k=x["k"],
            v=x["v"],
            g=x["g"],
            beta=x["beta"],
            initial_state=x["initial_state"],
            output_final_state=True,
            cu_seqlens=cu,
            **extra,
        )

    return measure_call(probe, run)


def term_gdn_vllm(probe: Probe, s: GpuShape, tokens: int, device: torch.device) -> dict[str, int]:
    from vllm.third_party.flash_linear_attention.ops.chunk import chunk_gated_delta_rule

    x = gdn_inputs(s, tokens, device)
    return _measure_chunk_rule(probe, chunk_gated_delta_rule, x, use_qk_l2norm_in_kernel=False)


def term_gdn_fla060(probe: Probe, s: GpuShape, tokens: int, device: torch.device) -> dict[str, int]:
    from fla.ops.gated_delta_rule import chunk_gated_delta_rule

    # fla-core's chunk rule takes q/k with the value-head count: expand the key heads.
    x = gdn_inputs(s, tokens, device, expand_qk=True)
    return _measure_chunk_rule(probe, chunk_gated_delta_rule, x, long_cu_seqlens=True)


def term_gdn_core_path(
    probe: Probe, s: GpuShape, tokens: int, device: torch.device
) -> dict[str, int]:
    """Prefill half of vLLM's GDN ``_forward_core`` from the conv output to core_attn_out."""
    from vllm.third_party.flash_linear_attention.ops.chunk import chunk_gated_delta_rule
    from vllm.third_party.flash_linear_attention.ops.fused_gdn_prefill_post_conv import (
        fused_post_conv_prep,
    )

    qkv_dim = 2 * s.hk * s.dk + s.hv * s.dv
    pool_slots = 4
    conv_out = _randn(tokens, qkv_dim, dtype=torch.bfloat16, device=device)
    a = _randn(tokens, s.hv, dtype=torch.bfloat16, device=device)
    b = _randn(tokens, s.hv, dtype=torch.bfloat16, device=device)
    a_log = torch.log(torch.rand(s.hv, device=device) * 15 + 1)
    dt_bias = torch.ones(s.hv, device=device)
    ssm_state = _randn(pool_slots, s.hv, s.dv, s.dk, dtype=torch.float32, device=device, scale=0.1)
    idx = torch.tensor([1], device=device, dtype=torch.long)
    has_init = torch.tensor([True], device=device)
    cu = torch.tensor([0, tokens], device=device, dtype=torch.int32)
    core_attn_out = torch.zeros(tokens, s.hv, s.dv, device=device, dtype=torch.bfloat16)

    def run() -> None:
        q, k, v, g, beta = fused_post_conv_prep(
            conv_output=conv_out,
            a=a,
            b=b,
            A_log=a_log,
            dt_bias=dt_bias,
            num_k_heads=s.hk,
            head_k_dim=s.dk,
            head_v_dim=s.dv,
            apply_l2norm=True,
            output_g_exp=False,
        )
        init = ssm_state[idx]
        init[~has_init, ...] = 0
        o, last = chunk_gated_delta_rule(
            q=q.unsqueeze(0),
            k=k.unsqueeze(0),
            v=v.unsqueeze(0),
            g=g.unsqueeze(0),
            beta=beta.unsqueeze(0),
            initial_state=init,
            output_final_state=True,
            cu_seqlens=cu,
            use_qk_l2norm_in_kernel=False,
        )
        ssm_state[idx] = last.to(ssm_state.dtype)
        core_attn_out[:tokens] = o.squeeze(0)

    r = measure_call(probe, run)
    return r
