"""vLLM 0.33's own GDN store-all op (``fused_sigmoid_gating_delta_rule_update``) and its
plain decode path, loaded through the one vLLM shim (``kernels/bench/vllm_shim.py``) from
the files extracted out of the vLLM wheel (``.vllmwheel/src``, git-ignored, never
committed): ``python3 -m capsim_kernels.bench.vllm_shim --extract vllm-0.33.0-*.whl``.

The kernel runs unchanged (vLLM's launch configuration: BV = 32, 4 warps, 3 stages).
``fused_sigmoid_gating_delta_rule_update`` is the op vLLM's Qwen3.5 GDN layer calls for
speculative decoding (``qwen_gdn_linear_attn.py``, "Process the multi-query part"): per
request it reads the state of slot ``ssm_state_indices[n, num_accepted_tokens[n] - 1]``
and writes the state after every window token into ``ssm_state_indices[n, t]``
(store-all), computing g = -exp(A_log) softplus(a + dt_bias) and beta = sigmoid(b) in the
kernel. Without speculation (T = 1, a decode-only batch) the layer runs
``fused_recurrent_gated_delta_rule_packed_decode`` instead (vLLM's plain GDN decode):
``load_packed_decode`` / ``make_decode_call``.
"""

from __future__ import annotations

import importlib
from pathlib import Path

from ..vllm_shim import DEFAULT_SRC, FLA, VLLM_VERSION, file_sha256, install

OP_FILE = FLA + "fused_sigmoid_gating.py"

__all__ = ["DEFAULT_SRC", "VLLM_VERSION", "gate_inputs", "load_fused_sigmoid_gating",
           "load_packed_decode", "make_call", "make_decode_call", "op_file_sha256"]  # fmt: skip


def op_file_sha256(src: Path = DEFAULT_SRC) -> str:
    return file_sha256(OP_FILE, src)


def load_fused_sigmoid_gating(src: Path = DEFAULT_SRC):
    """vLLM's ``fused_sigmoid_gating_delta_rule_update`` from the extracted wheel files."""
    if not (Path(src) / OP_FILE).is_file():
        raise FileNotFoundError(
            f"{Path(src) / OP_FILE}: extract the vllm=={VLLM_VERSION} wheel first "
            "(python3 -m capsim_kernels.bench.vllm_shim --extract WHEEL)"
        )
    install(src)
    mod = importlib.import_module(OP_FILE[: -len(".py")].replace("/", "."))
    return mod.fused_sigmoid_gating_delta_rule_update


def gate_inputs(log_gate, beta):
    """(A_log, a, b, dt_bias) that make vLLM's kernel compute ``log_gate`` and ``beta``:
    A_log = 0, dt_bias = 0, a = softplus^-1(-log_gate), b = logit(beta) (fp32), and the
    gates the kernel actually sees, in float64 (g = -softplus(a), beta = sigmoid(b)),
    for the float64 reference. Inputs [B, W, Hv] fp32."""
    import torch

    hv = log_gate.shape[-1]
    y = (-log_gate.double()).clamp_min(1e-30)
    a = torch.log(torch.expm1(y)).float()
    b = torch.logit(beta.double()).float()
    g_eff = -torch.nn.functional.softplus(a.double())
    beta_eff = torch.sigmoid(b.double())
    a_log = torch.zeros(hv, dtype=torch.float32, device=log_gate.device)
    dt_bias = torch.zeros(hv, dtype=torch.float32, device=log_gate.device)
    return (a_log, a, b, dt_bias), (g_eff, beta_eff)


def make_call(op, q, k, v, gates, state_pool, slots, num_accepted):
    """A closure running vLLM's op as its GDN layer does for a speculative batch.

    q, k [B, W, Hk, dk], v [B, W, Hv, dv] bf16; state_pool [num_slots, Hv, dv, dk]
    (vLLM's layout); slots [B, W] int32 (> 0: slot 0 is vLLM's null block); num_accepted
    [B] int32 in [1, W]: the initial state is slots[n, num_accepted[n] - 1]. The flattened
    (varlen) token layout and cu_seqlens are built once, outside the closure.
    """
    import torch

    bsz, w, hk, dk = q.shape
    a_log, a, b, dt_bias = gates
    qf = q.reshape(1, bsz * w, hk, dk)
    kf = k.reshape(1, bsz * w, hk, dk)
    vf = v.reshape(1, bsz * w, *v.shape[2:])
    af = a.reshape(bsz * w, -1).contiguous()
    bf = b.reshape(bsz * w, -1).contiguous()
    cu = torch.arange(0, (bsz + 1) * w, w, dtype=torch.int32, device=q.device)

    def call():
        return op(
            A_log=a_log, a=af, b=bf, dt_bias=dt_bias, q=qf, k=kf, v=vf,
            initial_state=state_pool, inplace_final_state=True, cu_seqlens=cu,
            ssm_state_indices=slots, num_accepted_tokens=num_accepted,
            use_qk_l2norm_in_kernel=True,
        )  # fmt: skip

    return call


def load_packed_decode(src: Path = DEFAULT_SRC):
    """vLLM's ``fused_recurrent_gated_delta_rule_packed_decode`` (fused_recurrent.py): what
    the Qwen3.5 GDN layer runs for a decode-only batch without speculation
    (``_forward_core_decode_non_spec``, ``VLLM_ENABLE_FLA_PACKED_RECURRENT_DECODE=1`` by
    default)."""
    install(src)
    mod = importlib.import_module((FLA + "fused_recurrent").replace("/", "."))
    return mod.fused_recurrent_gated_delta_rule_packed_decode


def make_decode_call(op, q, k, v, gates, state_pool, slots):
    """vLLM's plain GDN decode (T = 1, no speculation) as the layer calls it: packed
    post-conv ``mixed_qkv`` [B, 2 Hk dk + Hv dv] (q, k, v per token), a, b [B, Hv], the
    state read from and written back to ``slots[n]`` (1-D, > 0), ``out`` [B, 1, Hv, dv].
    q, k [B, 1, Hk, dk], v [B, 1, Hv, dv] bf16."""
    import torch

    bsz, w, _hk, dk = q.shape
    if w != 1:
        raise ValueError(f"make_decode_call: window T={w} (the plain decode path has T=1)")
    a_log, a, b, dt_bias = gates
    mixed = torch.cat([q.reshape(bsz, -1), k.reshape(bsz, -1), v.reshape(bsz, -1)], 1)
    af, bf = a.reshape(bsz, -1).contiguous(), b.reshape(bsz, -1).contiguous()
    out = torch.empty((bsz, 1, *v.shape[2:]), dtype=v.dtype, device=v.device)

    def call():
        op(
            mixed_qkv=mixed, a=af, b=bf, A_log=a_log, dt_bias=dt_bias, scale=dk**-0.5,
            initial_state=state_pool, out=out, ssm_state_indices=slots,
            use_qk_l2norm_in_kernel=True,
        )  # fmt: skip
        return out, state_pool

    return call
