"""The case builders and output checks of scripts/engine_moe_ops.py on the CPU (Triton
interpreter): capsim's stand-ins against the torch references of ``vllm_shim`` standing in
for vLLM's compiled ops, called with vLLM 0.26's signatures. A check that reports a
mismatch here would report it on the GPU too."""

from __future__ import annotations

import importlib.util
import types
from pathlib import Path

import pytest
import torch
from capsim_kernels.bench import vllm_shim as vl

REPO = Path(__file__).resolve().parents[2]
_spec = importlib.util.spec_from_file_location("engine_moe_ops", REPO / "scripts/engine_moe_ops.py")
emo = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(emo)


def _topk_softmax(w, ids, tok_idx, logits, renormalize):
    rw, ri = vl.topk_softmax_standin(logits, w.shape[1], renormalize)
    w.copy_(rw)
    ids.copy_(ri)


FAKE_VLLM = types.SimpleNamespace(
    topk_softmax=_topk_softmax,
    moe_align_block_size=vl._moe_align_block_size_standin,
    moe_sum=lambda x, out: torch.sum(x, dim=1, out=out),
)
SHAPE = {"hidden": 64, "experts": 32, "topk": 4, "inter": 32, "shared": 32, "moe_layers": 2}


@pytest.fixture(scope="module")
def standins():
    vl._register_silu_and_mul()
    return emo.load_standins()


@pytest.mark.parametrize("op", emo.OPS)
@pytest.mark.parametrize("n", [1, 5])
def test_standin_agrees_with_reference(op: str, n: int, standins, device: str) -> None:
    gen = torch.Generator(device=device).manual_seed(0)
    fns, check = emo.make_case(op, n, SHAPE, FAKE_VLLM, standins, 4, gen, dev=device)
    assert set(emo.IMPLS[op]) <= set(fns)
    got = check({im: fns[im]() for im in ("vllm", "standin")})
    if op == "topk_softmax":
        assert got.startswith("ids_equal=1 ")
        assert float(got.split("max_abs_w_diff=")[1]) < 1e-5
    elif op == "moe_align_block_size":
        assert got.endswith("expert_ids_equal=1 ids_equal=1"), got
        a, b = got.split()[1].split("/")
        assert a == b
    else:
        assert float(got.split("max_abs_diff=")[1]) < 0.05, got


def test_align_check_sees_a_wrong_assignment(standins, device: str) -> None:
    gen = torch.Generator(device=device).manual_seed(1)
    fns, check = emo.make_case(
        "moe_align_block_size", 5, SHAPE, FAKE_VLLM, standins, 4, gen, dev=device
    )
    outs = {im: fns[im]() for im in ("vllm", "standin")}
    sorted_ids, expert_ids, _ = outs["standin"]
    other = next(j for j in range(1, len(expert_ids)) if expert_ids[j] != expert_ids[0])
    first, second = sorted_ids[0].item(), sorted_ids[4 * other].item()
    assert first != second
    sorted_ids[0], sorted_ids[4 * other] = second, first  # token moved to another expert
    assert "ids_equal=0" in check(outs)
