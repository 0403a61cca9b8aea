"""The grid's float64 checks: tolerances, which kernels each check covers, the cell
inputs and timed closures of run.py's kernels, and run_checks."""

from __future__ import annotations

from collections.abc import Callable

from .shapes import (
    MODEL_SHAPES,
    STATE_DTYPES,
    WINDOWS,
    ModelShape,
)

COLUMNS = (
    "kernel",
    "model_shape",
    "state_dtype",
    "T",
    "tree",
    "B",
    "Hv",
    "Hk",
    "dk",
    "dv",
    "p20_us",
    "p50_us",
    "p80_us",
    "bytes_moved",
    "achieved_gbps",
    "floor_us",
    "copy_gbps",
)
# relative errors against float64 (round 5): committed fp32 states within the accuracy
# contract (1e-6, _jit.DotPrecision); pseudo-values are fp32 intermediates (1e-5); bf16
# states and outputs within bf16 rounding over a window
# fla's kernels are reference points, not held to capsim's contract: its chunk kernel runs
# its products in bf16/tf32 (fp32 state 3.2e-3 off float64, round 5 run 1), so fla rows
# are checked at the bf16 class ("third_party")
CHECK_TOL = {"bf16_out": 1e-2, "fp32_state": 1e-6, "fp32_vt": 1e-5, "bf16_state": 1.5e-2,
             "third_party": 1.5e-2}  # fmt: skip
# which timed kernels each check covers (a kernel with a failed or missing check is not
# timed)
CHECK_KERNELS = {
    "storeall": ("storeall",),
    "treewy_o": ("treewy_verify", "treewy_commit", "treewy_verify_commit"),
    "treewy_vt": ("treewy_verify", "treewy_commit", "treewy_verify_commit"),
    "treewy_commit_state": ("treewy_commit", "treewy_verify_commit"),
    "fused": ("fused_chain",),
    "deferred": ("deferred",),
    "fla_recurrent": ("fla_fused_recurrent",),
    "fla_chunk": ("fla_chunk",),
}


def check_tolerance(key: str, state_dtype: str) -> float:
    if key.endswith("_o"):
        return CHECK_TOL["bf16_out"]
    if key.startswith("fla_"):
        return CHECK_TOL["third_party"]
    if state_dtype != "float32":
        return CHECK_TOL["bf16_state"]
    return CHECK_TOL["fp32_vt"] if key.endswith("_vt") else CHECK_TOL["fp32_state"]


def checked_kernels(checks: list[dict]) -> dict[tuple[str, str, str], set[str]]:
    """(model shape, state dtype, tree label) -> kernels whose every check passed."""
    out: dict[tuple[str, str, str], set[str]] = {}
    for c in checks:
        if "model_shape" not in c:
            continue
        key = (c["model_shape"], c["state_dtype"], c["tree"])
        covered: set[str] = set()
        failed: set[str] = set()
        for name, val in c.items():
            if not isinstance(val, float):
                continue
            for prefix, kernels in CHECK_KERNELS.items():
                if name.startswith(prefix):
                    bad = not val <= check_tolerance(name, c["state_dtype"])
                    (failed if bad else covered).update(kernels)
        out[key] = covered - failed
    return out


class Cell:
    """Random inputs for one (model shape, state dtype, B, window) cell, on the GPU
    (``device``: another device for tests, e.g. "cpu" under TRITON_INTERPRET=1)."""

    def __init__(
        self, shape: ModelShape, state_dtype: str, batch: int, tree, seed: int, device: str = "cuda"
    ):
        import torch

        gen = torch.Generator(device=device).manual_seed(seed)
        dev = device
        b, w = batch, tree.num_nodes
        hv, hk, dk, dv = shape.num_v_heads, shape.num_k_heads, shape.dk, shape.dv
        sdt = getattr(torch, state_dtype)

        def randn(*s):
            return torch.randn(*s, device=dev, generator=gen)

        def rand(*s):
            return torch.rand(*s, device=dev, generator=gen)

        self.tree, self.batch, self.shape = tree, batch, shape
        self.q = randn(b, w, hk, dk).bfloat16()
        self.k = randn(b, w, hk, dk).bfloat16()
        self.v = randn(b, w, hv, dv).bfloat16()
        self.log_gate = torch.log(0.3 + 0.7 * rand(b, w, hv))
        self.beta = 0.05 + 0.9 * rand(b, w, hv)
        self.parent = torch.tensor(tree.parent, dtype=torch.int32, device=dev)
        self.pool = (0.1 * randn(b, hv, dv, dk)).to(sdt)
        self.slot = torch.randperm(b, device=dev, generator=gen).to(torch.int32)
        self.accepted = torch.randint(0, w, (b,), device=dev, generator=gen, dtype=torch.int32)
        self.h0 = (0.1 * randn(b, hv, dv, dk)).to(sdt)  # dense initial state for fla


def kernel_fn(
    name: str,
    c: Cell,
    sa_pool,
    sa_init,
    sa_slots,
    storeall_config: dict | None = None,
    policy=None,
) -> Callable[[], object]:
    """The timed closure of ``name`` on cell ``c`` (``policy``: TreeWY launch policy)."""
    from ... import gdn_verify as ck

    args = (c.q, c.k, c.v, c.log_gate, c.beta)
    if name == "storeall":
        chain = c.tree.is_chain
        return lambda: ck.storeall_verify(
            *args, sa_pool, sa_init, sa_slots, c.parent, is_chain=chain, config=storeall_config
        )
    if name == "treewy_verify":
        return lambda: ck.treewy_verify(*args, c.pool, c.slot, c.parent, policy=policy)
    if name == "treewy_commit":
        _, vt = ck.treewy_verify(*args, c.pool, c.slot, c.parent, policy=policy)
        return lambda: ck.treewy_commit(
            c.pool, c.slot, c.k, vt, c.log_gate, c.parent, c.accepted, policy=policy
        )

    if name == "treewy_verify_commit":

        def both():
            _, vt = ck.treewy_verify(*args, c.pool, c.slot, c.parent, policy=policy)
            ck.treewy_commit(
                c.pool, c.slot, c.k, vt, c.log_gate, c.parent, c.accepted, policy=policy
            )

        return both
    if name == "fused_chain":
        return lambda: ck.treewy_fused_verify_commit(
            *args, c.pool, c.slot, c.parent, c.accepted, policy=policy
        )
    if name == "deferred":
        ping = ck.PendingCommit.empty(c.k, c.v, c.parent)
        pong = ck.PendingCommit.empty(c.k, c.v, c.parent)
        _, vt = ck.treewy_verify(*args, c.pool, c.slot, c.parent, policy=policy)
        ping.vt.copy_(vt)
        ping.k.copy_(c.k)
        ping.log_gate.copy_(c.log_gate)
        ping.accepted.copy_(c.accepted)
        return lambda: ck.treewy_deferred_verify(
            *args, c.pool, c.slot, c.parent, ping, pong, policy=policy
        )
    if name == "fla_fused_recurrent":
        from fla.ops.gated_delta_rule import fused_recurrent_gated_delta_rule

        return lambda: fused_recurrent_gated_delta_rule(
            c.q, c.k, c.v, g=c.log_gate, beta=c.beta, initial_state=c.h0,
            output_final_state=True, use_qk_l2norm_in_kernel=True, state_v_first=True,
        )  # fmt: skip
    if name == "fla_chunk":
        from fla.ops.gated_delta_rule import chunk_gated_delta_rule

        return lambda: chunk_gated_delta_rule(
            c.q, c.k, c.v, c.log_gate, c.beta, initial_state=c.h0,
            output_final_state=True, use_qk_l2norm_in_kernel=True, state_v_first=True,
        )  # fmt: skip
    raise ValueError(f"unknown kernel {name!r}")


def _rel(ref, out) -> float:
    ref, out = ref.double(), out.double()
    if not bool(out.isfinite().all()):
        return float("inf")
    return float((out - ref).norm() / ref.norm().clamp_min(1e-300))


def _reference(c: Cell, tree, shape: ModelShape):  # type: ignore[no-untyped-def]
    """The float64 recurrence on cell ``c``: outputs, per-node states, pseudo-values
    ``vt_t = b_t (v_t - a_t S_p k_t)`` and each request's accepted state."""
    import torch

    from ... import gdn_verify as ck
    from ...gdn_verify.reference import l2norm

    s0 = c.pool[c.slot.long()].clone()
    args = (c.q, c.k, c.v, c.log_gate, c.beta)
    o_ref, st_ref = ck.recurrence_reference(*args, s0.double(), tree.parent)
    kn = l2norm(c.k.double()).repeat_interleave(shape.num_v_heads // shape.num_k_heads, 2)
    s_par = torch.stack([s0.double() if p < 0 else st_ref[:, p] for p in tree.parent], dim=1)
    a = torch.exp(c.log_gate.double())
    vt_ref = c.beta.double()[..., None] * (
        c.v.double() - a[..., None] * torch.einsum("bthvk,bthk->bthv", s_par, kn)
    )
    s_acc = st_ref[torch.arange(c.batch), c.accepted.long()]
    return s0, args, o_ref, st_ref, vt_ref, s_acc


def _check_storeall(c: Cell, tree, s0, args, o_ref, st_ref, device: str) -> dict:  # type: ignore[no-untyped-def]
    """Store-all into a NaN-filled pool: outputs and every node's state."""
    import torch

    from ... import gdn_verify as ck

    b, w = c.batch, tree.num_nodes
    sa_pool = torch.empty((b * (w + 1), *c.pool.shape[1:]), dtype=c.pool.dtype, device=device)
    sa_pool[:b] = s0
    sa_init = torch.arange(b, dtype=torch.int32, device=device)
    sa_slots = (b + torch.arange(b * w, dtype=torch.int32, device=device)).view(b, w)
    sa_pool[b:] = float("nan")
    o = ck.storeall_verify(*args, sa_pool, sa_init, sa_slots, c.parent, is_chain=tree.is_chain)
    return {"storeall_o": _rel(o_ref, o), "storeall_states": _rel(st_ref, sa_pool[sa_slots.long()])}


def _check_treewy(c: Cell, c2: Cell, tree, args, refs, policy) -> dict:  # type: ignore[no-untyped-def]
    """Verify + commit, fused, and deferred (window 1's accepted path applied inside
    window 2's verify, on the second cell's inputs)."""
    from ... import gdn_verify as ck

    o_ref, vt_ref, s_acc = refs
    res: dict = {}
    pool = c.pool.clone()
    o, vt = ck.treewy_verify(*args, pool, c.slot, c.parent, policy=policy)
    res["treewy_o"] = _rel(o_ref, o)
    res["treewy_vt"] = _rel(vt_ref, vt)
    ck.treewy_commit(pool, c.slot, c.k, vt, c.log_gate, c.parent, c.accepted, policy=policy)
    res["treewy_commit_state"] = _rel(s_acc, pool[c.slot.long()])
    pool = c.pool.clone()
    o = ck.treewy_fused_verify_commit(*args, pool, c.slot, c.parent, c.accepted, policy=policy)
    res["fused_o"] = _rel(o_ref, o)
    res["fused_state"] = _rel(s_acc, pool[c.slot.long()])
    pool = c.pool.clone()
    ping = ck.PendingCommit(k=c.k, vt=vt, log_gate=c.log_gate, parent=c.parent, accepted=c.accepted)
    pong = ck.PendingCommit.empty(c.k, c.v, c.parent)
    o2 = ck.treewy_deferred_verify(
        c2.q, c2.k, c2.v, c2.log_gate, c2.beta, pool, c.slot, c.parent, ping, pong,
        policy=policy,
    )  # fmt: skip
    o2_ref, _ = ck.recurrence_reference(
        c2.q, c2.k, c2.v, c2.log_gate, c2.beta, pool[c.slot.long()].double(), tree.parent
    )
    res["deferred_state"] = _rel(s_acc, pool[c.slot.long()])
    res["deferred_o"] = _rel(o2_ref, o2)
    return res


def _fla_figures(res: dict, name: str, o_ht, o_ref, st_ref) -> None:  # type: ignore[no-untyped-def]
    """Record one fla kernel's output and final-state errors as ``fla_<name>_o/_state``."""
    o, ht = o_ht
    res[f"fla_{name}_o"] = _rel(o_ref, o)
    res[f"fla_{name}_state"] = _rel(st_ref[:, -1], ht)


def _check_fla(c: Cell, s0, args, o_ref, st_ref) -> dict:  # type: ignore[no-untyped-def]
    """fla's recurrent and chunked kernels on a chain (an import or run error noted)."""
    res: dict = {}
    common = {"initial_state": s0, "output_final_state": True,
              "use_qk_l2norm_in_kernel": True, "state_v_first": True}  # fmt: skip
    try:
        from fla.ops.gated_delta_rule import fused_recurrent_gated_delta_rule

        o_ht = fused_recurrent_gated_delta_rule(*args[:3], g=c.log_gate, beta=c.beta, **common)
        _fla_figures(res, "recurrent", o_ht, o_ref, st_ref)
        from fla.ops.gated_delta_rule import chunk_gated_delta_rule

        o_ht = chunk_gated_delta_rule(*args[:3], c.log_gate, c.beta, **common)
        _fla_figures(res, "chunk", o_ht, o_ref, st_ref)
    except Exception as e:
        res["fla_error"] = repr(e)[:200]
    return res


def run_checks(
    batch: int = 2,
    shapes=MODEL_SHAPES,
    state_dtypes=STATE_DTYPES,
    windows=WINDOWS,
    policy=None,
    device: str = "cuda",
) -> list[dict]:
    """Every kernel at the real head shapes against the float64 recurrence (on the GPU;
    ``device``: another device for tests)."""
    out = []
    for shape in shapes:
        for sd in state_dtypes:
            for tree in windows:
                c = Cell(shape, sd, batch, tree, seed=1234, device=device)
                c2 = Cell(shape, sd, batch, tree, seed=4321, device=device)
                w = tree.num_nodes
                s0, args, o_ref, st_ref, vt_ref, s_acc = _reference(c, tree, shape)
                res = {"model_shape": shape.name, "state_dtype": sd, "tree": tree.label, "T": w}
                res |= _check_storeall(c, tree, s0, args, o_ref, st_ref, device)
                res |= _check_treewy(c, c2, tree, args, (o_ref, vt_ref, s_acc), policy)
                if tree.is_chain:
                    res |= _check_fla(c, s0, args, o_ref, st_ref)
                worst = {
                    key: val
                    for key, val in res.items()
                    if isinstance(val, float) and not val <= check_tolerance(key, sd)
                }
                res["ok"] = not worst
                out.append(res)
                print(
                    f"check {shape.name:24s} {sd:8s} {tree.label:6s} W={w:2d} ok={res['ok']} "
                    + " ".join(f"{k}={v:.1e}" for k, v in res.items() if isinstance(v, float)),
                    flush=True,
                )
    return out
