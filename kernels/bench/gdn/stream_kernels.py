"""Round 13 (issue 19): Triton kernels that only stream the GDN state, no math.

The TreeWY verify stream (treewy_pipe.py, pipe_r / pipe_re) reads S_0 at ~0.68 of the
copy bandwidth and the deferred commit (pipe_zw1p) runs at 1.42x its floor. These kernels
keep those launches' access pattern to the state, tile by tile, and drop everything else,
so their time is the ceiling that pattern allows in Triton:

- ``tile_read_kernel``: a persistent grid walking tiles pid, pid + P, ... (tile =
  (request * HV + value head) * NV + dv tile, the pipelined kernels' order) in a
  ``tl.range`` loop of NUM_STAGES stages; per tile the pool slot is loaded, then the
  [BV, K] state rows in [BV, BKC] chunks (plain masked loads, or TMA through a host tensor
  descriptor), summed into a [BV, BKC] accumulator; one fp32 per program is stored (the
  loads cannot be dropped). A grid of one program per tile is the same kernel with P =
  the tile count.
- ``tile_rw_kernel``: the deferred commit's read-read-write pattern: the same tile walk,
  per tile the pending pseudo-values [WP, BV] read once, per chunk the pending keys
  [WP, BKC] and the state chunk read, S + (sum_w pvt) (sum_w pk)^T written back in place
  (plain store or TMA store). A rank-1 update, no matrix product.
- ``flat_read_kernel`` / ``flat_rw_kernel``: the whole buffer as one flat array of BLOCK
  elements per step (the best-case contiguous pattern), one block per program or
  persistent.

Shapes: state pool [slots, HV, V, K] fp32 (slot of request b: ``state_slot[b]``); pending
keys [B, WP, H, K] bf16, pseudo-values [B, WP, HV, V] fp32. Nothing runs at import.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch
import triton
import triton.language as tl

from ...gdn_verify._jit import pick_block_v
from ...gdn_verify.treewy_pipe import occupancy
from .shapes import ModelShape

__all__ = ["CellInputs", "Launch", "StreamSpec", "flat_read_kernel", "flat_rw_kernel",
           "make_inputs", "prepare", "tile_read_kernel", "tile_rw_kernel"]


@triton.jit
def _tile_rows(tile, state_slot, HV, NV: tl.constexpr, V: tl.constexpr, BV: tl.constexpr,
               SLOT: tl.constexpr):  # fmt: skip
    """(request, value head, first pool row of the tile, pool rows [BV], dv rows [BV], dv
    mask) of ``tile`` (a tensor); the pool is viewed as [slots * HV * V, K] rows."""
    i_v, i_bh = tile % NV, tile // NV
    i_b, i_h = i_bh // HV, i_bh % HV
    i_slot = tl.load(state_slot + i_b).to(tl.int64) if SLOT else i_b.to(tl.int64)
    o_v = i_v * BV + tl.arange(0, BV)
    r_0 = (i_slot * HV + i_h) * V + i_v * BV
    return i_b, i_h, r_0, r_0 + tl.arange(0, BV), o_v, o_v < V


@triton.jit
def tile_read_kernel(state, state_slot, out, sdesc, NUM_TILES, HV, K: tl.constexpr,
                     V: tl.constexpr, BV: tl.constexpr, BKC: tl.constexpr, NV: tl.constexpr,
                     NUM_STAGES: tl.constexpr, TMA: tl.constexpr, SLOT: tl.constexpr,
                     MASK: tl.constexpr):  # fmt: skip
    """out[pid] = the sum of every state element of tiles pid, pid + P, ... (P programs)."""
    pid = tl.program_id(0)
    nprog = tl.num_programs(0)
    b_acc = tl.zeros([BV, BKC], dtype=tl.float32)
    for tile in tl.range(pid, NUM_TILES, nprog, num_stages=NUM_STAGES):
        # pid * 0 + tile: a tensor also in the interpreter (whose range gives ints)
        _, _, r_0, o_r, _, m_v = _tile_rows(pid * 0 + tile, state_slot, HV, NV, V, BV, SLOT)
        for i_kc in tl.static_range(0, K, BKC):
            o_kc = i_kc + tl.arange(0, BKC)
            if TMA:
                b_s = sdesc.load([r_0.to(tl.int32), i_kc])
            elif MASK:
                b_s = tl.load(state + o_r[:, None] * K + o_kc[None, :],
                              mask=m_v[:, None] & (o_kc < K)[None, :], other=0.0)  # fmt: skip
            else:
                b_s = tl.load(state + o_r[:, None] * K + o_kc[None, :])
            b_acc += b_s.to(tl.float32)
    tl.store(out + pid, tl.sum(tl.sum(b_acc, 1), 0))


@triton.jit
def tile_rw_kernel(state, state_slot, pk, pvt, sdesc, NUM_TILES, HV, H,
                   K: tl.constexpr, V: tl.constexpr, BV: tl.constexpr, BKC: tl.constexpr,
                   NV: tl.constexpr, WP: tl.constexpr, BWP: tl.constexpr,
                   NUM_STAGES: tl.constexpr, TMA: tl.constexpr, SLOT: tl.constexpr,
                   PENDING: tl.constexpr):  # fmt: skip
    """Per tile of tiles pid, pid + P, ...: S <- S + pv pk^T in place, pv [BV] the sum of
    the tile's WP pending pseudo-value rows, pk [BKC] per chunk the sum of the WP pending
    key rows of the value head's key head (H key heads, HV / H value heads each);
    PENDING False: S <- S + 1 (the state's read-write stream alone)."""
    pid = tl.program_id(0)
    nprog = tl.num_programs(0)
    o_p = tl.arange(0, BWP)
    m_p = o_p < WP
    for tile in tl.range(pid, NUM_TILES, nprog, num_stages=NUM_STAGES):
        i_b, i_h, r_0, o_r, o_v, m_v = _tile_rows(pid * 0 + tile, state_slot, HV, NV, V, BV,
                                                  SLOT)  # fmt: skip
        if PENDING:
            o_pvt = ((i_b * WP + o_p[:, None]).to(tl.int64) * HV + i_h) * V + o_v[None, :]
            b_pv = tl.sum(tl.load(pvt + o_pvt, mask=m_p[:, None] & m_v[None, :], other=0.0), 0)
            o_prow = ((i_b * WP + o_p[:, None]).to(tl.int64) * H + i_h // (HV // H)) * K
        for i_kc in tl.static_range(0, K, BKC):
            o_kc = i_kc + tl.arange(0, BKC)
            m_vk = m_v[:, None] & (o_kc < K)[None, :]
            if TMA:
                b_s = sdesc.load([r_0.to(tl.int32), i_kc])
            else:
                b_s = tl.load(state + o_r[:, None] * K + o_kc[None, :], mask=m_vk, other=0.0)
            if PENDING:
                b_pk = tl.load(pk + o_prow + o_kc[None, :],
                               mask=m_p[:, None] & (o_kc < K)[None, :], other=0.0)  # fmt: skip
                b_s = b_s + b_pv[:, None] * tl.sum(b_pk.to(tl.float32), 0)[None, :]
            else:
                b_s = b_s + 1.0
            if TMA:
                sdesc.store([r_0.to(tl.int32), i_kc], b_s)
            else:
                tl.store(state + o_r[:, None] * K + o_kc[None, :], b_s, mask=m_vk)


@triton.jit
def flat_read_kernel(x, out, NUM_BLOCKS, BLOCK: tl.constexpr, NUM_STAGES: tl.constexpr):
    """out[pid] = the sum of blocks pid, pid + P, ... of BLOCK elements of flat ``x``."""
    pid = tl.program_id(0)
    nprog = tl.num_programs(0)
    b_acc = tl.zeros([BLOCK], dtype=tl.float32)
    for blk in tl.range(pid, NUM_BLOCKS, nprog, num_stages=NUM_STAGES):
        o = (pid * 0 + blk).to(tl.int64) * BLOCK + tl.arange(0, BLOCK)
        b_acc += tl.load(x + o).to(tl.float32)
    tl.store(out + pid, tl.sum(b_acc, 0))


@triton.jit
def flat_rw_kernel(x, NUM_BLOCKS, BLOCK: tl.constexpr, NUM_STAGES: tl.constexpr):
    """x <- x + 1 in place over blocks pid, pid + P, ... of BLOCK elements."""
    pid = tl.program_id(0)
    nprog = tl.num_programs(0)
    for blk in tl.range(pid, NUM_BLOCKS, nprog, num_stages=NUM_STAGES):
        o = (pid * 0 + blk).to(tl.int64) * BLOCK + tl.arange(0, BLOCK)
        tl.store(x + o, tl.load(x + o) + 1.0)


# ------------------------------------------------------------------------------ launches
FAMILIES = ("torch_copy", "torch_sum", "torch_add", "tile_read", "tile_rw", "flat_read",
            "flat_rw")  # fmt: skip
# ctas_per_sm: 0 = as many programs per SM as the compiled kernel lets reside; ONE_PER_TILE
# = a grid of one program per tile (flat: per block), each walking one
ONE_PER_TILE = -1
SMS_OFF_GPU = 4  # the interpreter's "SMs" (as treewy_pipe: several tiles per program)


@dataclass(frozen=True)
class StreamSpec:
    """One streaming launch. family: FAMILIES; bv x bkc: the state chunk (tile = bv rows of
    dv); stages: ``tl.range`` num_stages; ctas_per_sm: programs per SM (0: as many as
    reside, ONE_PER_TILE: a program per tile / block); tma: the state chunks through a host
    tensor descriptor; slot: tiles read through the shuffled pool slots (as the kernels);
    mask: masked loads (as the kernels); pending: the deferred pattern's pending rows
    (tile_rw); block: flat elements per step; pick_bv: bv halved at small B as the TreeWY
    launches do (_jit.pick_block_v); tag: the real launch this one mirrors."""

    family: str
    bv: int = 64
    bkc: int = 32
    num_warps: int = 4
    stages: int = 2
    ctas_per_sm: int = 0
    tma: bool = False
    slot: bool = True
    mask: bool = True
    pending: bool = True
    block: int = 4096
    pick_bv: bool = False
    tag: str = ""

    def __post_init__(self) -> None:
        if self.family not in FAMILIES:
            raise ValueError(f"StreamSpec.family must be one of {FAMILIES}, got {self.family!r}")

    def label(self) -> str:
        """A short stable name (the CSV's ``variant``)."""
        if self.family.startswith("torch"):
            return self.family
        grid = {0: "cauto", ONE_PER_TILE: "c1tile"}.get(self.ctas_per_sm, f"c{self.ctas_per_sm}")
        if self.family.startswith("flat"):
            return f"{self.family} blk{self.block} w{self.num_warps} s{self.stages} {grid}"
        bv = f"bv{self.bv}" + ("p" if self.pick_bv else "")
        opts = (" tma" if self.tma else "") + ("" if self.slot else " noslot") + (
            "" if self.mask or self.tma else " nomask") + (
            " nopend" if self.family == "tile_rw" and not self.pending else "")  # fmt: skip
        tag = f"{self.tag}: " if self.tag else ""
        return f"{tag}{self.family} {bv} kc{self.bkc} w{self.num_warps} s{self.stages} {grid}{opts}"


@dataclass
class CellInputs:
    """One (shape, B) cell's buffers: the state pool [B, HV, V, K] fp32 read through a
    permutation of its slots, the pending rows of a WP-node window, and (lazily) a scratch
    buffer of the pool's bytes for the torch references and the flat read-write."""

    shape: ModelShape
    batch: int
    pool: torch.Tensor
    slot: torch.Tensor
    pk: torch.Tensor
    pvt: torch.Tensor
    sms: int
    scratch: torch.Tensor | None = None

    @property
    def state_bytes(self) -> int:
        return self.pool.numel() * self.pool.element_size()

    def scratch_buf(self) -> torch.Tensor:
        if self.scratch is None:
            self.scratch = torch.zeros_like(self.pool).view(-1)
        return self.scratch


def make_inputs(shape: ModelShape, batch: int, *, device: str, seed: int = 13,
                num_pending: int = 4, integer: bool = False) -> CellInputs:  # fmt: skip
    """Random buffers of one cell; ``integer``: small integers (exact fp32 sums, the
    tests' exact references)."""
    gen = torch.Generator(device=device).manual_seed(seed)
    hv, hk, dk, dv = shape.num_v_heads, shape.num_k_heads, shape.dk, shape.dv

    def rnd(*size, scale=1.0):
        if integer:
            return torch.randint(-8, 9, size, device=device, generator=gen).float()
        return scale * torch.randn(*size, device=device, generator=gen)

    sms = (torch.cuda.get_device_properties(device).multi_processor_count
           if torch.device(device).type == "cuda" else SMS_OFF_GPU)  # fmt: skip
    return CellInputs(
        shape=shape, batch=batch, pool=rnd(batch, hv, dv, dk, scale=0.1),
        slot=torch.randperm(batch, device=device, generator=gen).to(torch.int32),
        pk=rnd(batch, num_pending, hk, dk, scale=0.01).bfloat16(),
        pvt=rnd(batch, num_pending, hv, dv, scale=0.01), sms=sms,
    )  # fmt: skip


@dataclass
class Launch:
    """A prepared launch: ``fn`` runs it; ``check`` runs it once and says whether it read
    (wrote) every element as its reference says, with the error; bytes are unique bytes."""

    fn: Callable[[], object]
    check: Callable[[], tuple[bool, float]]
    bytes_read: int
    bytes_written: int
    programs: int = 0
    ctas_per_sm: int = 0
    regs: int = 0
    spills: int = 0
    smem_bytes: int = 0
    bv: int = 0  # the dv tile a tile launch took (pick_bv may halve it)
    out: torch.Tensor | None = None  # a read launch's per-program sums [programs]


def _resources(kernel, args, consts: dict, num_warps: int, device) -> dict:
    """Registers, spilled registers, shared bytes and programs per SM (``fit``) of the
    compiled ``kernel`` (zeros and SMS_OFF_GPU's 4 in the interpreter, which compiles
    nothing)."""
    if device.type != "cuda":
        return {"regs": 0, "spills": 0, "smem_bytes": 0, "fit": 4}
    from triton.runtime import driver

    compiled = kernel.warmup(*args, grid=(1,), **consts)
    compiled._init_handles()
    index = device.index if device.index is not None else torch.cuda.current_device()
    props = driver.active.utils.get_device_properties(index)
    regs, smem = compiled.n_regs, compiled.metadata.shared
    fit = occupancy(regs, smem, num_warps, regs_per_sm=props.get("max_num_regs", 65536))
    return {"regs": regs, "spills": getattr(compiled, "n_spills", 0), "smem_bytes": smem,
            "fit": fit}  # fmt: skip


def _grid(spec: StreamSpec, kernel, args, consts, inp: CellInputs, num_items: int) -> dict:
    """programs, programs per SM (resident for ONE_PER_TILE), registers, spills and shared
    bytes of a persistent launch over ``num_items`` tiles / blocks."""
    res = _resources(kernel, args, consts, spec.num_warps, inp.pool.device)
    fit = res.pop("fit")
    if spec.ctas_per_sm == ONE_PER_TILE:
        return {"programs": num_items, "ctas_per_sm": fit, **res}
    per_sm = spec.ctas_per_sm or fit
    return {"programs": min(num_items, per_sm * inp.sms), "ctas_per_sm": per_sm, **res}


def _descriptor(pool: torch.Tensor, bv: int, bkc: int):
    """The pool [slots, HV, V, K] as [slots * HV * V, K] rows in [bv, bkc] boxes (as
    treewy_pipe.state_descriptor)."""
    from triton.tools.tensor_descriptor import TensorDescriptor

    slots, hv, dv, dk = pool.shape
    return TensorDescriptor(pool, [slots * hv * dv, dk], [dk, 1], [bv, bkc])


def _tile_sizes(spec: StreamSpec, inp: CellInputs) -> tuple[int, int, int]:
    """(bv, nv, tiles) of a tile launch; refuses chunks that straddle a head or a row."""
    sh = inp.shape
    bv = spec.bv
    if spec.pick_bv:
        bv = pick_block_v(inp.batch * sh.num_v_heads, sh.dv, widest=spec.bv)
    if sh.dv % bv or sh.dk % spec.bkc:
        raise ValueError(f"{spec.label()}: dv={sh.dv} % bv={bv} or dk={sh.dk} % bkc={spec.bkc}")
    nv = sh.dv // bv
    return bv, nv, inp.batch * sh.num_v_heads * nv


def _sum_check(fn, out: torch.Tensor, ref: torch.Tensor) -> Callable[[], tuple[bool, float]]:
    def check() -> tuple[bool, float]:
        fn()
        got, want = float(out.double().sum()), float(ref.double().sum())
        err = abs(got - want) / max(float(ref.double().abs().sum()), 1e-30)
        return err < 1e-5, err

    return check


def _tile_read(spec: StreamSpec, inp: CellInputs) -> Launch:
    bv, nv, tiles = _tile_sizes(spec, inp)
    sh = inp.shape
    sdesc = _descriptor(inp.pool, bv, spec.bkc) if spec.tma else inp.pool
    out = torch.zeros(tiles, dtype=torch.float32, device=inp.pool.device)
    args = (inp.pool, inp.slot, out, sdesc, tiles, sh.num_v_heads)
    consts = {"K": sh.dk, "V": sh.dv, "BV": bv, "BKC": spec.bkc, "NV": nv,
              "NUM_STAGES": spec.stages, "TMA": spec.tma, "SLOT": spec.slot,
              "MASK": spec.mask, "num_warps": spec.num_warps}  # fmt: skip
    g = _grid(spec, tile_read_kernel, args, consts, inp, tiles)

    def fn():
        tile_read_kernel[(g["programs"],)](*args, **consts)

    out = out[: g["programs"]]
    return Launch(fn, _sum_check(fn, out, inp.pool), inp.state_bytes, 0, bv=bv, out=out, **g)


def _pending_bytes(inp: CellInputs) -> int:
    return inp.pk.numel() * inp.pk.element_size() + inp.pvt.numel() * inp.pvt.element_size()


def rw_reference(inp: CellInputs, before: torch.Tensor, pending: bool) -> torch.Tensor:
    """The state tile_rw_kernel leaves after one launch on ``before``: S + pv pk^T per
    (request, value head) at the request's slot (pending), else S + 1."""
    if not pending:
        return before + 1.0
    sh = inp.shape
    pv = inp.pvt.float().sum(1)  # [B, HV, V]
    pks = inp.pk.float().sum(1).repeat_interleave(sh.num_v_heads // sh.num_k_heads, 1)
    after = before.clone()
    after[inp.slot.long()] += pv[..., :, None] * pks[..., None, :]
    return after


def _tile_rw(spec: StreamSpec, inp: CellInputs) -> Launch:
    bv, nv, tiles = _tile_sizes(spec, inp)
    sh = inp.shape
    wp = inp.pk.shape[1]
    sdesc = _descriptor(inp.pool, bv, spec.bkc) if spec.tma else inp.pool
    args = (inp.pool, inp.slot, inp.pk, inp.pvt, sdesc, tiles, sh.num_v_heads, sh.num_k_heads)
    consts = {"K": sh.dk, "V": sh.dv, "BV": bv, "BKC": spec.bkc, "NV": nv, "WP": wp,
              "BWP": max(16, triton.next_power_of_2(wp)), "NUM_STAGES": spec.stages,
              "TMA": spec.tma, "SLOT": spec.slot, "PENDING": spec.pending,
              "num_warps": spec.num_warps}  # fmt: skip
    g = _grid(spec, tile_rw_kernel, args, consts, inp, tiles)

    def fn():
        tile_rw_kernel[(g["programs"],)](*args, **consts)

    def check() -> tuple[bool, float]:
        want = rw_reference(inp, inp.pool.clone(), spec.pending)
        fn()
        err = float((inp.pool - want).abs().max()) / max(float(want.abs().max()), 1e-30)
        return err < 1e-6, err

    read = inp.state_bytes + (_pending_bytes(inp) if spec.pending else 0)
    return Launch(fn, check, read, inp.state_bytes, bv=bv, **g)


def _flat(spec: StreamSpec, inp: CellInputs) -> Launch:
    x = inp.pool.view(-1) if spec.family == "flat_read" else inp.scratch_buf()
    if x.numel() % spec.block:
        raise ValueError(f"{spec.label()}: {x.numel()} elements % block={spec.block}")
    blocks = x.numel() // spec.block
    consts = {"BLOCK": spec.block, "NUM_STAGES": spec.stages, "num_warps": spec.num_warps}
    if spec.family == "flat_read":
        out = torch.zeros(blocks, dtype=torch.float32, device=x.device)
        kernel, args = flat_read_kernel, (x, out, blocks)
    else:
        kernel, args = flat_rw_kernel, (x, blocks)
    g = _grid(spec, kernel, args, consts, inp, blocks)

    def fn():
        kernel[(g["programs"],)](*args, **consts)

    if spec.family == "flat_read":
        out = out[: g["programs"]]
        return Launch(fn, _sum_check(fn, out, x), inp.state_bytes, 0, out=out, **g)

    def check() -> tuple[bool, float]:
        want = x + 1.0
        fn()
        err = float((x - want).abs().max())
        return err == 0.0, err

    return Launch(fn, check, inp.state_bytes, inp.state_bytes, **g)


def _torch(spec: StreamSpec, inp: CellInputs) -> Launch:
    src, buf, n = inp.pool.view(-1), inp.scratch_buf(), inp.state_bytes
    if spec.family == "torch_copy":
        fn, written = (lambda: buf.copy_(src)), n
    elif spec.family == "torch_sum":
        fn, written = (lambda: torch.sum(src)), 0
    else:
        fn, written = (lambda: buf.add_(1.0)), n

    def check() -> tuple[bool, float]:
        fn()
        return True, 0.0

    return Launch(fn, check, n, written)


def prepare(spec: StreamSpec, inp: CellInputs) -> Launch:
    """The launch of ``spec`` on ``inp`` (compiles it on a GPU; ValueError for a spec that
    does not fit the cell's shape)."""
    if spec.family.startswith("torch"):
        return _torch(spec, inp)
    if spec.family == "tile_read":
        return _tile_read(spec, inp)
    if spec.family == "tile_rw":
        return _tile_rw(spec, inp)
    return _flat(spec, inp)
