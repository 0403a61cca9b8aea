"""Per-GPU operator shapes of one decoder step, derived from a ModelSpec and a TP size.

One source of truth for both sides of the calibration: ``kernels/bench/step/model_step.py``
measures exactly these shapes on a GPU, and ``capsim.cost.calibrated`` prices a step by
summing the same operators. Tensor parallelism follows vLLM's sharding of Qwen3-Next /
Qwen3.5 (VLLM.md s7): attention heads, GDN heads, expert FFN widths (TP, not EP) and the
vocabulary are split ``tp`` ways; KV heads are replicated when ``tp`` exceeds them.

Linear layers of one step (``n`` output features, ``k`` input features, per GPU)::

    gdn_in_qkvz  k=H          n=(2*Hk*dk + 2*Hv*dv)/tp   q, k, v and the output gate z
    gdn_in_ba    k=H          n=2*Hv/tp                  beta and the decay input a
    gdn_out      k=Hv*dv/tp   n=H
    attn_qkv     k=H          n=(Hq*hd*(1+gate) + 2*Hkv*hd)/tp   (KV replicated if tp>Hkv)
    attn_o       k=Hq*hd/tp   n=H
    lm_head      k=H          n=vocab/tp
    mtp_fc       k=2H         n=H                        MTP input merge (replicated)
"""

from __future__ import annotations

from dataclasses import dataclass

from capsim.models import ModelSpec
from capsim.units import dtype_bytes


def _split(model: ModelSpec, name: str, value: int, tp: int) -> int:
    if value % tp:
        raise ValueError(f"model {model.name!r}: {name}={value} is not divisible by tp={tp}")
    return value // tp


@dataclass(frozen=True, slots=True, kw_only=True)
class LinearShape:
    """One GEMM ``y[m, n] = x[m, k] @ w[n, k]^T`` with bf16 weights."""

    name: str
    n: int
    k: int


@dataclass(frozen=True, slots=True, kw_only=True)
class StepShapes:
    """Everything the measured step-time model needs to know about a (model, tp) pair."""

    model: str
    tp: int
    hidden: int
    num_gdn_layers: int
    num_attn_layers: int
    num_mtp_layers: int
    gdn_hv: int
    gdn_hk: int
    gdn_dk: int
    gdn_dv: int
    conv_dim: int
    conv_kernel: int
    attn_hq: int
    attn_hkv: int
    head_dim: int
    kv_bytes_per_tok: int
    num_experts: int
    topk: int
    moe_inter: int
    shared_inter: int
    vocab_local: int
    ssm_state_dtype: str
    linears: tuple[LinearShape, ...]

    def linear(self, name: str) -> LinearShape:
        for lin in self.linears:
            if lin.name == name:
                return lin
        raise ValueError(f"{self.model} tp{self.tp}: no linear named {name!r}")

    @property
    def key(self) -> str:
        """Table key of this (model, tp): e.g. ``qwen3.5-35b-a3b/tp1``."""
        return f"{self.model}/tp{self.tp}"

    @property
    def attn_key(self) -> str:
        """Attention tables depend only on heads and head dim."""
        return f"hq{self.attn_hq}_hkv{self.attn_hkv}_d{self.head_dim}"

    @property
    def moe_key(self) -> str:
        return (
            f"e{self.num_experts}_k{self.topk}_i{self.moe_inter}"
            f"_s{self.shared_inter}_h{self.hidden}"
        )

    @property
    def gdn_key(self) -> str:
        return f"hv{self.gdn_hv}_hk{self.gdn_hk}_dk{self.gdn_dk}_dv{self.gdn_dv}"


def step_shapes(model: ModelSpec, tp: int) -> StepShapes:
    """Per-GPU shapes of ``model`` at tensor-parallel size ``tp``."""
    if not isinstance(tp, int) or tp < 1:
        raise ValueError(f"tp={tp!r} must be an int >= 1")
    h = model.hidden_size
    hq = _split(model, "num_attention_heads", model.num_attention_heads, tp)
    # vLLM replicates KV heads when tp exceeds them: one head per GPU
    hkv = 1 if tp >= model.num_kv_heads else _split(model, "num_kv_heads", model.num_kv_heads, tp)
    hv = _split(model, "linear_num_value_heads", model.linear_num_value_heads, tp)
    hk = _split(model, "linear_num_key_heads", model.linear_num_key_heads, tp)
    dk, dv, hd = model.linear_key_head_dim, model.linear_value_head_dim, model.head_dim
    if model.num_experts == 0:
        raise ValueError(f"model {model.name!r}: num_experts=0 (dense FFN) is not calibrated")
    inter = _split(model, "moe_intermediate_size", model.moe_intermediate_size, tp)
    shared = (
        _split(model, "shared_expert_intermediate_size", model.shared_expert_intermediate_size, tp)
        if model.shared_expert_intermediate_size
        else 0
    )
    vocab = -(-model.vocab_size // tp)
    gate = 2 if model.attn_output_gate else 1
    kv_dtype = dtype_bytes(model.weight_dtype)
    linears = (
        LinearShape(name="gdn_in_qkvz", n=2 * hk * dk + 2 * hv * dv, k=h),
        LinearShape(name="gdn_in_ba", n=2 * hv, k=h),
        LinearShape(name="gdn_out", n=h, k=hv * dv),
        LinearShape(name="attn_qkv", n=hq * hd * gate + 2 * hkv * hd, k=h),
        LinearShape(name="attn_o", n=h, k=hq * hd),
        LinearShape(name="lm_head", n=vocab, k=h),
        LinearShape(name="mtp_fc", n=h, k=2 * h),
    )
    return StepShapes(
        model=model.name,
        tp=tp,
        hidden=h,
        num_gdn_layers=model.num_gdn_layers,
        num_attn_layers=model.num_attn_layers,
        num_mtp_layers=model.num_mtp_layers,
        gdn_hv=hv,
        gdn_hk=hk,
        gdn_dk=dk,
        gdn_dv=dv,
        conv_dim=(2 * hk * dk + hv * dv),
        conv_kernel=model.linear_conv_kernel_dim,
        attn_hq=hq,
        attn_hkv=hkv,
        head_dim=hd,
        kv_bytes_per_tok=2 * hkv * hd * kv_dtype,
        num_experts=model.num_experts,
        topk=model.num_experts_per_tok,
        moe_inter=inter,
        shared_inter=shared,
        vocab_local=vocab,
        ssm_state_dtype=model.ssm_state_dtype,
        linears=linears,
    )
