"""The CUDA-graph pool of a decode step (vLLM's capture sizes, one pool, largest first)."""

from __future__ import annotations

from typing import Any

import torch

from .probe import Probe
from .probe import randn as _randn
from .shapes import GpuShape
from .terms_moe import moe_forward, moe_weights


class DecodePeriod:
    """One decode step over ``layers`` layers (every 4th an attention layer), static buffers."""

    def __init__(
        self, s: GpuShape, layers: int, max_batch: int, device: torch.device, ctx: int = 256
    ) -> None:
        from vllm.third_party.flash_linear_attention.ops.fused_sigmoid_gating import (
            fused_sigmoid_gating_delta_rule_update,
        )

        self.recurrent = fused_sigmoid_gating_delta_rule_update
        bf = torch.bfloat16
        self.s, self.ctx = s, ctx
        h = s.hidden
        qkv = 2 * s.hk * s.dk + s.hv * s.dv
        self.x = _randn(max_batch, h, dtype=bf, device=device)
        self.cu = torch.arange(max_batch + 1, device=device, dtype=torch.int32)
        self.idx = torch.arange(max_batch, device=device, dtype=torch.int32)
        self.moe = moe_weights(s, device)  # one expert set shared by all layers (weights only)
        self.layers: list[dict[str, Any]] = []
        for i in range(layers):
            if (i + 1) % 4 == 0:
                self.layers.append(
                    {
                        "kind": "attn",
                        "wq": _randn(h, 2 * s.hq * s.head_dim, dtype=bf, device=device, scale=0.02),
                        "wkv": _randn(
                            h, 2 * s.hkv * s.head_dim, dtype=bf, device=device, scale=0.02
                        ),
                        "wo": _randn(s.hq * s.head_dim, h, dtype=bf, device=device, scale=0.02),
                        "k": _randn(max_batch, s.hkv, ctx, s.head_dim, dtype=bf, device=device),
                        "v": _randn(max_batch, s.hkv, ctx, s.head_dim, dtype=bf, device=device),
                    }
                )
            else:
                self.layers.append(
                    {
                        "kind": "gdn",
                        "wqkvz": _randn(h, qkv + s.hv * s.dv, dtype=bf, device=device, scale=0.02),
                        "wba": _randn(h, 2 * s.hv, dtype=bf, device=device, scale=0.02),
                        "wo": _randn(s.hv * s.dv, h, dtype=bf, device=device, scale=0.02),
                        "conv_w": _randn(qkv, 4, dtype=bf, device=device, scale=0.5),
                        "conv_state": _randn(max_batch, qkv, 3, dtype=bf, device=device),
                        "ssm": _randn(
                            max_batch,
                            s.hv,
                            s.dv,
                            s.dk,
                            dtype=torch.float32,
                            device=device,
                            scale=0.1,
                        ),
                        "a_log": torch.log(torch.rand(s.hv, device=device) * 15 + 1),
                        "dt_bias": torch.ones(s.hv, device=device),
                    }
                )

    @staticmethod
    def _rms(x: torch.Tensor) -> torch.Tensor:
        xf = x.float()
        return (xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + 1e-6)).to(x.dtype)

    def step(self, b: int) -> torch.Tensor:
        s = self.s
        x = self.x[:b]
        for layer in self.layers:
            hn = self._rms(x)
            if layer["kind"] == "gdn":
                qkvz = hn @ layer["wqkvz"]
                ba = hn @ layer["wba"]
                qkv_dim = layer["conv_w"].shape[0]
                mixed, z = qkvz[:, :qkv_dim], qkvz[:, qkv_dim:]
                win = torch.cat([layer["conv_state"][:b], mixed.unsqueeze(-1)], dim=-1)
                layer["conv_state"][:b].copy_(win[..., 1:])
                conv = torch.nn.functional.silu((win * layer["conv_w"]).sum(-1))
                q, k, v = torch.split(conv, [s.hk * s.dk, s.hk * s.dk, s.hv * s.dv], dim=-1)
                o, _ = self.recurrent(
                    A_log=layer["a_log"],
                    a=ba[:, s.hv :].contiguous(),
                    b=ba[:, : s.hv].contiguous(),
                    dt_bias=layer["dt_bias"],
                    q=q.reshape(1, b, s.hk, s.dk),
                    k=k.reshape(1, b, s.hk, s.dk),
                    v=v.reshape(1, b, s.hv, s.dv),
                    initial_state=layer["ssm"],
                    inplace_final_state=True,
                    cu_seqlens=self.cu[: b + 1],
                    ssm_state_indices=self.idx[:b],
                    use_qk_l2norm_in_kernel=True,
                )
                o = self._rms(o.reshape(b, s.hv, s.dv)) * torch.nn.functional.silu(
                    z.reshape(b, s.hv, s.dv)
                )
                x = x + o.reshape(b, -1) @ layer["wo"]
            else:
                qg = (hn @ layer["wq"]).view(b, s.hq, 2 * s.head_dim)
                q, gate = qg[..., : s.head_dim], qg[..., s.head_dim :]
                kv = (hn @ layer["wkv"]).view(b, 2, s.hkv, s.head_dim)
                layer["k"][:b, :, -1].copy_(kv[:, 0])
                layer["v"][:b, :, -1].copy_(kv[:, 1])
                att = torch.nn.functional.scaled_dot_product_attention(
                    q.unsqueeze(2), layer["k"][:b], layer["v"][:b], enable_gqa=s.hq != s.hkv
                ).squeeze(2)
                x = x + (att * torch.sigmoid(gate)).reshape(b, -1) @ layer["wo"]
            x = x + moe_forward(self._rms(x), self.moe, s.topk)
        return x


def term_cudagraphs(
    probe: Probe, s: GpuShape, layers: int, sizes: list[int], device: torch.device
) -> dict[str, Any]:
    model = DecodePeriod(s, layers, max(sizes), device)
    if not probe.cuda:  # CPU: run the step eagerly at two sizes, no capture
        for b in sizes[-2:]:
            model.step(b)
        return {"per_size": dict.fromkeys(sizes, 0), "total": 0, "estimate": 0, "reserved_total": 0}
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):  # eager warm-up: compile kernels outside capture
        for b in (max(sizes), min(sizes)):
            model.step(b)
    torch.cuda.current_stream().wait_stream(side)
    probe.clean()
    pool = torch.cuda.graph_pool_handle()
    graphs: list[Any] = []
    per_size: dict[int, int] = {}
    per_size_reserved: dict[int, int] = {}
    probe.clean()
    free0, res0 = probe.free(), probe.reserved()
    for b in sorted(sizes, reverse=True):
        with torch.cuda.stream(side):
            model.step(b)  # vLLM warms each size up before capturing it
        torch.cuda.current_stream().wait_stream(side)
        probe.clean()
        free_before, res_before = probe.free(), probe.reserved()
        g = torch.cuda.CUDAGraph()
        with torch.cuda.graph(g, pool=pool):
            out = model.step(b)
        probe.sync()
        graphs.append((g, out))
        per_size[b] = free_before - probe.free()
        per_size_reserved[b] = probe.reserved() - res_before
    probe.clean()
    total = free0 - probe.free()
    reserved_total = probe.reserved() - res0
    ordered = [per_size[b] for b in sorted(sizes, reverse=True)]
    second = max(ordered[1] if len(ordered) > 1 else 0, 1 << 20)
    estimate = ordered[0] + (len(ordered) - 1) * second
    graphs[0][0].replay()
    probe.sync()
    del graphs, model
    probe.clean()
    return {
        "per_size": per_size,
        "per_size_reserved": per_size_reserved,
        "total": total,
        "reserved_total": reserved_total,
        "estimate": estimate,
    }
