"""Analytical roofline step time: bytes over bandwidth vs FLOPs over FLOP/s, per step.

Per GPU (one TP rank), one engine step = target forward over all scheduled tokens, the
MTP draft layer run ``depth`` times for the decode requests, sampling, host overhead::

    t = max(bytes / (BW * bw_eff), flops / (F * flop_eff)) + t_allreduce + overhead

Bytes:
- weights touched: every dense weight once; routed experts: the expected number of
  distinct experts hit by T tokens with top-k of E, E * (1 - (1 - k/E)^T), per layer;
- KV read: each token attends over its own context (decode: its context + window;
  prefill chunk: computed + new), K and V, per attention layer;
- GDN state per request per GDN layer (state = Hv/tp * dv * dk * state_bytes):
  storeall reads 1 and writes W states; reconstruct reads S_0 twice (verify, commit)
  and writes 1; deferred reads 1 and writes 1; a prefill chunk reads 1 and writes 1.
FLOPs: 2 * active params per token * tokens, plus attention 4 * ctx * heads * head_dim
per token per layer, plus the GDN window math (S_0 q and S_0 k: 4 * W * dv * dk per
head per request).

Efficiencies default to measured H200 fractions: copy 4.25 TB/s of 4.8 (SPEC.md s3.1)
and bf16 GEMM 790 TFLOP/s of 989 (device/KINDS.md, 8192^3 product). The per-step host
overhead is 0 by default: this model is a floor. The calibrated model (cost/calibrated.py)
replaces it where measurements exist.
"""

from __future__ import annotations

from dataclasses import dataclass

from capsim.commit_modes import get_mode
from capsim.config import SpecDecodeConfig
from capsim.cost.base import BatchShape
from capsim.gpus import GpuSpec
from capsim.memory.weights import (
    attention_layer_params,
    expert_params,
    ffn_layer_params,
    gdn_layer_params,
    kv_heads_per_rank,
    padded_vocab,
    weight_breakdown_bytes,
)
from capsim.models import ModelSpec
from capsim.units import dtype_bytes

H200_COPY_EFF: float = 4.25e12 / 4.8e12  # SPEC.md s3.1 measured copy / datasheet
H200_GEMM_EFF: float = 790e12 / 989e12  # device/KINDS.md measured bf16 GEMM / datasheet


@dataclass(frozen=True, slots=True, kw_only=True)
class RooflineParams:
    bw_eff: float = H200_COPY_EFF
    flop_eff: float = H200_GEMM_EFF
    step_overhead_s: float = 0.0

    def __post_init__(self) -> None:
        if not 0 < self.bw_eff <= 1:
            raise ValueError(f"roofline.bw_eff={self.bw_eff} must be in (0, 1]")
        if not 0 < self.flop_eff <= 1:
            raise ValueError(f"roofline.flop_eff={self.flop_eff} must be in (0, 1]")
        if self.step_overhead_s < 0:
            raise ValueError(f"roofline.step_overhead_s={self.step_overhead_s} must be >= 0")


class RooflineStepTime:
    """StepTimeModel from first principles (see module docstring)."""

    def __init__(
        self,
        model: ModelSpec,
        gpu: GpuSpec,
        tp: int,
        spec: SpecDecodeConfig,
        *,
        params: RooflineParams | None = None,
        state_dtype: str | None = None,
        kv_dtype: str = "bfloat16",
    ) -> None:
        self.model, self.gpu, self.tp, self.spec = model, gpu, tp, spec
        self.params = params or RooflineParams()
        wb = dtype_bytes(model.weight_dtype)
        n_layers = model.num_attn_layers + model.num_gdn_layers
        ffn_dense, _ = ffn_layer_params(model, tp)
        vocab_rank = padded_vocab(model) // tp
        self._init_weight_bytes(wb, n_layers, ffn_dense, vocab_rank)
        active_ffn = (
            ffn_dense + model.num_experts_per_tok * expert_params(model, tp)
            if model.num_experts
            else ffn_dense
        )
        self._active_params_per_tok = (
            model.num_attn_layers * attention_layer_params(model, tp)
            + model.num_gdn_layers * gdn_layer_params(model, tp)
            + n_layers * active_ffn
            + vocab_rank * model.hidden_size
        )
        self._mtp_active_params = (
            attention_layer_params(model, tp) + active_ffn + vocab_rank * model.hidden_size
        )
        self._kv_bytes_per_tok = (
            kv_heads_per_rank(model, tp) * model.head_dim * 2 * dtype_bytes(kv_dtype)
        )
        self._attn_heads_rank = model.num_attention_heads // tp
        self._init_state_bytes(state_dtype or model.ssm_state_dtype)
        self._bw = gpu.hbm_bandwidth_bytes_per_s * self.params.bw_eff
        self._flops = gpu.dense_bf16_flop_per_s * self.params.flop_eff
        self._allreduce_bytes_per_tok = (
            2 * (n_layers + (1 if spec.depth else 0)) * model.hidden_size * wb if tp > 1 else 0
        )

    def _init_weight_bytes(self, wb: int, n_layers: int, ffn_dense: int, vocab_rank: int) -> None:
        """Bytes streamed per step: dense linears, one expert, the MTP layer, lm_head."""
        model, tp, spec = self.model, self.tp, self.spec
        self._dense_bytes = wb * (
            model.num_attn_layers * attention_layer_params(model, tp)
            + model.num_gdn_layers * gdn_layer_params(model, tp)
            + n_layers * ffn_dense
            + vocab_rank * model.hidden_size  # lm_head
        )
        self._expert_bytes = wb * expert_params(model, tp)
        if model.quantization != "none":
            # a quantized checkpoint streams its quantized linears at their format's bytes
            # (memory/weights.py: the same split the memory plan charges); lm_head stays bf16
            bd = weight_breakdown_bytes(model, tp, with_mtp=False)
            self._dense_bytes = (
                bd["attention"]
                + bd["gdn"]
                + bd["ffn_shared_and_router"]
                + wb * vocab_rank * model.hidden_size
            )
            if model.num_experts:
                self._expert_bytes = bd["ffn_routed_experts"] / (n_layers * model.num_experts)
        self._moe_layers = n_layers if model.num_experts else 0
        self._mtp_bytes = (
            wb * (attention_layer_params(model, tp) + ffn_dense + 2 * model.hidden_size**2 // tp)
            if spec.depth
            else 0
        )
        self._mtp_moe = 1 if (spec.depth and model.num_experts) else 0
        self._lm_head_bytes = wb * vocab_rank * model.hidden_size

    def _init_state_bytes(self, state_dtype: str) -> None:
        """GDN state bytes per request and layer, what a decode / prefill moves, and the
        verify window's state FLOPs."""
        model, tp = self.model, self.tp
        self._state_bytes = (
            (model.linear_num_value_heads // tp)
            * model.linear_value_head_dim
            * model.linear_key_head_dim
            * dtype_bytes(state_dtype)
        )
        w = self.spec.window_tok
        reads, writes = get_mode(self.spec.commit).decode_state_rw(w)
        self._decode_state_bytes = model.num_gdn_layers * self._state_bytes * (reads + writes)
        self._prefill_state_bytes = model.num_gdn_layers * self._state_bytes * 2
        self._gdn_window_flops = (
            model.num_gdn_layers
            * (model.linear_num_value_heads // tp)
            * 4
            * w
            * model.linear_value_head_dim
            * model.linear_key_head_dim
        )

    def _distinct_experts(self, num_tok: int) -> float:
        m = self.model
        if not m.num_experts or num_tok <= 0:
            return 0.0
        return m.num_experts * (1.0 - (1.0 - m.num_experts_per_tok / m.num_experts) ** num_tok)

    def step_time_s(self, shape: BatchShape) -> float:
        m = self.model
        t_tok = shape.num_tok
        if t_tok == 0:
            return self.params.step_overhead_s
        w = shape.query_tok_per_decode
        n_dec = shape.num_decode_req
        bytes_ = self._dense_bytes + self._moe_layers * self._distinct_experts(t_tok) * (
            self._expert_bytes
        )
        flops = 2.0 * self._active_params_per_tok * t_tok
        # attention: KV read and score/value FLOPs
        kv_layers = m.num_attn_layers
        dec_ctx = float(shape.decode_context_tok.sum()) + n_dec * w
        pre_ctx_tok = shape.prefill_computed_tok + shape.prefill_new_tok
        bytes_ += kv_layers * self._kv_bytes_per_tok * (dec_ctx + float(pre_ctx_tok.sum()))
        attn_tok_ctx = dec_ctx * w + float(
            (shape.prefill_new_tok * (shape.prefill_computed_tok + shape.prefill_new_tok / 2)).sum()
        )
        flops += kv_layers * 4.0 * self._attn_heads_rank * m.head_dim * attn_tok_ctx
        # GDN recurrent state traffic and window math
        bytes_ += n_dec * self._decode_state_bytes + shape.num_prefill_req * (
            self._prefill_state_bytes
        )
        flops += n_dec * self._gdn_window_flops
        # MTP drafting: depth passes of one decoder layer + lm_head over the decode requests
        if self.spec.depth and n_dec:
            d = self.spec.depth
            bytes_ += d * (
                self._mtp_bytes + self._mtp_moe * self._distinct_experts(n_dec) * self._expert_bytes
            )
            flops += d * 2.0 * self._mtp_active_params * n_dec
        t = max(bytes_ / self._bw, flops / self._flops)
        if self._allreduce_bytes_per_tok:
            ring = 2.0 * (self.tp - 1) / self.tp
            t += ring * self._allreduce_bytes_per_tok * t_tok / self.gpu.interconnect_bytes_per_s
        return t + self.params.step_overhead_s

    def describe(self) -> dict[str, object]:
        return {
            "kind": "roofline",
            "gpu": self.gpu.name,
            "projection": False,
            "bw_eff": self.params.bw_eff,
            "flop_eff": self.params.flop_eff,
            "step_overhead_s": self.params.step_overhead_s,
            "note": "analytical floor; efficiencies from H200 copy/GEMM measurements",
        }
