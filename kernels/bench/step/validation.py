"""Whole decode/mixed steps with torch operators, one CUDA graph each (issue 6's
held-back check of the additive step model; the vLLM-kernel steps are whole_step.py)."""

from __future__ import annotations

import sys
import time

import torch
import torch.nn.functional as F

from capsim.calibration.shapes import StepShapes

from . import model_ops as ops
from .grids import VAL_COLUMNS  # noqa: F401
from .measure import Writer, _free, time_calls


class StepStack:
    """All layers of one model with their own weights, for whole-step validation runs."""

    def __init__(self, shp: StepShapes, dev: str, gen, max_kv_tok: int) -> None:
        self.shp, self.dev = shp, dev
        h = shp.hidden

        def w(n, k):
            return ops._randn((n, k), dev, gen, 0.02)

        self.layers = []
        total = shp.num_gdn_layers + shp.num_attn_layers
        every = total // max(shp.num_attn_layers, 1)
        for i in range(total):
            is_attn = (i + 1) % every == 0 and shp.num_attn_layers > 0
            layer = {"attn": is_attn, "norm": torch.ones(h, device=dev, dtype=torch.bfloat16)}
            if is_attn:
                layer["qkv"] = w(shp.linear("attn_qkv").n, h)
                layer["o"] = w(h, shp.linear("attn_o").k)
                layer["k_cache"] = torch.empty(
                    (max_kv_tok, shp.attn_hkv, shp.head_dim), device=dev, dtype=torch.bfloat16
                ).normal_(generator=gen)
                layer["v_cache"] = torch.empty_like(layer["k_cache"]).normal_(generator=gen)
            else:
                layer["qkvz"] = w(shp.linear("gdn_in_qkvz").n, h)
                layer["ba"] = w(shp.linear("gdn_in_ba").n, h)
                layer["out"] = w(h, shp.linear("gdn_out").k)
                layer["conv"] = ops._randn((shp.conv_dim, 1, shp.conv_kernel), dev, gen)
                layer["gnorm"] = torch.ones(
                    shp.gdn_hv * shp.gdn_dv, device=dev, dtype=torch.bfloat16
                )
            layer["moe"] = ops.moe_weights(
                h, shp.num_experts, shp.moe_inter, shp.shared_inter, dev, gen
            )
            self.layers.append(layer)
        self.lm_head = w(shp.vocab_local, h)
        self.gen = gen

    def forward_fn(self, batch: int, q_tok: int, ctx: int, prefill_tok: int):
        """The step as one callable: GEMMs at the step's tokens, attention per part."""
        shp, dev, gen = self.shp, self.dev, self.gen
        m = batch * q_tok + prefill_tok
        h = shp.hidden
        x = ops._randn((m, h), dev, gen)
        group = shp.attn_hq // shp.attn_hkv
        hd = shp.head_dim
        pre_q = ops._randn((1, shp.attn_hq, prefill_tok, hd), dev, gen) if prefill_tok else None
        pre_kv = ops._randn((1, shp.attn_hq, prefill_tok, hd), dev, gen) if prefill_tok else None
        dec_q = ops._randn((batch, shp.attn_hkv, q_tok * group, hd), dev, gen) if batch else None
        n_logits = batch * q_tok + (1 if prefill_tok else 0)

        def run():
            y = x
            for layer in self.layers:
                t = F.rms_norm(y, (h,), layer["norm"], 1e-6)
                if layer["attn"]:
                    qkv = F.linear(t, layer["qkv"])
                    if batch:
                        tok = batch * ctx
                        k = layer["k_cache"][:tok].view(batch, ctx, shp.attn_hkv, hd)
                        v = layer["v_cache"][:tok].view(batch, ctx, shp.attn_hkv, hd)
                        ops.attn_split_kv(
                            dec_q,
                            k.transpose(1, 2),
                            v.transpose(1, 2),
                            ops.num_kv_splits(batch, shp.attn_hkv, dec_q.shape[2], ctx),
                        )
                    if prefill_tok:
                        F.scaled_dot_product_attention(pre_q, pre_kv, pre_kv, is_causal=True)
                    # NOTE: a finite stand-in for the attention output. Runs before
                    # 2026-11-29 16:15 UTC used an uninitialised buffer here, which can hold
                    # NaN and collapse the MoE routing of the following layers.
                    a = qkv[:, : shp.linear("attn_o").k].contiguous()
                    y = y + F.linear(a, layer["o"])
                else:
                    F.linear(t, layer["ba"])
                    qkvz = F.linear(t, layer["qkvz"])
                    c = qkvz[:, : shp.conv_dim].t().unsqueeze(0)
                    c = F.pad(c, (shp.conv_kernel - 1, 0))
                    F.silu(F.conv1d(c, layer["conv"], groups=shp.conv_dim))
                    core = qkvz[:, shp.conv_dim : shp.conv_dim + shp.gdn_hv * shp.gdn_dv]
                    o = F.rms_norm(core.contiguous(), (core.shape[1],), layer["gnorm"], 1e-6)
                    y = y + F.linear(o, layer["out"])
                t = F.rms_norm(y, (h,), layer["norm"], 1e-6)
                y = y + ops.moe_apply(layer["moe"], t, shp.topk)
            t = F.rms_norm(y[-n_logits:], (h,), self.layers[0]["norm"], 1e-6)
            self.last_hidden = y
            return torch.argmax(F.linear(t, self.lm_head).float(), dim=-1)

        return run


def measure_validation(shp, grid, out: Writer, dev, gen, replays, deadline) -> None:
    points = grid["val"]
    max_kv = max(b * c for b, _, c, _ in points) or 1
    try:
        stack = StepStack(shp, dev, gen, max_kv)
    except torch.OutOfMemoryError as exc:
        print(f"validation stack skipped: {exc}", file=sys.stderr)
        return
    for batch, q, ctx, pre in points:
        if time.monotonic() > deadline:
            break
        try:
            how, pct = time_calls([stack.forward_fn(batch, q, ctx, pre)], replays)
        except Exception as exc:
            print(f"FAILED validation {batch, q, ctx, pre}: {exc}"[:400], file=sys.stderr)
            continue
        finite = bool(torch.isfinite(stack.last_hidden).all())
        out.write(
            {
                "finite": finite,
                "kind": "forward_no_gdn",
                "tree": "chain",
                "model": shp.model,
                "tp": shp.tp,
                "num_decode_req": batch,
                "q_tok": q,
                "ctx_tok": ctx,
                "prefill_tok": pre,
                "timing": how,
                "p20_us": f"{pct[0]:.3f}",
                "p50_us": f"{pct[1]:.3f}",
                "p80_us": f"{pct[2]:.3f}",
            }
        )
        _free()
    del stack
    _free()
