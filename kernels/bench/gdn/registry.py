"""The GDN kernel registry: one entry per measured kernel (name, timed call, float64
checks, bytes moved), so a new commit mode is one entry plus its kernel.

Every entry builds, for one ``Case`` (cases.py), a ``Prepared``: the timed closure and
the accuracy of the same operator on the same inputs against a float64 recurrence over
**all** requests of the case (``Truth``): the committed state's relative error per
(request, head) (its maximum is the row's ``err_max_req_head``), its norm-wise error, and
the outputs' error. ``bytes_moved`` is the fewest bytes one layer call must move
(``shapes.bytes_moved``; entries that shapes.py does not know say theirs here).

Names are the calibration table's ``kernel`` values (capsim/calibration), so the same
rows feed the benchmark tables and the step model.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

import torch

from .cases import Case
from .shapes import ModelShape, bytes_moved

__all__ = ["KERNELS", "Kernel", "Prepared", "Truth", "head_errors", "truth_all"]

CHUNK_ELEMS = 1 << 27  # float64 elements of one reference chunk's states (1 GiB)


@dataclass(frozen=True)
class Prepared:
    """A timed closure and the float64 accuracy of the same operator on the same inputs."""

    fn: Callable[[], object]
    check: dict
    math: str = "fp32"
    config: str = ""


@dataclass
class Truth:
    """float64 outputs [B, W, Hv, dv] and accepted-node states [B, Hv, dv, dk] of every
    request (the committed state a correct kernel leaves at the request's slot)."""

    o: torch.Tensor
    accepted_state: torch.Tensor
    vt: torch.Tensor | None = None


def truth_all(case: Case, log_gate=None, beta=None, with_vt: bool = False) -> Truth:
    """The float64 truth of every request, computed in chunks of requests (the per-node
    states of a chunk are dropped once its accepted states are taken)."""
    from ...gdn_verify.reference import recurrence_reference
    from .cases import pseudo_values

    g = case.log_gate if log_gate is None else log_gate
    bt = case.beta if beta is None else beta
    b, w = case.batch, case.num_nodes
    sh = case.shape
    per_req = w * sh.num_v_heads * sh.dv * sh.dk
    step = max(1, CHUNK_ELEMS // per_req)
    s0_all = case.state0()
    outs, accs, vts = [], [], []
    for lo in range(0, b, step):
        hi = min(b, lo + step)
        o, states = recurrence_reference(
            case.q[lo:hi], case.k[lo:hi], case.v[lo:hi], g[lo:hi], bt[lo:hi],
            s0_all[lo:hi].double(), case.tree.parent,
        )  # fmt: skip
        acc = case.accepted[lo:hi].long()
        accs.append(states[torch.arange(hi - lo, device=states.device), acc])
        outs.append(o)
        if with_vt:
            sub = _sub_case(case, lo, hi)
            vts.append(pseudo_values(sub, states, hi - lo))
        del states
    return Truth(
        o=torch.cat(outs), accepted_state=torch.cat(accs), vt=torch.cat(vts) if vts else None
    )


def _sub_case(case: Case, lo: int, hi: int) -> Case:
    from dataclasses import replace

    return replace(
        case, q=case.q[lo:hi], k=case.k[lo:hi], v=case.v[lo:hi],
        log_gate=case.log_gate[lo:hi], beta=case.beta[lo:hi],
        pool=case.state0()[lo:hi].contiguous(),
        slot=torch.arange(hi - lo, dtype=case.slot.dtype, device=case.slot.device),
        accepted=case.accepted[lo:hi],
    )  # fmt: skip


def head_errors(ref: torch.Tensor, got: torch.Tensor) -> dict:
    """Worst per-(request, head) and norm-wise relative error of states [B, Hv, dv, dk]
    (inf if ``got`` has a non-finite value), and the request and head of the worst."""
    got = got.double()
    if not bool(got.isfinite().all()):
        return {"err_max_req_head": float("inf"), "state_err": float("inf"), "worst": (-1, -1)}
    diff = (got - ref).flatten(2).norm(dim=2)
    per = diff / ref.flatten(2).norm(dim=2).clamp_min(1e-300)
    flat = int(per.argmax())
    hv = per.shape[1]
    total = float(diff.norm() / ref.flatten(2).norm(dim=2).norm().clamp_min(1e-300))
    return {"err_max_req_head": float(per.max()), "state_err": total,
            "worst": (flat // hv, flat % hv)}  # fmt: skip


def out_error(ref: torch.Tensor, got: torch.Tensor) -> float:
    got = got.double()
    if not bool(got.isfinite().all()):
        return float("inf")
    return float((got - ref).norm() / ref.norm().clamp_min(1e-300))


def _args(case: Case) -> tuple:
    return (case.q, case.k, case.v, case.log_gate, case.beta)


def _treewy_math(case: Case) -> str:
    from ...gdn_verify._jit import dot_precision

    prec = dot_precision(getattr(torch, case.state_dtype), case.q.dtype, None, "cuda")
    return "tf32" if prec.state == "tf32" else "fp32"


def _committed(case: Case, pool: torch.Tensor) -> torch.Tensor:
    return pool[case.slot.long()]


def _persistent():
    """kcode's opt-in persistent verify stream: 2 CTAs per SM (gdn_verify/NOTES.md)."""
    from ...gdn_verify import LaunchPolicy

    return LaunchPolicy(persistent_ctas_per_sm=2)


def build_verify(case: Case, ctx: dict, policy=None) -> Prepared:
    from ... import gdn_verify as ck

    tr: Truth = ctx["truth"]
    pool = case.pool.clone()
    o, vt = ck.treewy_verify(*_args(case), pool, case.slot, case.parent, policy=policy)
    check = {"err_max_req_head": float("nan"), "state_err": float("nan"),
             "o_err": out_error(tr.o, o)}  # fmt: skip
    if tr.vt is not None:
        check["vt_err"] = out_error(tr.vt, vt)

    def fn():
        ck.treewy_verify(*_args(case), pool, case.slot, case.parent, policy=policy)

    return Prepared(fn, check, _treewy_math(case), _policy_label(policy))


def _policy_label(policy) -> str:
    """The row's ``config``: what a variant's LaunchPolicy changes from the default."""
    if policy is None:
        return ""
    return "persistent x2" if getattr(policy, "persistent_ctas_per_sm", 0) else "policy"


def build_commit(case: Case, ctx: dict) -> Prepared:
    from ... import gdn_verify as ck

    tr: Truth = ctx["truth"]
    pool = case.pool.clone()
    _, vt = ck.treewy_verify(*_args(case), pool, case.slot, case.parent)
    vt = vt.clone()
    ck.treewy_commit(pool, case.slot, case.k, vt, case.log_gate, case.parent, case.accepted)
    check = head_errors(tr.accepted_state, _committed(case, pool))
    tpool = case.pool.clone()

    def fn():
        ck.treewy_commit(tpool, case.slot, case.k, vt, case.log_gate, case.parent, case.accepted)

    return Prepared(fn, check, _treewy_math(case))


def build_verify_commit(case: Case, ctx: dict, policy=None) -> Prepared:
    from ... import gdn_verify as ck

    tr: Truth = ctx["truth"]

    def run(pool):
        o, vt = ck.treewy_verify(*_args(case), pool, case.slot, case.parent, policy=policy)
        ck.treewy_commit(pool, case.slot, case.k, vt, case.log_gate, case.parent, case.accepted,
                         policy=policy)  # fmt: skip
        return o

    pool = case.pool.clone()
    o = run(pool)
    check = head_errors(tr.accepted_state, _committed(case, pool)) | {"o_err": out_error(tr.o, o)}
    del pool
    tpool = case.pool.clone()
    return Prepared(lambda: run(tpool), check, _treewy_math(case), _policy_label(policy))


def build_fused(case: Case, ctx: dict) -> Prepared:
    from ... import gdn_verify as ck

    tr: Truth = ctx["truth"]
    pool = case.pool.clone()
    o = ck.treewy_fused_verify_commit(*_args(case), pool, case.slot, case.parent, case.accepted)
    check = head_errors(tr.accepted_state, _committed(case, pool)) | {"o_err": out_error(tr.o, o)}
    tpool = case.pool.clone()

    def fn():
        ck.treewy_fused_verify_commit(*_args(case), tpool, case.slot, case.parent, case.accepted)

    return Prepared(fn, check, _treewy_math(case))


def _pending(case: Case, pool):
    """A pending commit of this window (ping) and an empty one (pong)."""
    from ... import gdn_verify as ck

    _, vt = ck.treewy_verify(*_args(case), pool, case.slot, case.parent)
    ping = ck.PendingCommit.empty(case.k, case.v, case.parent)
    pong = ck.PendingCommit.empty(case.k, case.v, case.parent)
    ping.vt.copy_(vt)
    ping.k.copy_(case.k)
    ping.log_gate.copy_(case.log_gate)
    ping.accepted.copy_(case.accepted)
    return ping, pong


def build_deferred(case: Case, ctx: dict, policy=None) -> Prepared:
    """Deferred: the step applies the previous window's accepted path (here: this window's,
    so the committed state it leaves is checkable) inside its verify."""
    from ... import gdn_verify as ck

    tr: Truth = ctx["truth"]
    pool = case.pool.clone()
    ping, pong = _pending(case, pool)
    ck.treewy_deferred_verify(*_args(case), pool, case.slot, case.parent, ping, pong,
                              policy=policy)  # fmt: skip
    check = head_errors(tr.accepted_state, _committed(case, pool))
    tpool = case.pool.clone()
    tping, tpong = _pending(case, tpool)

    def fn():
        ck.treewy_deferred_verify(*_args(case), tpool, case.slot, case.parent, tping, tpong,
                                  policy=policy)  # fmt: skip

    return Prepared(fn, check, _treewy_math(case), _policy_label(policy))


def storeall_pool(case: Case):
    b, w = case.batch, case.num_nodes
    pool = torch.empty((b * (w + 1), *case.pool.shape[1:]), dtype=case.pool.dtype,
                       device=case.pool.device)  # fmt: skip
    pool[:b] = case.state0()
    init = torch.arange(b, dtype=torch.int32, device=pool.device)
    slots = (b + torch.arange(b * w, dtype=torch.int32, device=pool.device)).view(b, w)
    return pool, init, slots


def build_storeall(case: Case, ctx: dict) -> Prepared:
    """capsim's store-all at its swept (tuned) launch configuration."""
    import json

    from ... import gdn_verify as ck

    tr: Truth = ctx["truth"]
    cfg = ctx.get("storeall_config", {}).get(case.state_dtype)
    pool, init, slots = storeall_pool(case)
    chain = case.tree.is_chain

    def fn():
        return ck.storeall_verify(*_args(case), pool, init, slots, case.parent,
                                  is_chain=chain, config=cfg)  # fmt: skip

    o = fn()
    b = case.batch
    got = pool[slots[torch.arange(b, device=pool.device), case.accepted.long()].long()]
    check = head_errors(tr.accepted_state, got) | {"o_err": out_error(tr.o, o)}
    return Prepared(fn, check, "fp32", json.dumps(cfg) if cfg else "default")


def _vllm_truth(case: Case, ctx: dict, g_eff, beta_eff) -> Truth:
    if ctx.get("warm"):  # compile warm-up: no float64 work
        return ctx["truth"]
    key = ("vllm_truth", id(case))
    if key not in ctx:
        ctx[key] = truth_all(case, log_gate=g_eff, beta=beta_eff)
    return ctx[key]


def build_vllm_storeall(case: Case, ctx: dict) -> Prepared:
    """vLLM 0.33's Triton store-all op, as its GDN layer calls it for speculative decoding."""
    from . import vllm_storeall as vs

    op = ctx.get("vllm_op")
    if op is None:
        raise LookupError(ctx.get("vllm_error", "vLLM op not loaded"))
    b, w = case.batch, case.num_nodes
    gates, (g_eff, beta_eff) = vs.gate_inputs(case.log_gate, case.beta)
    pool = torch.zeros((1 + b * w, *case.pool.shape[1:]), dtype=case.pool.dtype,
                       device=case.pool.device)  # fmt: skip
    slots = (1 + torch.arange(b * w, dtype=torch.int32, device=pool.device)).view(b, w)
    num_acc = torch.ones(b, dtype=torch.int32, device=pool.device)  # state at slots[:, 0]
    pool[slots[:, 0].long()] = case.state0()
    call = vs.make_call(op, case.q, case.k, case.v, gates, pool, slots, num_acc)
    o, _ = call()
    tr = _vllm_truth(case, ctx, g_eff, beta_eff)
    got = pool[slots[torch.arange(b, device=pool.device), case.accepted.long()].long()]
    check = head_errors(tr.accepted_state, got) | {
        "o_err": out_error(tr.o, o.view(b, w, *o.shape[2:]))
    }
    pool[slots[:, 0].long()] = case.state0()
    return Prepared(call, check, "fp32", "vLLM 0.33.0 as shipped")


def build_vllm_decode(case: Case, ctx: dict) -> Prepared:
    """vLLM 0.33's plain GDN decode (T = 1, no speculation): the packed recurrent kernel."""
    from . import vllm_storeall as vs

    op = ctx.get("vllm_decode_op")
    if op is None:
        raise LookupError(ctx.get("vllm_error", "vLLM decode op not loaded"))
    b = case.batch
    gates, (g_eff, beta_eff) = vs.gate_inputs(case.log_gate, case.beta)
    pool = torch.zeros((1 + b, *case.pool.shape[1:]), dtype=case.pool.dtype,
                       device=case.pool.device)  # fmt: skip
    slots = 1 + torch.arange(b, dtype=torch.int32, device=pool.device)
    pool[slots.long()] = case.state0()
    call = vs.make_decode_call(op, case.q, case.k, case.v, gates, pool, slots)
    o, _ = call()
    tr = _vllm_truth(case, ctx, g_eff, beta_eff)
    check = head_errors(tr.accepted_state, pool[slots.long()]) | {
        "o_err": out_error(tr.o, o.view(b, 1, *o.shape[2:]))
    }
    pool[slots.long()] = case.state0()
    return Prepared(call, check, "fp32", "vLLM 0.33.0 as shipped (packed decode)")


def replay_capacity(max_path: int) -> int:
    """Ring entries R of the replay commit mode (capsim.commit_modes: ``ring_windows``
    longest paths, R = 4 P): the ring flushes once per ``ring_windows`` steps."""
    from capsim.commit_modes import get_mode

    return get_mode("replay").ring_windows * max_path


def _max_path(parent) -> int:
    from ...gdn_verify.tree import depths

    return max(depths(list(parent))) + 1


def _replay_committed(case: Case, pool, ring) -> torch.Tensor:
    """float64 committed state of every request after one replay step from an empty ring:
    its checkpoint with its ring entries applied as a chain (requests grouped by length)."""
    from ...gdn_verify.reference import commit_reference

    ck_state = pool[case.slot.long()]
    lens = ring.length.long()
    out = torch.empty(ck_state.shape, dtype=torch.float64, device=ck_state.device)
    for n in sorted(set(lens.tolist())):
        idx = (lens == n).nonzero().flatten()
        if n == 0:
            out[idx] = ck_state[idx].double()
            continue
        # commit_reference builds its ancestor matrix on the CPU: its inputs go there too
        out[idx] = commit_reference(
            ck_state[idx].cpu(), ring.k[idx, :n].cpu(), ring.vt[idx, :n].cpu(),
            ring.log_gate[idx, :n].cpu(), tuple(range(-1, n - 1)), [n - 1] * len(idx),
        ).to(out.device)  # fmt: skip
    return out


def build_replay(case: Case, ctx: dict) -> Prepared:
    """Replay (ReplaySSM's checkpoint + ring of accepted inputs): one whole step (verify
    from checkpoint + ring, append the accepted path, checkpoint written on flush)."""
    from ... import gdn_verify as ck

    tr: Truth = ctx["truth"]
    cap = replay_capacity(_max_path(case.tree.parent))
    pool = case.pool.clone()
    ring = ck.ReplayRing.empty(case.k, case.v, case.parent, capacity=cap)
    o = ck.replay_step(*_args(case), pool, case.slot, case.parent, ring, case.accepted)
    check = {"o_err": out_error(tr.o, o)}
    if not ctx.get("warm"):
        check |= head_errors(tr.accepted_state, _replay_committed(case, pool, ring))
    else:
        check |= {"err_max_req_head": 0.0, "state_err": 0.0}
    del pool, ring
    tpool = case.pool.clone()
    tring = ck.ReplayRing.empty(case.k, case.v, case.parent, capacity=cap)

    def fn():
        ck.replay_step(*_args(case), tpool, case.slot, case.parent, tring, case.accepted)

    return Prepared(fn, check, _treewy_math(case), f"R={cap}")


def _replay_bytes(shape: ModelShape, state_dtype: str, w: int, b: int, tree=None) -> int:
    """kcode's replay_step_bytes at the mean accepted path of a uniform accepted node."""
    from ...gdn_verify import replay_step_bytes
    from ...gdn_verify.tree import TreeSpec, depths

    parent = (tree or TreeSpec.chain(w)).parent
    dep = depths(list(parent))
    max_path = max(dep) + 1
    per = replay_step_bytes(
        num_v_heads=shape.num_v_heads, num_k_heads=shape.num_k_heads, dk=shape.dk,
        dv=shape.dv, window_tok=w, capacity=replay_capacity(max_path), max_path=max_path,
        accepted_path_tok=sum(d + 1 for d in dep) / len(dep),
        state_bytes=4 if state_dtype == "float32" else 2,
    )  # fmt: skip
    return int(per["total_bytes"] * b)


@dataclass(frozen=True)
class Kernel:
    """One registry entry: ``windows`` is "any", "chain" (chains only) or "t1" (T = 1)."""

    name: str
    label: str
    build: Callable[[Case, dict], Prepared]
    windows: str = "any"
    bytes_fn: Callable[..., int] | None = None
    state_check: bool = True  # False: the kernel commits no state (verify alone)
    extra: dict = field(default_factory=dict)

    def applies(self, case: Case) -> bool:
        w = case.num_nodes
        if self.windows == "persistent":  # the two-launch path (B Hv >= 512 or W > 8), at
            # the benchmark's largest batch only (kcode: next to the default at B = 256)
            return case.batch >= 128 and (case.batch * case.shape.num_v_heads >= 512 or w > 8)
        if self.windows == "t1":
            return w == 1
        if self.windows == "chain":
            return case.tree.is_chain
        return True

    def bytes_moved(self, shape: ModelShape, state_dtype: str, w: int, b: int, tree=None) -> int:
        if self.bytes_fn is not None:
            return self.bytes_fn(shape, state_dtype, w, b, tree)
        return bytes_moved(self.name, shape, state_dtype, w, b)


def _decode_bytes(shape: ModelShape, state_dtype: str, w: int, b: int, tree=None) -> int:
    """Read S0 once, write one state, q/k/v/a/b in, o out: the fused-chain count at W = 1."""
    return bytes_moved("fused_chain", shape, state_dtype, w, b)


def _vllm_storeall_bytes(shape: ModelShape, state_dtype: str, w: int, b: int, tree=None) -> int:
    return bytes_moved("storeall", shape, state_dtype, w, b)


KERNELS: tuple[Kernel, ...] = (
    Kernel("treewy_verify", "TreeWY verify", build_verify, state_check=False),
    Kernel("treewy_commit", "TreeWY commit", build_commit),
    Kernel("treewy_verify_commit", "TreeWY verify+commit", build_verify_commit),
    Kernel("fused_chain", "TreeWY fused", build_fused),
    Kernel("deferred", "TreeWY deferred", build_deferred),
    Kernel("replay", "replay (checkpoint + ring)", build_replay, bytes_fn=_replay_bytes),
    Kernel("treewy_verify_p2", "TreeWY verify, persistent x2", lambda c, x: build_verify(
        c, x, _persistent()), "persistent", lambda s, d, w, b, t=None: bytes_moved(
        "treewy_verify", s, d, w, b), state_check=False),
    Kernel("treewy_verify_commit_p2", "TreeWY v+c, persistent x2", lambda c, x:
        build_verify_commit(c, x, _persistent()), "persistent", lambda s, d, w, b, t=None:
        bytes_moved("treewy_verify_commit", s, d, w, b)),
    Kernel("storeall", "capsim store-all (tuned)", build_storeall),
    Kernel("vllm_storeall", "vLLM store-all (Triton)", build_vllm_storeall, "chain",
           _vllm_storeall_bytes),
    Kernel("vllm_decode", "vLLM plain decode (T=1)", build_vllm_decode, "t1", _decode_bytes),
)  # fmt: skip


def by_name(name: str) -> Kernel:
    for k in KERNELS:
        if k.name == name:
            return k
    raise ValueError(f"kernel={name!r} is not in the registry ({[k.name for k in KERNELS]})")
