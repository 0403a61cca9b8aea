"""Round 5: capsim's TreeWY kernels next to the store-all baselines, vLLM's own included,
timed in one process with each kernel's float64 accuracy in the same row.

    python -m capsim_kernels.bench.gdn.side_by_side --out DIR [--vllm-ops .vllmwheel/ops]
        [--batches 256 1] [--budget-s 300] [--no-sweep | --storeall-config JSON]

Operators (OPS, a table): capsim TreeWY verify+commit, fused, deferred (default math, and
the opt-in tf32 mode for an fp32 state), capsim store-all (its default launch config and
the fastest of STOREALL_CANDIDATES, swept first on the chains at the largest B), vLLM
0.33's Triton ``fused_sigmoid_gating_delta_rule_update`` (chains; vllm_ops.py), fla's
``fused_recurrent_gated_delta_rule`` (chains). Every operator is checked against the
float64 recurrence on the first NUM_CHECK requests of the same inputs before it is
timed; one that fails its tolerance (TOLERANCE, by state dtype and math) is not timed.
Times: CUDA-graph replays, L2 flushed (timing.time_graph_us). Writes DIR/side_by_side.csv
(COLUMNS) and DIR/side_by_side_meta.json.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from ...gdn_verify.tree import TreeSpec
from ..timing import atomic_write, measure_copy_gbps, time_graph_us, write_csv
from .cases import (
    Case,
    make_case,
    max_head_rel_err,
    pseudo_values,
    rel_err,
    truth,
)
from .shapes import MODEL_SHAPES, STATE_DTYPES, bytes_moved

COLUMNS = (
    "kernel", "math", "state_dtype", "T", "tree", "B", "config", "state_err",
    "state_err_max_head", "o_err", "check_ok", "p20_us", "p50_us", "p80_us", "bytes_moved",
    "floor_us", "achieved_tbps",
)  # fmt: skip
WINDOWS = (
    TreeSpec.chain(4),
    TreeSpec.chain(15),
    TreeSpec((2, 2, 2)),
    TreeSpec.chain(40),
    TreeSpec((3, 3, 3)),
)
NUM_CHECK = 4
# committed-state tolerance (relative, over the checked requests) by (state dtype, math):
# the contract (fp32: 1e-6; bf16: bf16 rounding over a window, run.py's 1.5e-2), and the
# opt-in tf32 mode's own; outputs are bf16 (1e-2)
TOLERANCE = {("float32", "fp32"): 1e-6, ("float32", "tf32"): 5e-3, ("bfloat16", "fp32"): 1.5e-2,
             ("bfloat16", "tf32"): 1.5e-2}  # fmt: skip
O_TOLERANCE = 1e-2
# capsim store-all launch configurations (dv tile, warps, stages) swept per state dtype
STOREALL_CANDIDATES = (
    (8, 1, 3), (8, 2, 3), (16, 1, 3), (16, 2, 3), (16, 4, 3), (32, 2, 3), (32, 4, 3),
    (32, 8, 3), (64, 4, 3), (64, 8, 3), (16, 2, 1), (32, 4, 1),
)  # fmt: skip


@dataclass(frozen=True)
class Prepared:
    """A timed closure, the accuracy of the same operator on the same inputs, its math."""

    fn: Callable[[], object]
    check: dict
    math: str
    config: str = ""


def _treewy_math(case: Case, state_math: str | None) -> str:
    import torch

    from ...gdn_verify._jit import dot_precision

    prec = dot_precision(getattr(torch, case.state_dtype), case.q.dtype, state_math, "cuda")
    return "tf32" if prec.state == "tf32" else "fp32"


def ncheck(case: Case) -> int:
    """Requests compared against float64: the first NUM_CHECK (all of a smaller batch)."""
    return min(NUM_CHECK, case.batch)


def _state_checks(case: Case, ref_states, ref_o, got_state, got_o) -> dict:
    n = ncheck(case)
    acc = case.accepted[:n].long()
    want = ref_states[list(range(n)), acc.cpu()]
    return {
        "state_err": rel_err(want, got_state),
        "state_err_max_head": max_head_rel_err(want, got_state),
        "o_err": rel_err(ref_o, got_o) if got_o is not None else float("nan"),
    }


def op_treewy(variant: str, state_math: str | None):
    """verify+commit, fused or deferred, with ``state_math``."""

    def build(case: Case, ctx: dict) -> Prepared:
        from ... import gdn_verify as ck

        n = ncheck(case)
        args = (case.q, case.k, case.v, case.log_gate, case.beta)
        kw = {"state_math": state_math}
        ref_o, ref_states = ctx["truth"]
        # accuracy: on a copy of the pool, the first n requests compared
        pool = case.pool.clone()
        vt = None
        if variant == "verify_commit":
            o, vt = ck.treewy_verify(*args, pool, case.slot, case.parent, **kw)
            ck.treewy_commit(pool, case.slot, case.k, vt, case.log_gate, case.parent,
                             case.accepted, **kw)  # fmt: skip
        elif variant == "fused":
            o = ck.treewy_fused_verify_commit(*args, pool, case.slot, case.parent,
                                              case.accepted, **kw)  # fmt: skip
        else:
            o, vt = ck.treewy_verify(*args, pool, case.slot, case.parent, **kw)
            ping = ck.PendingCommit(k=case.k, vt=vt, log_gate=case.log_gate,
                                    parent=case.parent, accepted=case.accepted)  # fmt: skip
            pong = ck.PendingCommit.empty(case.k, case.v, case.parent)
            ck.treewy_deferred_verify(*args, pool, case.slot, case.parent, ping, pong, **kw)
        got = pool[case.slot[:n].long()]
        check = _state_checks(case, ref_states, ref_o, got, o[:n])
        if vt is not None:
            check["vt_err"] = rel_err(pseudo_values(case, ref_states, n), vt[:n])
        del pool
        # timed closure on its own pool copy (its commits change the state it times)
        tpool = case.pool.clone()
        if variant == "verify_commit":

            def fn():
                _, vt = ck.treewy_verify(*args, tpool, case.slot, case.parent, **kw)
                ck.treewy_commit(tpool, case.slot, case.k, vt, case.log_gate, case.parent,
                                 case.accepted, **kw)  # fmt: skip

        elif variant == "fused":

            def fn():
                ck.treewy_fused_verify_commit(*args, tpool, case.slot, case.parent,
                                              case.accepted, **kw)  # fmt: skip

        else:
            ping = ck.PendingCommit.empty(case.k, case.v, case.parent)
            pong = ck.PendingCommit.empty(case.k, case.v, case.parent)
            _, vt0 = ck.treewy_verify(*args, tpool, case.slot, case.parent, **kw)
            ping.vt.copy_(vt0)
            ping.k.copy_(case.k)
            ping.log_gate.copy_(case.log_gate)
            ping.accepted.copy_(case.accepted)

            def fn():
                ck.treewy_deferred_verify(*args, tpool, case.slot, case.parent, ping, pong,
                                          **kw)  # fmt: skip

        return Prepared(fn, check, _treewy_math(case, state_math))

    return build


def _storeall_pool(case: Case):
    import torch

    b, w = case.batch, case.num_nodes
    pool = torch.empty((b * (w + 1), *case.pool.shape[1:]), dtype=case.pool.dtype,
                       device=case.pool.device)  # fmt: skip
    pool[:b] = case.state0()
    init = torch.arange(b, dtype=torch.int32, device=pool.device)
    slots = (b + torch.arange(b * w, dtype=torch.int32, device=pool.device)).view(b, w)
    return pool, init, slots


def op_storeall(tuned: bool):
    def build(case: Case, ctx: dict) -> Prepared:
        from ... import gdn_verify as ck

        n = ncheck(case)
        cfg = ctx["storeall_config"].get(case.state_dtype) if tuned else None
        if tuned and cfg is None:
            raise LookupError("no swept store-all configuration")
        args = (case.q, case.k, case.v, case.log_gate, case.beta)
        pool, init, slots = _storeall_pool(case)
        chain = case.tree.is_chain
        o = ck.storeall_verify(*args, pool, init, slots, case.parent, is_chain=chain, config=cfg)
        ref_o, ref_states = ctx["truth"]
        got = pool[slots[torch_arange(n, pool.device), case.accepted[:n].long()].long()]
        check = _state_checks(case, ref_states, ref_o, got, o[:n])

        def fn():
            ck.storeall_verify(*args, pool, init, slots, case.parent, is_chain=chain, config=cfg)

        return Prepared(fn, check, "fp32", json.dumps(cfg) if cfg else "default")

    return build


def torch_arange(n, device):
    import torch

    return torch.arange(n, device=device)


def op_vllm(case: Case, ctx: dict) -> Prepared:
    import torch

    from . import vllm_storeall as vllm_ops

    op = ctx["vllm_op"]
    if op is None:
        raise LookupError(ctx.get("vllm_error", "vLLM op not loaded"))
    n = ncheck(case)
    b, w = case.batch, case.num_nodes
    gates, (g_eff, beta_eff) = vllm_ops.gate_inputs(case.log_gate, case.beta)
    pool = torch.zeros((1 + b * w, *case.pool.shape[1:]), dtype=case.pool.dtype,
                       device=case.pool.device)  # fmt: skip
    slots = (1 + torch.arange(b * w, dtype=torch.int32, device=pool.device)).view(b, w)
    num_acc = torch.ones(b, dtype=torch.int32, device=pool.device)  # state at slots[:, 0]
    pool[slots[:, 0].long()] = case.state0()
    call = vllm_ops.make_call(op, case.q, case.k, case.v, gates, pool, slots, num_acc)
    o, _ = call()
    ref_o, ref_states = truth(case, n, log_gate=g_eff, beta=beta_eff)
    got = pool[slots[torch.arange(n, device=pool.device), case.accepted[:n].long()].long()]
    check = _state_checks(case, ref_states, ref_o, got, o.view(b, w, *o.shape[2:])[:n])
    pool[slots[:, 0].long()] = case.state0()
    return Prepared(call, check, "fp32", "vLLM 0.33.0 as shipped (BV 32, 4 warps, 3 stages)")


def op_fla(case: Case, ctx: dict) -> Prepared:
    from fla.ops.gated_delta_rule import fused_recurrent_gated_delta_rule

    n = ncheck(case)
    h0 = case.state0()

    def fn():
        return fused_recurrent_gated_delta_rule(
            case.q, case.k, case.v, g=case.log_gate, beta=case.beta, initial_state=h0,
            output_final_state=True, use_qk_l2norm_in_kernel=True, state_v_first=True,
        )  # fmt: skip

    o, ht = fn()
    ref_o, ref_states = ctx["truth"]
    want = ref_states[:, -1]
    check = {
        "state_err": rel_err(want, ht[:n]),
        "state_err_max_head": max_head_rel_err(want, ht[:n]),
        "o_err": rel_err(ref_o, o[:n]),
        "note": "final state (fla has no accepted-node commit)",
    }
    return Prepared(fn, check, "fp32")


# (kernel name, bytes_moved kernel, chain only, state dtypes, builder)
OPS = (
    ("treewy_verify_commit", "treewy_verify_commit", False, STATE_DTYPES,
     op_treewy("verify_commit", None)),
    ("treewy_verify_commit", "treewy_verify_commit", False, ("float32",),
     op_treewy("verify_commit", "tf32")),
    ("treewy_fused", "fused_chain", False, STATE_DTYPES, op_treewy("fused", None)),
    ("treewy_deferred", "deferred", False, STATE_DTYPES, op_treewy("deferred", None)),
    ("treewy_deferred", "deferred", False, ("float32",), op_treewy("deferred", "tf32")),
    ("capsim_storeall", "storeall", False, STATE_DTYPES, op_storeall(tuned=False)),
    ("capsim_storeall_tuned", "storeall", False, STATE_DTYPES, op_storeall(tuned=True)),
    ("vllm_triton_storeall", "storeall", True, STATE_DTYPES, op_vllm),
    ("fla_fused_recurrent", "fla_fused_recurrent", True, STATE_DTYPES, op_fla),
)  # fmt: skip


def sweep_storeall(shape, batch: int, rows: list[dict], deadline: float) -> dict:
    """Fastest STOREALL_CANDIDATES per state dtype (sum of p50 over the chains)."""
    from ... import gdn_verify as ck

    best: dict = {}
    for sd in STATE_DTYPES:
        cases = [make_case(shape, sd, batch, t, seed=7 + t.num_nodes) for t in WINDOWS
                 if t.is_chain]  # fmt: skip
        scores = []
        for bv, nw, ns in STOREALL_CANDIDATES:
            if time.monotonic() > deadline:
                break
            cfg = {"block_v": bv, "num_warps": nw, "num_stages": ns}
            total = 0.0
            for c in cases:
                pool, init, slots = _storeall_pool(c)
                args = (c.q, c.k, c.v, c.log_gate, c.beta, pool, init, slots, c.parent)
                try:
                    _p20, p50, _p80 = time_graph_us(
                        lambda args=args, cfg=cfg: ck.storeall_verify(
                            *args, is_chain=True, config=cfg)
                    )  # fmt: skip
                except Exception as e:  # a config that does not compile is skipped
                    print("sweep FAILED", cfg, repr(e)[:200], flush=True)
                    total = float("inf")
                    break
                total += p50
                rows.append({"state_dtype": sd, "T": c.num_nodes, "B": batch,
                             "config": json.dumps(cfg), "p50_us": round(p50, 2)})  # fmt: skip
                del pool
            scores.append((total, cfg))
            print(f"storeall sweep {sd} {cfg}: sum p50 {total:.1f} us", flush=True)
        if scores:
            best[sd] = min(scores, key=lambda x: x[0])[1]
    return best


def _meta(shape, copy_gbps: float) -> dict:  # type: ignore[no-untyped-def]
    """side_by_side_meta.json's header: command, date, GPU, versions, tolerances."""
    import torch
    import triton

    meta: dict = {
        "command": " ".join(["python3 -m capsim_kernels.bench.gdn.side_by_side", *sys.argv[1:]]),
        "date_utc": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "gpu": torch.cuda.get_device_name(), "torch": torch.__version__,
        "copy_gbps": round(copy_gbps, 1), "shape": shape.name, "tolerance": {
            f"{a}/{b}": v for (a, b), v in TOLERANCE.items()}, "o_tolerance": O_TOLERANCE,
        "timing": "CUDA graph replay, L2 flushed, triton.testing.do_bench p20/p50/p80",
        "notes": [],
    }  # fmt: skip
    meta["triton"] = triton.__version__
    return meta


def _load_vllm_op(ctx: dict, meta: dict, vllm_ops_dir: Path) -> None:
    """vLLM's extracted op into ``ctx`` (or why not into ``ctx`` and the notes)."""
    from . import vllm_storeall as vllm_ops

    try:
        ctx["vllm_op"] = vllm_ops.load_fused_sigmoid_gating(vllm_ops_dir)
        meta["vllm_op_file_sha256"] = vllm_ops.op_file_sha256(vllm_ops_dir)
        meta["vllm_version"] = vllm_ops.VLLM_VERSION
    except Exception as e:
        ctx["vllm_error"] = repr(e)[:300]
        meta["notes"].append(f"vLLM op not loaded: {e!r}"[:300])


def _op_row(op, case, ctx: dict, cell: tuple, copy_gbps: float, notes: list) -> dict | None:  # type: ignore[no-untyped-def]
    """One operator on one case: built, checked against float64, timed if the check
    passed; None (noted) when it cannot be built. ``cell``: (shape, state dtype, tree, B)."""
    name, bkernel, _, _, build = op
    shape, sd, tree, batch = cell
    w = tree.num_nodes
    row = {"kernel": name, "state_dtype": sd, "T": w, "tree": tree.label, "B": batch}
    try:
        prep = build(case, ctx)
    except LookupError as e:
        notes.append(f"{name} {sd} {tree.label} B={batch}: {e}"[:300])
        return None
    except Exception as e:
        notes.append(f"{name} {sd} {tree.label} B={batch}: {e!r}"[:300])
        print("FAILED", notes[-1], flush=True)
        return None
    tol = TOLERANCE[sd, prep.math]
    ok = prep.check["state_err"] <= tol and prep.check["o_err"] <= O_TOLERANCE
    row |= {"math": prep.math, "config": prep.config, "check_ok": ok,
            "state_err": f"{prep.check['state_err']:.3g}",
            "state_err_max_head": f"{prep.check['state_err_max_head']:.3g}",
            "o_err": f"{prep.check['o_err']:.3g}"}  # fmt: skip
    if ok:  # never time a kernel whose float64 check failed
        p20, p50, p80 = time_graph_us(prep.fn)
        nbytes = bytes_moved(bkernel, shape, sd, w, batch)
        row |= {"p20_us": round(p20, 2), "p50_us": round(p50, 2),
                "p80_us": round(p80, 2), "bytes_moved": nbytes,
                "floor_us": round(nbytes / (copy_gbps * 1e3), 2),
                "achieved_tbps": round(nbytes / (p50 * 1e6), 3)}  # fmt: skip
    else:
        notes.append(
            f"not timed: {name} ({prep.math}) {sd} {tree.label} B={batch} "
            f"failed its float64 check {prep.check}"[:400]
        )
    return row


def run(
    out: Path,
    batches,
    budget_s: float,
    vllm_ops_dir: Path,
    sweep: bool,
    storeall_config: dict | None = None,
) -> int:
    import torch

    deadline = time.monotonic() + budget_s
    out.mkdir(parents=True, exist_ok=True)
    shape = MODEL_SHAPES[0]
    copy_gbps = measure_copy_gbps()
    meta = _meta(shape, copy_gbps)
    ctx: dict = {"vllm_op": None, "storeall_config": {}}
    _load_vllm_op(ctx, meta, vllm_ops_dir)
    sweep_rows: list[dict] = []
    if storeall_config is not None:  # a swept configuration passed in (no sweep)
        ctx["storeall_config"] = storeall_config
    elif sweep:
        ctx["storeall_config"] = sweep_storeall(shape, max(batches), sweep_rows,
                                                deadline - 0.6 * budget_s)  # fmt: skip
        write_csv(out / "storeall_sweep.csv", sweep_rows,
                  ("state_dtype", "T", "B", "config", "p50_us"))  # fmt: skip
    meta["storeall_config"] = ctx["storeall_config"]
    atomic_write(out / "side_by_side_meta.json", json.dumps(meta, indent=1))
    rows: list[dict] = []
    for batch in batches:
        for sd in STATE_DTYPES:
            for tree in WINDOWS:
                if time.monotonic() > deadline:
                    meta["notes"].append(f"budget spent before B={batch} {sd} {tree.label}")
                    break
                w = tree.num_nodes
                case = make_case(shape, sd, batch, tree, seed=1000 * batch + w)
                ctx["truth"] = truth(case, ncheck(case))
                for op in OPS:
                    _, _, chain_only, dtypes, _ = op
                    if sd not in dtypes or (chain_only and not tree.is_chain):
                        continue
                    row = _op_row(op, case, ctx, (shape, sd, tree, batch), copy_gbps,
                                  meta["notes"])  # fmt: skip
                    if row is not None:
                        rows.append(row)
                        print("sbs", json.dumps(row), flush=True)
                del case, ctx["truth"]
                torch.cuda.empty_cache()
                write_csv(out / "side_by_side.csv", rows, COLUMNS)
    meta["num_rows"] = len(rows)
    atomic_write(out / "side_by_side_meta.json", json.dumps(meta, indent=1))
    return 0


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--batches", type=int, nargs="+", default=[256, 1])
    ap.add_argument("--budget-s", type=float, default=300.0)
    ap.add_argument("--vllm-ops", type=Path, default=Path(".vllmwheel/ops"))
    ap.add_argument("--no-sweep", action="store_true", help="skip the store-all sweep")
    ap.add_argument(
        "--storeall-config",
        type=json.loads,
        default=None,
        help="JSON {state dtype: store-all launch config} for the tuned store-all (no sweep)",
    )
    args = ap.parse_args(argv)
    for b in args.batches:
        if b < 1:
            ap.error(f"--batches: each B must be >= 1, got {b}")
    return run(
        args.out, args.batches, args.budget_s, args.vllm_ops, not args.no_sweep,
        args.storeall_config,
    )  # fmt: skip


if __name__ == "__main__":
    raise SystemExit(main())
