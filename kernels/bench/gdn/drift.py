"""State drift over many speculative steps: committed state vs a float64 recurrence.

    python -m capsim_kernels.bench.gdn.drift --out DIR [--steps 2000] [--batch 4]

Each step draws a new window (bf16 q/k/v, gates a in [GATE_FLOOR, 1): long memory, the
hard case for drift; betas in [0.05, 0.95]) and a random accepted node per request (a
random accepted length on a chain), then every kernel commits it to its own state pool:

- ``treewy`` / ``treewy_tf32``: treewy_verify + treewy_commit (default math / opt-in tf32);
- ``treewy_deferred``: the step's accepted path applied inside the next step's verify
  (its state is compared one step late, when it has been applied);
- ``storeall``: capsim's store-all; the accepted node's slot is copied to the committed
  slot (a copy, exact), as a slot index swap would do;
- ``vllm_triton`` (chains, when vllm_ops is loaded): vLLM's op reading the state of slot
  ``[n, num_accepted - 1]`` as vLLM does.

The float64 truth advances from the same initial state along the same accepted paths.
Writes DIR/drift.csv (DRIFT_COLUMNS: relative error of the committed states, over the
batch, at each checkpoint and the largest up to it).
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import torch

from ...gdn_verify.reference import recurrence_reference
from ...gdn_verify.tree import TreeSpec
from .cases import max_head_rel_err, rel_err
from .shapes import MODEL_SHAPES, ModelShape

DRIFT_COLUMNS = ("kernel", "math", "state_dtype", "tree", "T", "B", "step", "err",
                 "max_err_so_far", "err_max_head")  # fmt: skip
GATE_FLOOR = 0.9
CHECKPOINTS = (1, 2, 5, 10, 20, 50, 100, 200, 500, 1000, 1500, 2000)


class _Pools:
    """Each kernel's state pool and per-kernel bookkeeping for one drift run."""

    def __init__(self, s0: torch.Tensor, w: int, kernels: tuple[str, ...], vllm_op):
        b = s0.shape[0]
        dev = s0.device
        self.b, self.w = b, w
        self.slot = torch.arange(b, dtype=torch.int32, device=dev)
        self.pools = {k: s0.clone() for k in kernels if k.startswith("treewy")}
        if "storeall" in kernels:
            self.sa = torch.zeros((b * (w + 1), *s0.shape[1:]), dtype=s0.dtype, device=dev)
            self.sa[:b] = s0
            self.sa_slots = (b + torch.arange(b * w, dtype=torch.int32, device=dev)).view(b, w)
        self.vllm_op = vllm_op
        if vllm_op is not None:
            self.vl = torch.zeros((1 + b * w, *s0.shape[1:]), dtype=s0.dtype, device=dev)
            self.vl_slots = (1 + torch.arange(b * w, dtype=torch.int32, device=dev)).view(b, w)
            self.vl[self.vl_slots[:, 0].long()] = s0
            self.vl_num_acc = torch.ones(b, dtype=torch.int32, device=dev)
        self.pending = None  # deferred mode: the previous window's PendingCommit


def _step_kernels(ck, p: _Pools, kernels, args, acc, parent, tree, step: int, truths):  # type: ignore[no-untyped-def]
    """One speculative step of each capsim kernel on its own pool: kernel -> (its committed
    state, the float64 truth it is held to); ``truths`` = (this step's, the previous
    step's). The deferred kernel's pool holds the previous step's path (none at step 1)."""
    _, k, v, log_gate, _ = args
    truth, truth_prev = truths
    b = p.b
    got: dict[str, tuple[torch.Tensor, torch.Tensor]] = {}  # kernel -> (state, truth)
    for name in kernels:
        if name in ("treewy", "treewy_tf32"):
            sm = "tf32" if name == "treewy_tf32" else None
            pool = p.pools[name]
            _, vt = ck.treewy_verify(*args, pool, p.slot, parent, state_math=sm)
            ck.treewy_commit(pool, p.slot, k, vt, log_gate, parent, acc, state_math=sm)
            got[name] = (pool, truth)
        elif name == "treewy_deferred":
            pool = p.pools[name]
            out = ck.PendingCommit.empty(k, v, parent)
            if p.pending is None:
                p.pending = ck.PendingCommit.empty(k, v, parent)  # nothing pending (-1)
            ck.treewy_deferred_verify(*args, pool, p.slot, parent, p.pending, out)
            out.accepted.copy_(acc)  # the engine sets it after sampling
            p.pending = out
            if step > 1:  # the previous step's path is in the pool now
                got[name] = (pool, truth_prev)
        elif name == "storeall":
            ck.storeall_verify(*args, p.sa, p.slot, p.sa_slots, parent,
                               is_chain=tree.is_chain)  # fmt: skip
            p.sa[:b] = p.sa[p.sa_slots[torch.arange(b), acc.long()].long()]
            got[name] = (p.sa[:b], truth)
    return got


def _step_vllm(vllm_ops, vllm_op, p: _Pools, args, acc, tree, step: int, s0):  # type: ignore[no-untyped-def]
    """One step of vLLM's store-all kernel: (its accepted state, its own float64 truth)."""
    q, k, v, log_gate, beta = args
    b = p.b
    gates, (g_eff, beta_eff) = vllm_ops.gate_inputs(log_gate, beta)
    call = vllm_ops.make_call(vllm_op, q, k, v, gates, p.vl, p.vl_slots, p.vl_num_acc)
    call()
    p.vl_num_acc = acc + 1
    # vLLM's truth uses the gates it computes (fp32 softplus/sigmoid of its inputs)
    if step == 1:
        p.vl_truth = s0.double()
    _, vst = recurrence_reference(q, k, v, g_eff, beta_eff, p.vl_truth, tree.parent)
    p.vl_truth = vst[torch.arange(b), acc.long()]
    return (p.vl[p.vl_slots[torch.arange(b), acc.long()].long()], p.vl_truth)


def run_drift(
    shape: ModelShape,
    state_dtype: str,
    tree: TreeSpec,
    *,
    steps: int,
    batch: int,
    seed: int,
    device: str,
    kernels: tuple[str, ...] = ("treewy", "treewy_deferred", "storeall"),
    vllm_op=None,
    checkpoints: tuple[int, ...] = CHECKPOINTS,
) -> list[dict]:
    """Rows of DRIFT_COLUMNS for each kernel at each checkpoint <= steps."""
    from ... import gdn_verify as ck
    from . import vllm_storeall as vllm_ops

    gen = torch.Generator(device=device).manual_seed(seed)
    b, w = batch, tree.num_nodes
    hv, hk, dk, dv = shape.num_v_heads, shape.num_k_heads, shape.dk, shape.dv
    sdt = getattr(torch, state_dtype)
    parent = torch.tensor(tree.parent, dtype=torch.int32, device=device)
    s0 = (0.1 * torch.randn(b, hv, dv, dk, device=device, generator=gen)).to(sdt)
    truth = s0.double()
    truth_prev = truth
    use_vllm = vllm_op is not None and tree.is_chain
    p = _Pools(s0, w, kernels, vllm_op if use_vllm else None)
    names = list(kernels) + (["vllm_triton"] if use_vllm else [])
    worst = dict.fromkeys(names, 0.0)
    rows: list[dict] = []
    math = {k: ("tf32" if k.endswith("tf32") else "default") for k in names}
    for step in range(1, steps + 1):
        q = torch.randn(b, w, hk, dk, device=device, generator=gen).bfloat16()
        k = torch.randn(b, w, hk, dk, device=device, generator=gen).bfloat16()
        v = torch.randn(b, w, hv, dv, device=device, generator=gen).bfloat16()
        rnd = torch.rand(b, w, hv, device=device, generator=gen)
        log_gate = torch.log(GATE_FLOOR + (1 - GATE_FLOOR) * rnd)
        beta = 0.05 + 0.9 * torch.rand(b, w, hv, device=device, generator=gen)
        acc = torch.randint(0, w, (b,), device=device, generator=gen, dtype=torch.int32)
        args = (q, k, v, log_gate, beta)
        _, states = recurrence_reference(*args, truth, tree.parent)
        truth_prev, truth = truth, states[torch.arange(b), acc.long()]
        got = _step_kernels(ck, p, kernels, args, acc, parent, tree, step, (truth, truth_prev))
        if use_vllm:
            got["vllm_triton"] = _step_vllm(vllm_ops, vllm_op, p, args, acc, tree, step, s0)
        for name, (st, want) in got.items():
            err = rel_err(want, st)
            worst[name] = max(worst[name], err)
            if step in checkpoints or step == steps:
                rows.append({"kernel": name, "math": math[name], "state_dtype": state_dtype,
                             "tree": tree.label, "T": w, "B": b, "step": step,
                             "err": f"{err:.4g}", "max_err_so_far": f"{worst[name]:.4g}",
                             "err_max_head": f"{max_head_rel_err(want, st):.4g}"})  # fmt: skip
    return rows


def main(argv: list[str] | None = None) -> int:
    from ..timing import atomic_write, write_csv
    from . import vllm_storeall as vllm_ops

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--steps", type=int, default=2000)
    ap.add_argument("--batch", type=int, default=4)
    ap.add_argument("--budget-s", type=float, default=120.0)
    ap.add_argument("--vllm-ops", type=Path, default=Path(".vllmwheel/ops"))
    args = ap.parse_args(argv)
    if args.steps < 1 or args.batch < 1:
        ap.error(f"--steps and --batch must be >= 1, got {args.steps}, {args.batch}")
    deadline = time.monotonic() + args.budget_s
    args.out.mkdir(parents=True, exist_ok=True)
    try:
        op = vllm_ops.load_fused_sigmoid_gating(args.vllm_ops)
    except Exception as e:
        op = None
        print("vLLM op not loaded:", repr(e)[:200], flush=True)
    rows: list[dict] = []
    meta = {"steps": args.steps, "batch": args.batch, "gate_floor": GATE_FLOOR, "runs": []}
    shape = MODEL_SHAPES[0]
    for sd in ("float32", "bfloat16"):
        for tree in (TreeSpec.chain(4), TreeSpec((2, 2, 2))):
            if time.monotonic() > deadline:
                meta["runs"].append(f"budget spent before {sd} {tree.label}")
                break
            kernels = ("treewy", "treewy_deferred", "storeall")
            if sd == "float32":
                kernels = ("treewy", "treewy_tf32", "treewy_deferred", "storeall")
            t0 = time.monotonic()
            rows += run_drift(shape, sd, tree, steps=args.steps, batch=args.batch,
                              seed=17, device="cuda", kernels=kernels, vllm_op=op)  # fmt: skip
            meta["runs"].append(f"{sd} {tree.label}: {time.monotonic() - t0:.1f} s")
            print("drift", meta["runs"][-1], flush=True)
            write_csv(args.out / "drift.csv", rows, DRIFT_COLUMNS)
            atomic_write(args.out / "drift_meta.json", json.dumps(meta, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
