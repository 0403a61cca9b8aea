"""The side-by-side benchmark's operators on tiny shapes in the interpreter: every
operator builds, runs its timed closure and reports float64 accuracy within its
tolerance (the same code path the H200 run takes, minus the timing). vLLM's op runs only
where it has been extracted (kernels/bench/gdn/vllm_storeall.py); never committed."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from capsim_kernels.bench.gdn import side_by_side as sbs
from capsim_kernels.bench.gdn import vllm_storeall as vllm_ops
from capsim_kernels.bench.gdn.cases import make_case, truth
from capsim_kernels.bench.gdn.shapes import ModelShape
from capsim_kernels.gdn_verify.tree import TreeSpec

TINY = ModelShape("tiny", num_v_heads=2, num_k_heads=1, dk=16, dv=16)
VLLM_DIR = Path(__file__).resolve().parents[2] / ".vllmwheel" / "src"


def _ctx(case):
    ctx = {"vllm_op": None, "vllm_error": "not extracted", "storeall_config": {
        case.state_dtype: {"block_v": 16, "num_warps": 1, "num_stages": 1}}}  # fmt: skip
    if (VLLM_DIR / vllm_ops.OP_FILE).is_file():
        ctx["vllm_op"] = vllm_ops.load_fused_sigmoid_gating(VLLM_DIR)
    ctx["truth"] = truth(case, sbs.ncheck(case))
    return ctx


@pytest.mark.parametrize("tree", [TreeSpec.chain(4), TreeSpec((2, 1))], ids=lambda t: t.label)
def test_every_operator_checks_out(tree, device):
    case = make_case(TINY, "float32", 2, tree, seed=3, device=device)
    ctx = _ctx(case)
    ran = []
    for name, _, chain_only, _dtypes, build in sbs.OPS:
        if chain_only and not tree.is_chain:
            continue
        if name.startswith("fla"):
            continue  # fla is a GPU-only package here
        try:
            prep = build(case, ctx)
        except LookupError:
            assert name == "vllm_triton_storeall"
            continue
        tol = sbs.TOLERANCE["float32", prep.math]
        assert prep.check["state_err"] <= tol, (name, prep.math, prep.check)
        assert prep.check["o_err"] <= sbs.O_TOLERANCE, (name, prep.check)
        prep.fn()
        ran.append((name, prep.math))
    assert ("treewy_verify_commit", "fp32") in ran and ("treewy_verify_commit", "tf32") in ran
    assert ("capsim_storeall_tuned", "fp32") in ran


def test_vllm_gate_inputs_reproduce_the_gates():
    g = torch.log(0.3 + 0.7 * torch.rand(2, 3, 4))
    beta = 0.05 + 0.9 * torch.rand(2, 3, 4)
    (a_log, _a, _b, dt_bias), (g_eff, beta_eff) = vllm_ops.gate_inputs(g, beta)
    assert a_log.shape == dt_bias.shape == (4,)
    torch.testing.assert_close(g_eff, g.double(), rtol=1e-5, atol=1e-6)
    torch.testing.assert_close(beta_eff, beta.double(), rtol=1e-5, atol=1e-6)
