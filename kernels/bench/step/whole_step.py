"""Whole engine steps of a Qwen3.5 MoE hybrid on vLLM 0.33's kernels, one CUDA graph each.

One step = the target forward over every scheduled token, the GDN verify/commit kernel,
sampling, and the MTP draft passes, in the layer order of the model (``StepShapes``):

    per GDN layer   rms_norm, in_proj_qkvz, in_proj_ba, conv (vLLM causal_conv1d_update
                    for verify windows, causal_conv1d_fn for prefill chunks), GDN kernel
                    (chain: vLLM fused_sigmoid_gating store-all; tree: capsim TreeWY
                    verify + commit; prefill: vLLM fla chunk_gated_delta_rule), gated
                    rms_norm (torch), out_proj, residual
    per attn layer  rms_norm, qkv_proj, vLLM unified_attention (paged KV, decode windows
                    and prefill chunks in one call), o_proj, residual
    every layer     rms_norm, MoE (vLLM fused_experts_impl + stand-ins, shared expert)
    logits          final rms_norm, lm_head and argmax on one row per decode window token
                    and per prefill chunk
    drafts          depth MTP passes: pass 1 over all tokens (fc, attention layer with
                    its own KV cache, MoE), logits on one row per request; pass d >= 2
                    over one row per draft node of depth d (q = 1 attention)

Weights are random bf16 (40 layers, each its own), routing from random router weights.
RoPE, q/k norms and the attention output gate are left out (elementwise, small).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F

from .. import vllm_shim as vl
from . import model_ops as ops
from . import vllm_ops as vops


@dataclass(frozen=True)
class StepPoint:
    """One measured composition: ``num_decode_req`` requests verifying ``tree`` windows
    at ``ctx_tok`` cached tokens each, plus prefill chunks (new, cached) tokens."""

    num_decode_req: int
    ctx_tok: int
    tree: tuple[int, ...] | None = None  # None: chain of depth 3
    prefill: tuple[tuple[int, int], ...] = ()
    depth: int = 3

    @property
    def window_tok(self) -> int:
        if self.tree is None:
            return self.depth + 1
        total, level = 1, 1
        for w in self.tree:
            level *= w
            total += level
        return total

    @property
    def tree_label(self) -> str:
        return "chain" if self.tree is None else ",".join(map(str, self.tree))

    @property
    def commit(self) -> str:
        return "storeall" if self.tree is None else "reconstruct"


class VllmStepStack:
    def __init__(self, shp, dev: str, gen, max_kv_blocks: int, max_state_slots: int) -> None:
        self.shp, self.dev, self.gen = shp, dev, gen
        self.fm = vl.load_fused_moe()
        self.cc = vl.load_causal_conv1d()
        self.chunk = vl.load_chunk_gated_delta_rule()
        self.storeall = vl.load_fused_sigmoid_gating()
        self.block = vops.hybrid_block_size(shp)
        self.attn = vops.Attn(shp.attn_hq, shp.attn_hkv, shp.head_dim, dev)
        h = shp.hidden

        def w(n, k):
            return ops._randn((n, k), dev, gen, 0.02)

        nblocks = 2 + max_kv_blocks
        # One GDN state pool and one conv state pool shared by all GDN layers (memory: a
        # pool per layer would not fit next to the weights); every layer still reads and
        # writes its requests' slots, and the pools are far larger than L2.
        self.ssm = (
            torch.randn(
                (max_state_slots, shp.gdn_hv, shp.gdn_dv, shp.gdn_dk), device=dev, generator=gen
            )
            * 0.01
        )
        self.conv_state = ops._randn(
            (max_state_slots, shp.conv_dim, shp.conv_kernel - 1 + 40), dev, gen
        )
        total = shp.num_gdn_layers + shp.num_attn_layers
        every = total // max(shp.num_attn_layers, 1)
        self.layers = []
        for i in range(total + 1):  # the last one is the MTP layer
            is_attn = i == total or (i + 1) % every == 0
            layer = {"attn": is_attn, "norm": torch.ones(h, device=dev, dtype=torch.bfloat16)}
            if is_attn:
                layer["qkv"] = w(shp.linear("attn_qkv").n, h)
                layer["o"] = w(h, shp.linear("attn_o").k)
                layer["kv"] = vops.kv_cache(
                    nblocks, self.block, shp.attn_hkv, shp.head_dim, dev, gen
                )
            else:
                layer["qkvz"] = w(shp.linear("gdn_in_qkvz").n, h)
                layer["ba"] = w(shp.linear("gdn_in_ba").n, h)
                layer["out"] = w(h, shp.linear("gdn_out").k)
                layer["conv_w"] = ops._randn((shp.conv_dim, shp.conv_kernel), dev, gen)
                layer["conv_state"] = self.conv_state
                layer["ssm"] = self.ssm
                layer["gnorm"] = torch.ones(
                    shp.gdn_hv * shp.gdn_dv, device=dev, dtype=torch.bfloat16
                )
                layer["A_log"] = torch.zeros(shp.gdn_hv, device=dev)
                layer["dt_bias"] = torch.zeros(shp.gdn_hv, device=dev)
            layer["moe"] = vops.moe_weights_vllm(
                h, shp.num_experts, shp.moe_inter, shp.shared_inter, dev, gen
            )
            self.layers.append(layer)
        self.mtp = self.layers.pop()
        self.mtp["fc"] = w(h, 2 * h)
        self.lm_head = w(shp.vocab_local, h)
        self.final_norm = torch.ones(h, device=dev, dtype=torch.bfloat16)
        self.max_state_slots = max_state_slots

    # -------------------------------------------------------------- building blocks
    def _attention(self, layer, x, meta):
        shp = self.shp
        cu, used, table, max_q, max_k = meta
        qkv = F.linear(x, layer["qkv"])
        q = qkv[:, : shp.attn_hq * shp.head_dim].reshape(-1, shp.attn_hq, shp.head_dim)
        q = q.contiguous()
        out = torch.empty_like(q)
        k_cache, v_cache = layer["kv"]
        self.attn(q, k_cache, v_cache, out, cu, max_q, used, max_k, table)
        return F.linear(out.reshape(x.shape[0], -1), layer["o"])

    def _gdn(self, layer, x, g):
        shp = self.shp
        hk, hv, dk, dv = shp.gdn_hk, shp.gdn_hv, shp.gdn_dk, shp.gdn_dv
        ba = F.linear(x, layer["ba"])
        qkvz = F.linear(x, layer["qkvz"])
        mixed = qkvz[:, : shp.conv_dim]
        z = qkvz[:, shp.conv_dim :]
        n_dec = g["n_dec_tok"]
        outs = []
        if n_dec:
            conv = self.cc.causal_conv1d_update(
                mixed[:n_dec].contiguous(), layer["conv_state"], layer["conv_w"], None, "silu",
                conv_state_indices=g["conv_idx"], num_accepted_tokens=g["acc"],
                query_start_loc=g["dec_cu"], max_query_len=g["w"],
            )  # fmt: skip
            q = conv[:, : hk * dk].contiguous().reshape(1, n_dec, hk, dk)
            k = conv[:, hk * dk : 2 * hk * dk].contiguous().reshape(1, n_dec, hk, dk)
            v = conv[:, 2 * hk * dk :].contiguous().reshape(1, n_dec, hv, dv)
            b, a = ba[:n_dec, :hv], ba[:n_dec, hv:]
            if g["tree"] is None:
                o, _ = self.storeall(
                    A_log=layer["A_log"], a=a.float().contiguous(), b=b.float().contiguous(),
                    dt_bias=layer["dt_bias"], q=q, k=k, v=v, initial_state=layer["ssm"],
                    inplace_final_state=True, cu_seqlens=g["dec_cu"],
                    ssm_state_indices=g["slots"], num_accepted_tokens=g["acc"],
                    use_qk_l2norm_in_kernel=True,
                )  # fmt: skip
                outs.append(o.reshape(n_dec, hv * dv))
            else:
                from ...gdn_verify.treewy import treewy_commit, treewy_verify

                r, w = g["r"], g["w"]
                lg = F.logsigmoid(a.float()).reshape(r, w, hv)
                be = torch.sigmoid(b.float()).reshape(r, w, hv)
                qq = F.normalize(q.float(), dim=-1).to(q.dtype).reshape(r, w, hk, dk)
                kk = F.normalize(k.float(), dim=-1).to(k.dtype).reshape(r, w, hk, dk)
                vv = v.reshape(r, w, hv, dv)
                o, vt = treewy_verify(qq, kk, vv, lg, be, layer["ssm"], g["slot0"], g["parent"])
                treewy_commit(layer["ssm"], g["slot0"], kk, vt, lg, g["parent"], g["accepted"])
                outs.append(o.reshape(n_dec, hv * dv))
        n_pre = x.shape[0] - n_dec
        if n_pre:
            xt = mixed[n_dec:].t()
            conv = self.cc.causal_conv1d_fn(
                xt, layer["conv_w"], None, conv_states=layer["conv_state"],
                query_start_loc=g["pre_cu"], cache_indices=g["pre_idx"],
                has_initial_state=g["pre_init"], activation="silu", metadata=g["conv_meta"],
            ).t()  # fmt: skip
            q = F.normalize(conv[:, : hk * dk].float().reshape(1, n_pre, hk, dk), dim=-1)
            k = F.normalize(
                conv[:, hk * dk : 2 * hk * dk].float().reshape(1, n_pre, hk, dk), dim=-1
            )
            v = conv[:, 2 * hk * dk :].reshape(1, n_pre, hv, dv)
            b, a = ba[n_dec:, :hv], ba[n_dec:, hv:]
            init = layer["ssm"].index_select(0, g["pre_idx"])
            o, _ = self.chunk(
                q=q.to(v.dtype), k=k.to(v.dtype), v=v.contiguous(),
                g=F.logsigmoid(a.float()).unsqueeze(0), beta=torch.sigmoid(b.float()).unsqueeze(0),
                initial_state=init, output_final_state=True, cu_seqlens=g["pre_cu"],
                use_qk_l2norm_in_kernel=False,
            )  # fmt: skip
            outs.append(o.reshape(n_pre, hv * dv))
        core = outs[0] if len(outs) == 1 else torch.cat(outs, 0)
        normed = F.rms_norm(core, (core.shape[1],), layer["gnorm"], 1e-6) * F.silu(z)
        return F.linear(normed, layer["out"])

    def _layer(self, layer, y, g, meta):
        h = self.shp.hidden
        t = F.rms_norm(y, (h,), layer["norm"], 1e-6)
        y = y + (self._attention(layer, t, meta) if layer["attn"] else self._gdn(layer, t, g))
        t = F.rms_norm(y, (h,), layer["norm"], 1e-6)
        return y + vops.moe_apply_vllm(self.fm, layer["moe"], t, self.shp.topk)

    def _logits(self, y):
        t = F.rms_norm(y, (self.shp.hidden,), self.final_norm, 1e-6)
        return torch.argmax(F.linear(t, self.lm_head).float(), dim=-1)

    # -------------------------------------------------------------- one step
    def _gdn_inputs(self, pt: StepPoint, pre: list, i32: dict) -> dict:
        """The GDN layers' per-step inputs: decode windows (store-all slots for a chain,
        parent / commit slots for a tree) and prefill chunks (cu_seqlens, state slots,
        conv metadata)."""
        r, w = pt.num_decode_req, pt.window_tok
        n_dec = r * w
        dev = self.dev
        g = {"n_dec_tok": n_dec, "w": w, "r": r, "tree": pt.tree}
        if r:
            g["dec_cu"] = torch.arange(0, (r + 1) * w, w, **i32)
            g["acc"] = torch.ones(r, **i32)
            g["conv_idx"] = torch.arange(1, r + 1, **i32)
            if pt.tree is None:
                g["slots"] = torch.arange(1, n_dec + 1, **i32).view(r, w)
            else:
                from ...gdn_verify.tree import parent_from_widths

                g["parent"] = torch.tensor(parent_from_widths(pt.tree), **i32)
                g["slot0"] = torch.arange(1, r + 1, **i32)
                g["accepted"] = torch.full((r,), w - 1, **i32)
        if pre:
            cu_p = [0]
            for n, _ in pre:
                cu_p.append(cu_p[-1] + n)
            g["pre_cu"] = torch.tensor(cu_p, **i32)
            g["pre_idx"] = torch.arange(r + 1, r + 1 + len(pre), **i32)
            g["pre_init"] = torch.tensor([c > 0 for _, c in pre], device=dev)
            g["conv_meta"] = vops.ConvMeta([n for n, _ in pre], dev)
        return g

    @staticmethod
    def _draft_passes(pt: StepPoint, n_req: int, used, table, max_ctx: int, i32: dict) -> list:  # type: ignore[no-untyped-def]
        """Draft passes >= 2: one q=1 row per draft node of that depth, over its request's
        KV blocks (the target's block table, one more key per depth)."""
        widths = pt.tree if pt.tree is not None else (1,) * pt.depth
        passes = []
        level = 1
        for d in range(1, pt.depth):
            level *= widths[d - 1]
            rows = n_req * level
            cu_d = torch.arange(rows + 1, **i32)
            used_d = (used + d).repeat_interleave(level)
            table_d = table.repeat_interleave(level, 0)
            passes.append((rows, (cu_d, used_d, table_d, 1, max_ctx + d)))
        return passes

    def step_fn(self, pt: StepPoint):
        shp, dev, gen = self.shp, self.dev, self.gen
        r, w = pt.num_decode_req, pt.window_tok
        pre = list(pt.prefill)
        n_dec = r * w
        m = n_dec + sum(n for n, _ in pre)
        if r + len(pre) + 1 > self.max_state_slots or n_dec + 1 > self.max_state_slots:
            raise ValueError(f"{pt}: more state slots than allocated")
        # attention metadata: decode windows then prefill chunks, one call
        q_lens = [w] * r + [n for n, _ in pre]
        ctx_lens = [pt.ctx_tok + w] * r + [c + n for n, c in pre]
        cu, used, table, _ = vops.batch_meta(q_lens, ctx_lens, self.block, 1, dev)
        meta = (cu, used, table, max(q_lens), max(ctx_lens))
        i32 = {"dtype": torch.int32, "device": dev}
        g = self._gdn_inputs(pt, pre, i32)
        x = ops._randn((m, shp.hidden), dev, gen)
        ends = torch.tensor([n for n, _ in pre], dtype=torch.long).cumsum(0) + n_dec - 1
        dec_rows = torch.arange(n_dec, device=dev)
        chunk_last = ends.to(dev) if pre else dec_rows[:0]
        logit_rows = torch.cat([dec_rows, chunk_last])
        # one row per request for the first draft pass: the window's last token, the
        # chunk's last token
        req_rows = torch.cat([torch.arange(r, device=dev) * w + (w - 1), chunk_last])
        passes = self._draft_passes(pt, r + len(pre), used, table, max(ctx_lens), i32)
        emb = ops._randn((max(m, passes[-1][0] if passes else 1), shp.hidden), dev, gen)
        mtp = self.mtp
        h = shp.hidden

        def draft(hidden, meta_d):
            e = emb[: hidden.shape[0]]
            cat = torch.cat(
                [
                    F.rms_norm(e, (h,), mtp["norm"], 1e-6),
                    F.rms_norm(hidden, (h,), mtp["norm"], 1e-6),
                ],
                -1,
            )
            y = F.linear(cat, mtp["fc"])
            return self._layer(mtp, y, g, meta_d)

        def run():
            y = x
            for layer in self.layers:
                y = self._layer(layer, y, g, meta)
            ids = self._logits(y.index_select(0, logit_rows))
            self.last_hidden = y
            # MTP pass 1: all tokens, logits on one row per request
            hd = draft(y, meta)
            tok = self._logits(hd.index_select(0, req_rows))
            prev = hd.index_select(0, req_rows)
            for rows, meta_d in passes:
                reps = rows // prev.shape[0]
                hin = prev.repeat_interleave(reps, 0) if reps > 1 else prev
                hd = draft(hin, meta_d)
                tok = self._logits(hd)
                prev = hd
            return ids, tok

        return run


def blocks_needed(pt: StepPoint, block: int) -> int:
    ctx = [pt.ctx_tok + pt.window_tok + pt.depth] * pt.num_decode_req
    ctx += [c + n for n, c in pt.prefill]
    return sum(-(-c // block) for c in ctx)


def slots_needed(pt: StepPoint) -> int:
    return pt.num_decode_req * pt.window_tok + len(pt.prefill) + 2


def measure(shp, points, out, dev, gen, replays: int, deadline: float, time_calls) -> None:
    """Time every point as one CUDA graph; rows go to ``out`` (a model_step Writer)."""
    import sys
    import time

    block = vops.hybrid_block_size(shp)
    try:
        stack = VllmStepStack(
            shp,
            dev,
            gen,
            max(blocks_needed(p, block) for p in points),
            max(slots_needed(p) for p in points),
        )
    except torch.OutOfMemoryError as exc:
        print(f"whole-step stack skipped: {exc}", file=sys.stderr)
        return
    for pt in points:
        if time.monotonic() > deadline:
            print(f"whole steps: budget reached before {pt}", file=sys.stderr)
            break
        how = None
        for graph in (True, False):
            try:
                how, pct = time_calls([stack.step_fn(pt)], replays, graph=graph)
                break
            except Exception as exc:  # one failing point must not lose the others
                print(
                    f"FAILED whole step {pt} graph={graph}: {type(exc).__name__}: {exc}"[:600],
                    file=sys.stderr,
                )
                if torch.cuda.is_available():
                    torch.cuda.synchronize()
        if how is None:
            continue
        finite = bool(torch.isfinite(stack.last_hidden).all())
        out.write({
            "model": shp.model, "finite": finite, "tp": shp.tp,
            "num_decode_req": pt.num_decode_req, "q_tok": pt.window_tok, "ctx_tok": pt.ctx_tok,
            "prefill_tok": sum(n for n, _ in pt.prefill),
            "prefill_chunks": ";".join(f"{n}@{c}" for n, c in pt.prefill),
            "tree": pt.tree_label, "depth": pt.depth, "commit": pt.commit,
            "kind": "full_step", "timing": how,
            "p20_us": f"{pct[0]:.3f}", "p50_us": f"{pct[1]:.3f}", "p80_us": f"{pct[2]:.3f}",
        })  # fmt: skip
        print(f"  step {pt}: {pct[1] / 1e3:.2f} ms finite={finite}", flush=True)
        if torch.cuda.is_available():
            torch.cuda.empty_cache()
