"""vLLM's own GDN store-all op, loaded from files extracted out of the vLLM wheel.

vLLM code is never committed here. To set it up (kernels/BENCHMARKS.md, round 5)::

    pip download --no-deps vllm==0.33.0 -d .vllmwheel/dl
    unzip -j .vllmwheel/dl/vllm-0.33.0-*.whl \\
        'vllm/third_party/flash_linear_attention/ops/fused_sigmoid_gating.py' -d .vllmwheel/ops

(``/.vllmwheel/`` is git-ignored; the device run carries it.) ``load_fused_sigmoid_gating``
loads that one file under a minimal ``vllm`` shim: its only import is
``vllm.triton_utils`` (``tl``, ``triton``), provided here from the installed Triton. The
kernel runs unchanged (vLLM's launch configuration: BV = 32, 4 warps, 3 stages).

``fused_sigmoid_gating_delta_rule_update`` is the op vLLM's Qwen3.5 GDN layer calls for
speculative decoding (``qwen_gdn_linear_attn.py``, "Process the multi-query part"): per
request it reads the state of slot ``ssm_state_indices[n, num_accepted_tokens[n] - 1]``
and writes the state after every window token into ``ssm_state_indices[n, t]``
(store-all), computing g = -exp(A_log) softplus(a + dt_bias) and beta = sigmoid(b) in the
kernel.
"""

from __future__ import annotations

import hashlib
import importlib.util
import sys
import types
from pathlib import Path

DEFAULT_DIR = Path(".vllmwheel/ops")
OP_FILE = "fused_sigmoid_gating.py"
VLLM_VERSION = "0.33.0"


def _shim() -> None:
    """A ``vllm`` package holding only ``vllm.triton_utils`` (tl, triton)."""
    if "vllm.triton_utils" in sys.modules:
        return
    import triton
    import triton.language as tl

    pkg = types.ModuleType("vllm")
    pkg.__path__ = []  # a namespace with no files of its own
    utils = types.ModuleType("vllm.triton_utils")
    utils.tl, utils.triton = tl, triton
    pkg.triton_utils = utils
    sys.modules.setdefault("vllm", pkg)
    sys.modules["vllm.triton_utils"] = utils


def op_file_sha256(ops_dir: Path = DEFAULT_DIR) -> str:
    return hashlib.sha256((Path(ops_dir) / OP_FILE).read_bytes()).hexdigest()


def load_fused_sigmoid_gating(ops_dir: Path = DEFAULT_DIR):
    """vLLM's ``fused_sigmoid_gating_delta_rule_update`` from ``ops_dir``/OP_FILE."""
    path = Path(ops_dir) / OP_FILE
    if not path.is_file():
        raise FileNotFoundError(f"{path}: extract it from the vllm=={VLLM_VERSION} wheel first")
    _shim()
    spec = importlib.util.spec_from_file_location("vllm_fused_sigmoid_gating", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
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
