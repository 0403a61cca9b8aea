"""Round 14 (issue 19): the TreeWY verify (and deferred) launches rebuilt one rung at a time.

Round 13 showed that S_0 streamed with pipe_r's own access pattern reaches 0.97 of the
copy bandwidth, while the round-12 verify launch (prep + stream) reaches 0.68: the ~72 us
between them are the launch's other work. The rungs below add that work back one piece
at a time on the same cell, so the rung where the time jumps is where it goes:

- ``v0 stream``: round 13's ``tile_read_kernel`` at pipe_r's pattern (64-row dv tile halved
  at small B, 32-key chunks, 4 warps, 2 stages, 5 / SM), on the case's own pool and slots;
- ``v1 rows``: ``ladder_verify_kernel`` RUNG 1: + per key chunk the window's packed key /
  query rows loaded as pipe_r loads them (keys on rows < W, queries on rows W..2W-1, two
  masked loads of raw bf16 rows), both summed (the state sum and the row sum stored per
  program, so no load can be dropped);
- ``v2 products``: RUNG 2: + the packed K S^T / Q S^T products per chunk (``_jit.xdot``,
  bf16x3 as the real kernel) accumulated over the key chunks, stored as pipe_r stores its
  outputs: rows < W (K S_0^T) into vt (fp32), rows W..2W-1 (Q S_0^T) into o (bf16);
- ``v2b epilogue``: RUNG 3: + v and stage 1's row scales ck, cq loaded (from the recorded
  pipe_r call's scratch), vt = v - ck K S^T and o = cq Q S^T stored: the epilogue without
  its two [W, W] x [W, BV] products and their m1 / pm loads;
- ``v3 stream kernel``: the real ``treewy_pipe_kernel`` alone (imported: the launch that
  ``treewy_verify`` makes under the policy, recorded and replayed, reading the stage-1
  scratch that the recorded call wrote), i.e. v2 + the epilogue: v, ck, cq, m1, pm loaded,
  Vt = m1 (v - ck K S^T), O = cq Q S^T + pm Vt;
- ``prep``: the stage-1 window kernel (``treewy_prep_kernel``) of the same call alone;
- ``v4 full``: ``treewy_verify`` under the policy (prep + stream, the round-12 row).

Deferred (pipe_zw1p): ``d0`` round 13's ``tile_rw_kernel`` at pipe_zw1p's pattern with the
case's pending rows; ``d3`` the real deferred stream kernel alone; ``dprep`` stage 1 with
the pending coefficients alone; ``d4`` ``treewy_deferred_verify`` (prep + stream).

Every launch is checked once before it is timed: v0 / d0 as round 13; v1 the sums against
torch's float64 sums; v2 against float64 K S_0^T / Q S_0^T, v2b against v - ck K S_0^T /
cq Q S_0^T; v3 / v4 o and vt against the float64 recurrence (registry.truth_all); prep
its scratch equal to the recorded call's; d3 / d4 the committed state against the float64
accepted state (fp32 contract 1e-6). Nothing runs at import.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable
from dataclasses import dataclass, field

import torch
import triton
import triton.language as tl

from ...gdn_verify import treewy_pipe, treewy_prep
from ...gdn_verify._jit import dot_precision, pick_block_v, tile_coords, xdot
from ...gdn_verify.tree import TreeSpec
from .cases import Case, make_case
from .checks import CHECK_TOL
from .shapes import ModelShape, bytes_moved
from .stream_kernels import SMS_OFF_GPU, CellInputs, Launch, StreamSpec, _resources, prepare

__all__ = ["LadderCell", "RungLaunch", "capture", "ladder_verify_kernel", "rung_launch",
           "verify_reference"]  # fmt: skip


@triton.jit
def ladder_verify_kernel(q, k, v, ck, cq, state, state_slot, o, vt, out, NUM_TILES,
                         H: tl.constexpr,
                         HV: tl.constexpr, W: tl.constexpr, K: tl.constexpr, V: tl.constexpr,
                         BW: tl.constexpr, BK: tl.constexpr, BKC: tl.constexpr,
                         BV: tl.constexpr, NV: tl.constexpr, NUM_STAGES: tl.constexpr,
                         RUNG: tl.constexpr, STATE_PREC: tl.constexpr,
                         NATIVE: tl.constexpr):  # fmt: skip
    """treewy_pipe_kernel's verify loop (PACK, no TMA, no early rows) cut at RUNG.

    RUNG 1: per tile the pool slot, per key chunk the [BV, BKC] state chunk and the packed
    [BW, BKC] key / query rows; out[pid] = sum of the state chunks + sum of the rows.
    RUNG 2: the packed products accumulated, rows < W stored to vt, rows W..2W-1 to o.
    RUNG 3: + the epilogue without its [W, W] products: v and stage 1's row scales ck, cq
    loaded, vt = v - ck K S^T (the operand of m1 in the real kernel), o = cq Q S^T.
    """
    pid = tl.program_id(0)
    nprog = tl.num_programs(0)
    o_w = tl.arange(0, BW)
    m_w = o_w < W
    is_k = o_w < W
    node = tl.where(is_k, o_w, o_w - W)
    m_q = (o_w >= W) & (o_w < 2 * W)
    b_acc = tl.zeros([BV, BKC], dtype=tl.float32)
    b_racc = tl.zeros([BW, BKC], dtype=tl.float32)
    for tile in tl.range(pid, NUM_TILES, nprog, num_stages=NUM_STAGES):
        # pid * 0 + tile: a tensor also in the interpreter (whose range gives ints)
        _, i_bh, i_b, i_h, i_hk, o_v, m_v = tile_coords(pid * 0 + tile, NV, HV, H, BV, V)
        i_slot = tl.load(state_slot + i_b).to(tl.int64)
        p_s = state + ((i_slot * HV + i_h) * V + o_v[:, None]) * K
        o_row = ((i_b * W + node[:, None]).to(tl.int64) * H + i_hk) * K
        b_sk = tl.zeros([BW, BV], dtype=tl.float32)
        for i_kc in tl.static_range(0, BK, BKC):
            o_kc = i_kc + tl.arange(0, BKC)
            m_kc = o_kc < K
            b_s = tl.load(p_s + o_kc[None, :], mask=m_v[:, None] & m_kc[None, :],
                          other=0.0).to(tl.float32)  # fmt: skip
            b_kraw = tl.load(k + o_row + o_kc[None, :], mask=m_w[:, None] & m_kc[None, :],
                             other=0.0)  # fmt: skip
            b_q = tl.load(q + o_row + o_kc[None, :], mask=m_q[:, None] & m_kc[None, :],
                          other=0.0)  # fmt: skip
            if RUNG == 1:
                b_acc += b_s
                b_racc += (b_kraw + b_q).to(tl.float32)
            else:
                b_sk = xdot(b_kraw + b_q, tl.trans(b_s), b_sk, STATE_PREC, True, NATIVE)
        if RUNG >= 2:
            o_wv = ((i_b * W + o_w[:, None]).to(tl.int64) * HV + i_h) * V + o_v[None, :]
            o_ov = ((i_b * W + node[:, None]).to(tl.int64) * HV + i_h) * V + o_v[None, :]
            b_vt = b_sk
            b_o = b_sk
            if RUNG >= 3:
                b_ck = tl.load(ck + i_bh.to(tl.int64) * W + o_w, mask=m_w, other=0.0)
                b_v = tl.load(v + o_wv, mask=m_w[:, None] & m_v[None, :], other=0.0)
                b_vt = b_v.to(tl.float32) - b_ck[:, None] * b_sk
                b_cq = tl.load(cq + i_bh.to(tl.int64) * W + node, mask=m_q, other=0.0)
                b_o = b_cq[:, None] * b_sk
            tl.store(vt + o_wv, b_vt, mask=m_w[:, None] & m_v[None, :])
            tl.store(o + o_ov, b_o.to(o.dtype.element_ty), mask=m_q[:, None] & m_v[None, :])
    if RUNG == 1:
        tl.store(out + pid, tl.sum(tl.sum(b_acc, 1), 0) + tl.sum(tl.sum(b_racc, 1), 0))


# ------------------------------------------------------------------------------ recording
class _Recorder:
    """Stands in for a JIT kernel: ``rec[grid](*args, **kw)`` records the launch and runs
    the real kernel; every other attribute (warmup, ...) is the real kernel's."""

    def __init__(self, kernel) -> None:
        self.kernel = kernel
        self.calls: list[tuple] = []

    def __getitem__(self, grid):
        def launch(*args, **kwargs):
            self.calls.append((grid, args, kwargs))
            return self.kernel[grid](*args, **kwargs)

        return launch

    def __getattr__(self, name):
        return getattr(self.kernel, name)


@contextlib.contextmanager
def capture(module, name: str):
    """Record the launches of ``module.name`` (a JIT kernel looked up as a module global at
    launch time, as treewy_pipe / treewy_prep do) while the block runs."""
    real = getattr(module, name)
    rec = _Recorder(real)
    setattr(module, name, rec)
    try:
        yield rec
    finally:
        setattr(module, name, real)


# ------------------------------------------------------------------------------ cells
@dataclass
class RungLaunch:
    """A prepared rung (stream_kernels.Launch's fields plus the launch's tiling)."""

    launch: Launch
    bv: int = 0
    num_warps: int = 0
    stages: int = 0


@dataclass
class LadderCell:
    """One (shape, B, T = W chain) cell: the benchmark case (cases.make_case, fp32 state),
    and lazily its float64 truth and the recorded real launches per policy."""

    shape: ModelShape
    batch: int
    num_nodes: int
    device: str
    seed: int = 14
    case: Case = field(init=False)
    _truth: object = field(default=None, init=False)
    recorded: dict = field(default_factory=dict, init=False)

    def __post_init__(self) -> None:
        self.case = make_case(self.shape, "float32", self.batch, TreeSpec.chain(self.num_nodes),
                              seed=self.seed, device=self.device)  # fmt: skip

    @property
    def sms(self) -> int:
        if torch.device(self.device).type == "cuda":
            return torch.cuda.get_device_properties(self.device).multi_processor_count
        return SMS_OFF_GPU

    def truth(self):
        if self._truth is None:
            from .registry import truth_all

            self._truth = truth_all(self.case, with_vt=True)
        return self._truth

    def bytes_of(self, kernel: str) -> int:
        return bytes_moved(kernel, self.shape, "float32", self.num_nodes, self.batch)


def _out_err(ref: torch.Tensor, got: torch.Tensor) -> float:
    got = got.double()
    if not bool(got.isfinite().all()):
        return float("inf")
    return float((got - ref).norm() / ref.norm().clamp_min(1e-300))


def verify_reference(case: Case) -> tuple[torch.Tensor, torch.Tensor]:
    """float64 (K S_0^T, Q S_0^T) [B, W, Hv, dv] on the raw (bf16) keys and queries."""
    sh = case.shape
    rep = sh.num_v_heads // sh.num_k_heads
    s0 = case.state0().double()
    kk = case.k.double().repeat_interleave(rep, 2)
    qq = case.q.double().repeat_interleave(rep, 2)
    return (torch.einsum("bhvk,bthk->bthv", s0, kk), torch.einsum("bhvk,bthk->bthv", s0, qq))


# ------------------------------------------------------------------------------ rungs
PIPE_R_BV, PIPE_R_BKC, PIPE_R_WARPS, PIPE_R_STAGES = 64, 32, 4, 2


def _ladder(cell: LadderCell, rung: int, ctas_per_sm: int, policy=None) -> RungLaunch:
    """v1 / v2 / v2b: ladder_verify_kernel at pipe_r's tiling; ctas_per_sm 0: as many as
    reside; RUNG 3 reads the stage-1 row scales of ``policy``'s recorded call."""
    c, sh = cell.case, cell.shape
    w = cell.num_nodes
    bw = max(16, triton.next_power_of_2(w))
    if 2 * w > bw:
        raise ValueError(f"the packed rows need 2 W <= BW (W = {w})")
    bv = pick_block_v(cell.batch * sh.num_v_heads, sh.dv, widest=PIPE_R_BV)
    nv = triton.cdiv(sh.dv, bv)
    tiles = cell.batch * sh.num_v_heads * nv
    prec = dot_precision(torch.float32, c.q.dtype, None, torch.device(cell.device).type)
    o = torch.zeros_like(c.v)
    vt = torch.zeros(c.v.shape, dtype=torch.float32, device=c.v.device)
    out = torch.zeros(tiles, dtype=torch.float32, device=c.v.device)
    ck = cq = vt
    if rung >= 3:
        cols = _record(cell, policy, False)["stream"][1][8:10]
        ck, cq = cols
    args = (c.q, c.k, c.v, ck, cq, c.pool, c.slot, o, vt, out, tiles)
    consts = {"H": sh.num_k_heads, "HV": sh.num_v_heads, "W": w, "K": sh.dk, "V": sh.dv,
              "BW": bw, "BK": triton.next_power_of_2(sh.dk), "BKC": PIPE_R_BKC, "BV": bv,
              "NV": nv, "NUM_STAGES": PIPE_R_STAGES, "RUNG": rung, "STATE_PREC": prec.state,
              "NATIVE": prec.native, "num_warps": PIPE_R_WARPS}  # fmt: skip
    res = _resources(ladder_verify_kernel, args, consts, PIPE_R_WARPS, c.pool.device)
    per_sm = ctas_per_sm or res.pop("fit")
    res.pop("fit", None)
    programs = min(tiles, per_sm * cell.sms)

    def fn():
        ladder_verify_kernel[(programs,)](*args, **consts)

    kq = 2 * c.k.numel() * c.k.element_size()
    state_bytes = c.pool.numel() * c.pool.element_size()
    if rung == 1:
        # every tile reads its request's W key and W query rows of its key head
        rep = sh.num_v_heads // sh.num_k_heads
        want = float(c.pool.double().sum()) + nv * rep * (float(c.k.double().sum())
                                                          + float(c.q.double().sum()))  # fmt: skip

        def check() -> tuple[bool, float]:
            fn()
            got = float(out[:programs].double().sum())
            scale = float(c.pool.double().abs().sum()) + float(c.k.double().abs().sum())
            err = abs(got - want) / max(scale, 1e-30)
            return err < 1e-5, err

        launch = Launch(fn, check, state_bytes + kq, 0, programs=programs,
                        ctas_per_sm=per_sm, bv=bv, out=out, **res)  # fmt: skip
    else:
        ks, qs = verify_reference(c)
        if rung >= 3:  # [B * Hv, W] -> [B, W, Hv, 1]
            def per_row(x):
                return x.double().view(cell.batch, sh.num_v_heads, w).permute(0, 2, 1)[..., None]

            ks = c.v.double() - per_row(ck) * ks
            qs = per_row(cq) * qs

        def check() -> tuple[bool, float]:
            vt.zero_()
            o.zero_()
            fn()
            e_vt, e_o = _out_err(ks, vt), _out_err(qs, o)
            ok = e_vt < CHECK_TOL["fp32_vt"] and e_o < CHECK_TOL["bf16_out"]
            return ok, max(e_vt, e_o)

        written = o.numel() * o.element_size() + vt.numel() * vt.element_size()
        launch = Launch(fn, check, state_bytes + kq, written, programs=programs,
                        ctas_per_sm=per_sm, bv=bv, **res)  # fmt: skip
    return RungLaunch(launch, bv, PIPE_R_WARPS, PIPE_R_STAGES)


def _pattern(cell: LadderCell, spec: StreamSpec, pool: torch.Tensor) -> RungLaunch:
    """v0 / d0: round 13's stream kernels on the case's pool (a clone for read-write) and
    pending rows (this window's keys and pseudo-values, as the deferred rows use)."""
    c = cell.case
    pvt = torch.zeros(c.v.shape, dtype=torch.float32, device=c.v.device)
    if spec.family == "tile_rw":
        pvt = _pending_pair(cell)[0].vt
    inp = CellInputs(shape=cell.shape, batch=cell.batch, pool=pool, slot=c.slot, pk=c.k,
                     pvt=pvt, sms=cell.sms)  # fmt: skip
    launch = prepare(spec, inp)
    return RungLaunch(launch, launch.bv, spec.num_warps, spec.stages)


def _pending_pair(cell: LadderCell):
    """(ping, pong) of registry._pending on a pool clone: ping holds this window's k, vt,
    gates and accepted nodes (so the deferred call leaves the accepted state)."""
    if "pending" not in cell.recorded:
        from .registry import _pending

        cell.recorded["pending"] = _pending(cell.case, cell.case.pool.clone())
    return cell.recorded["pending"]


def _record(cell: LadderCell, policy, deferred: bool) -> dict:
    """One call of treewy_verify / treewy_deferred_verify under ``policy`` on a pool clone,
    with the prep and stream launches recorded (cached per policy)."""
    key = (id(policy), deferred)
    if key in cell.recorded:
        return cell.recorded[key]
    from ... import gdn_verify as ck

    c = cell.case
    pool = c.pool.clone()
    args = (c.q, c.k, c.v, c.log_gate, c.beta)
    if deferred:
        ping, _ = _pending_pair(cell)
        pong = ck.PendingCommit.empty(c.k, c.v, c.parent)

        def full():
            return ck.treewy_deferred_verify(*args, pool, c.slot, c.parent, ping, pong,
                                             policy=policy)  # fmt: skip
    else:
        def full():
            return ck.treewy_verify(*args, pool, c.slot, c.parent, policy=policy)

    pool0 = c.pool.clone() if deferred else None
    with capture(treewy_pipe, "treewy_pipe_kernel") as rs, \
            capture(treewy_prep, "treewy_prep_kernel") as rp:  # fmt: skip
        result = full()
    if len(rs.calls) != 1 or len(rp.calls) != 1:
        raise ValueError(f"expected one prep and one pipe launch, got {len(rp.calls)} / "
                         f"{len(rs.calls)} (policy does not route to treewy_pipe)")  # fmt: skip
    rec = {"full": full, "pool": pool, "pool0": pool0, "stream": rs.calls[0],
           "prep": rp.calls[0], "result": result, "pong": pong if deferred else None}
    cell.recorded[key] = rec
    return rec


def _replay(kernel, call) -> Callable[[], object]:
    grid, args, kwargs = call
    return lambda: kernel[grid](*args, **kwargs)


def _resources_of(kernel, call, device, sms: int, num_tiles: int = 0) -> dict:
    """programs, programs per SM (a grid of one program per tile: as many as reside),
    registers, spills and shared bytes of a recorded launch."""
    grid, args, kwargs = call
    res = _resources(kernel, args, kwargs, kwargs.get("num_warps", 4), device)
    fit = res.pop("fit")
    programs = grid[0] if isinstance(grid, tuple) else 0
    per_sm = fit if num_tiles and programs >= num_tiles else -(-programs // sms)
    return {"programs": programs, "ctas_per_sm": per_sm, **res}


def _verify_check(cell: LadderCell, fn, o, vt) -> Callable[[], tuple[bool, float]]:
    def check() -> tuple[bool, float]:
        tr = cell.truth()
        o.zero_()
        vt.zero_()
        fn()
        e_o, e_vt = _out_err(tr.o, o), _out_err(tr.vt, vt)
        return e_o < CHECK_TOL["bf16_out"] and e_vt < CHECK_TOL["fp32_vt"], max(e_o, e_vt)

    return check


def _state_check(cell: LadderCell, fn, pool, pool0) -> Callable[[], tuple[bool, float]]:
    from .registry import head_errors

    def check() -> tuple[bool, float]:
        pool.copy_(pool0)
        fn()
        err = head_errors(cell.truth().accepted_state, pool[cell.case.slot.long()])
        return err["err_max_req_head"] < CHECK_TOL["fp32_state"], err["err_max_req_head"]

    return check


def _real(cell: LadderCell, policy, deferred: bool, part: str) -> RungLaunch:
    """v3 / v4 / prep (deferred: d3 / d4 / dprep): the real launches of one recorded call."""
    rec = _record(cell, policy, deferred)
    dev = cell.case.pool.device
    _, s_args, s_kw = rec["stream"]
    o, vt = s_args[10], s_args[11]  # (q, k, v, g, state, slot, m1, pm, ck, cq, o, vt, ...)
    stream = _replay(treewy_pipe.treewy_pipe_kernel, rec["stream"])
    prep = _replay(treewy_prep.treewy_prep_kernel, rec["prep"])
    info = {"bv": s_kw["BV"], "num_warps": s_kw["num_warps"], "stages": s_kw["NUM_STAGES"]}
    kind = "deferred" if deferred else "treewy_verify"
    if part == "prep":
        _, p_args, p_kw = rec["prep"]
        outs = [a for a in p_args if isinstance(a, torch.Tensor)][5:9]  # m1, pm, ck, cq
        saved = [t.clone() for t in outs]

        def check() -> tuple[bool, float]:
            for t in outs:
                t.fill_(float("nan"))
            prep()
            err = max(float((a - b).abs().nan_to_num(float("inf")).max())
                      for a, b in zip(outs, saved, strict=True))  # fmt: skip
            return err == 0.0, err

        res = _resources_of(treewy_prep.treewy_prep_kernel, rec["prep"], dev, cell.sms,
                            num_tiles=rec["prep"][0][0])  # one program per head: as reside
        launch = Launch(prep, check, _prep_bytes(cell, deferred), 0, **res)
        return RungLaunch(launch, 0, p_kw["num_warps"], 1)
    res = _resources_of(treewy_pipe.treewy_pipe_kernel, rec["stream"], dev, cell.sms,
                        num_tiles=s_args[18])  # fmt: skip
    fn = stream if part == "stream" else rec["full"]
    if deferred:
        check = _state_check(cell, fn, rec["pool"], rec["pool0"])
    elif part == "stream":
        check = _verify_check(cell, fn, o, vt)
    else:
        def check() -> tuple[bool, float]:
            o_full, vt_full = fn()
            tr = cell.truth()
            e_o, e_vt = _out_err(tr.o, o_full), _out_err(tr.vt, vt_full)
            return (e_o < CHECK_TOL["bf16_out"] and e_vt < CHECK_TOL["fp32_vt"],
                    max(e_o, e_vt))  # fmt: skip
    total = cell.bytes_of(kind)
    if part == "stream":  # gates and betas are stage 1's; its scratch is the stream's
        total += _prep_written(cell) - 2 * cell.batch * cell.num_nodes * cell.shape.num_v_heads * 4
    launch = Launch(fn, check, total, 0, **res)
    return RungLaunch(launch, **info)


def _prep_written(cell: LadderCell) -> int:
    return 2 * cell.batch * cell.shape.num_v_heads * (cell.num_nodes ** 2 + cell.num_nodes) * 4


def _prep_bytes(cell: LadderCell, deferred: bool) -> int:
    """Stage 1's bytes (variants._prep_bytes: q, k, gates, betas read; m1, pm, ck, cq
    written); the deferred prep also reads the pending keys and gates."""
    sh, b, w = cell.shape, cell.batch, cell.num_nodes
    reads = 2 * b * w * sh.num_k_heads * sh.dk * 2 + 2 * b * w * sh.num_v_heads * 4
    if deferred:
        reads += b * w * sh.num_k_heads * sh.dk * 2 + b * w * sh.num_v_heads * 4
    return reads + _prep_written(cell)


def rung_launch(cell: LadderCell, rung: str, policy=None) -> RungLaunch:
    """The launch of ``rung`` (ladder.py's names) on ``cell``; ``policy`` for the real
    launches (v3 / v4 / prep / d3 / d4 / dprep)."""
    from .stream_ceiling import PIPE_R, PIPE_ZW1P

    if rung == "v0":
        return _pattern(cell, PIPE_R, cell.case.pool)
    if rung in ("v1", "v1a", "v2", "v2a"):
        return _ladder(cell, int(rung[1]), 0 if rung.endswith("a") else 5)
    if rung == "v2b":
        if policy is None:
            raise ValueError("v2b reads a recorded call's stage-1 scratch: give its policy")
        return _ladder(cell, 3, 5, policy)
    if rung == "d0":
        return _pattern(cell, PIPE_ZW1P, cell.case.pool.clone())
    parts = {"v3": ("stream", False), "v4": ("full", False), "prep": ("prep", False),
             "d3": ("stream", True), "d4": ("full", True), "dprep": ("prep", True)}  # fmt: skip
    if rung not in parts or policy is None:
        raise ValueError(f"unknown rung {rung!r} (or no policy for a real launch)")
    part, deferred = parts[rung]
    return _real(cell, policy, deferred, part)
