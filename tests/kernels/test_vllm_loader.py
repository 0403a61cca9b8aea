"""The vLLM loader's torch stand-ins (CPU) and, where the extracted vLLM files are present
(``python3 -m capsim_kernels.bench.vllm_shim --extract``; git-ignored, absent in CI),
vLLM's own fused
MoE kernel under the shim, run by the Triton interpreter in float32 at a tiny shape."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F
from capsim_kernels.bench import vllm_shim as vl

SRC = Path(__file__).resolve().parents[2] / ".vllmwheel" / "src"


@pytest.mark.parametrize(
    "tokens,topk,experts,block", [(5, 2, 8, 4), (33, 8, 16, 16), (1, 4, 64, 16)]
)
def test_moe_align_standin_groups_every_route_once(tokens, topk, experts, block):
    gen = torch.Generator().manual_seed(tokens)
    ids = torch.stack([torch.randperm(experts, generator=gen)[:topk] for _ in range(tokens)])
    ids = ids.to(torch.int32)
    n = ids.numel()
    cap = min(n * block, n + experts * (block - 1))  # vLLM's buffer sizing
    sorted_ids = torch.empty(cap, dtype=torch.int32)
    expert_ids = torch.empty(-(-cap // block), dtype=torch.int32)
    total = torch.empty(1, dtype=torch.int32)
    vl._moe_align_block_size_standin(ids, experts, block, sorted_ids, expert_ids, total)
    t = int(total)
    assert t % block == 0 and t <= cap
    routes = sorted_ids[:t]
    real = routes[routes < n]
    assert sorted(real.tolist()) == list(range(n))  # every (token, slot) exactly once
    assert (routes[routes >= n] == n).all()  # padding is numel()
    flat = ids.flatten()
    for b in range(t // block):
        blk = routes[b * block : (b + 1) * block]
        assert (flat[blk[blk < n].long()] == expert_ids[b]).all()  # one expert per block
    assert (expert_ids[t // block :] == -1).all()


def test_topk_softmax_standin_renormalises():
    logits = torch.randn(7, 32)
    w, ids = vl.topk_softmax_standin(logits, 4)
    assert ids.dtype == torch.int32 and torch.allclose(w.sum(-1), torch.ones(7))
    assert (torch.gather(logits, 1, ids.long()) >= logits.topk(4).values[:, -1:]).all()


@pytest.mark.skipif(
    not (SRC / vl.KERNEL_FILES["fused_moe"]).is_file(), reason="vLLM files not extracted"
)
@pytest.mark.skipif(os.environ.get("TRITON_INTERPRET") != "1", reason="needs TRITON_INTERPRET=1")
def test_vllm_fused_moe_under_the_shim_matches_float64():
    fm = vl.load_fused_moe(SRC)
    gen = torch.Generator().manual_seed(3)
    e, h, i, k, m = 8, 64, 32, 2, 40
    x = torch.randn(m, h, generator=gen)
    w13 = torch.randn(e, 2 * i, h, generator=gen) * 0.1
    w2 = torch.randn(e, h, i, generator=gen) * 0.1
    tw, ti = vl.topk_softmax_standin(torch.randn(m, e, generator=gen), k)
    out = fm.fused_experts_impl(x, w13, w2, tw, ti)
    ref = torch.zeros(m, h, dtype=torch.float64)
    for j in range(k):
        hh = torch.einsum("mh,mnh->mn", x.double(), w13[ti[:, j].long()].double())
        hh = F.silu(hh[:, :i]) * hh[:, i:]
        ref += tw[:, j : j + 1].double() * torch.einsum(
            "mi,mhi->mh", hh, w2[ti[:, j].long()].double()
        )
    assert float((out.double() - ref).norm() / ref.norm()) < 1e-3
    # vLLM's config lookup: no bf16 H200 file for the 35B's experts, one for the 397B TP8
    names = {p.name for p in (SRC / vl.CONFIG_GLOB).glob("*.json")}
    assert "E=256,N=512,device_name=NVIDIA_H200.json" not in names
    assert "E=512,N=128,device_name=NVIDIA_H200.json" in names


@pytest.mark.skipif(os.environ.get("TRITON_INTERPRET") != "1", reason="needs TRITON_INTERPRET=1")
@pytest.mark.parametrize("tokens,topk,experts,block", [(5, 2, 8, 4), (40, 8, 256, 16)])
def test_triton_standins_match_the_torch_references(tokens, topk, experts, block):
    from capsim_kernels.bench.step import standins as st

    gen = torch.Generator().manual_seed(7)
    logits = torch.randn(tokens, experts, generator=gen)
    w, ids = st.topk_softmax(logits, topk)
    w_ref, ids_ref = vl.topk_softmax_standin(logits, topk)
    assert torch.equal(ids, ids_ref) and torch.allclose(w, w_ref, atol=1e-6)
    n = ids.numel()
    cap = min(n * block, n + experts * (block - 1))
    outs = [
        (torch.empty(cap, dtype=torch.int32), torch.empty(-(-cap // block), dtype=torch.int32),
         torch.empty(1, dtype=torch.int32))
        for _ in range(2)
    ]  # fmt: skip
    st.moe_align_block_size(ids, experts, block, *outs[0])
    vl._moe_align_block_size_standin(ids, experts, block, *outs[1])
    total = int(outs[1][2])
    assert int(outs[0][2]) == total and torch.equal(outs[0][1], outs[1][1])
    for b in range(total // block):  # same routes per block (order inside is free)
        got, ref = (o[0][b * block : (b + 1) * block].sort().values for o in outs)
        assert torch.equal(got, ref)
    x = torch.randn(tokens, 2 * 48, generator=gen)
    out = torch.empty(tokens, 48)
    st.silu_and_mul(out, x)
    assert torch.allclose(out, F.silu(x[:, :48]) * x[:, 48:], atol=1e-5)
