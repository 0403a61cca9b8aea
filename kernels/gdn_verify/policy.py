"""Launch configurations of the TreeWY kernels as one immutable value, passed as an argument.

``DEFAULT_POLICY`` holds the measured choices (round 4 sweeps, round 5 sweep for the fp32
contract; kernels/BENCHMARKS.md, results/h200/round4_sweep*.csv, round5_sweep.csv). Every
public TreeWY function takes ``policy=`` (None: the default); the benchmark's sweeps build
candidates with ``LaunchPolicy.with_entry`` / ``dataclasses.replace`` instead of changing
module state at run time.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType

import torch

__all__ = ["DEFAULT_POLICY", "MEASURED_POLICY_R7", "MEASURED_POLICY_S4", "MEASURED_POLICY_S5", "MEASURED_POLICY_S6", "MEASURED_POLICY_S6B", "LaunchPolicy",
           "PipeConfig"]


def _frozen(table: dict) -> Mapping:
    return MappingProxyType({k: MappingProxyType(dict(v)) for k, v in table.items()})


# Streaming kernel by (BW, variant): dv tile (halved at small B, _jit.pick_block_v), warps,
# key chunk. Round 4 sweeps on the H200 (fewer warps won almost everywhere); the round-5
# sweep for the fp32 contract kept them. "deferred" has the pending path.
_STREAM = {
    (16, "verify"): {"block_v": 32, "num_warps": 2, "bkc": 128},
    (16, "deferred"): {"block_v": 64, "num_warps": 2, "bkc": 64},
    (32, "verify"): {"block_v": 32, "num_warps": 2, "bkc": 128},
    (32, "deferred"): {"block_v": 64, "num_warps": 2, "bkc": 64},
    (64, "verify"): {"block_v": 64, "num_warps": 4, "bkc": 64},
    (64, "deferred"): {"block_v": 64, "num_warps": 4, "bkc": 64},
}
# Commit by (BW, state dtype); the round-3 "bf16 commit anomaly" (1577 us at W = 40) was
# the 8-warp configuration: 288 us at 4 warps. BW = 32 is not in the measured grid: it
# takes the BW = 16 choice. Round 5 sweep (fp32 contract, W = 40 (3,3,3), B = 256):
# 64-key chunks 356.1 us vs 442.3 at 32 (results/h200/round5_sweep.csv).
_COMMIT = {
    (16, "float32"): {"block_v": 64, "num_warps": 4, "bkc": 64},
    (16, "bfloat16"): {"block_v": 128, "num_warps": 8, "bkc": 128},
    (32, "float32"): {"block_v": 64, "num_warps": 4, "bkc": 64},
    (32, "bfloat16"): {"block_v": 128, "num_warps": 8, "bkc": 128},
    (64, "float32"): {"block_v": 64, "num_warps": 4, "bkc": 64},
    (64, "bfloat16"): {"block_v": 64, "num_warps": 4, "bkc": 32},
}
# Single-launch kernel (treewy_small.py) by (HALF, variant; deferred uses "verify"): dv
# tile, warps, state load before the window math. Round 4 sweeps, fused T = 4 B = 256
# fp32: 525 us with the state loaded after the window math vs 786 before it (bf16 440 vs
# 494); 2 warps: 516 (bf16 311)
_SMALL = {
    (8, "verify"): {"block_v": 32, "num_warps": 4, "early_s": False},
    (8, "fused"): {"block_v": 32, "num_warps": 2, "early_s": False},
    (16, "verify"): {"block_v": 64, "num_warps": 8, "early_s": True},
    (16, "fused"): {"block_v": 64, "num_warps": 8, "early_s": True},
}
# Warps of the window kernel by BW (round 4 sweeps, verify at B = 256, fp32): BW = 16 at
# 1 warp (T = 4: 297 us at 1 warp, 314 at 2, 353 at 4; T = 15: 387 / 411 / 473); BW = 64
# at 2 warps (W = 40: 1104 us vs 1124 at 4; round 3: 4 warps beat 8 and 16 by 1.9-3.6x).
# Below small_max_heads (B * Hv) BW = 64 keeps 4 warps: at B = 1 the 2-warp window kernel
# was slower (W = 40 verify+commit 56.0 us vs 30.6 us with 4 warps, round 4 runs 3 and 2).
_PREP_WARPS = {16: 1, 32: 4, 64: 2}
_PREP_WARPS_FEW_HEADS = {64: 4}


@dataclass(frozen=True)
class PipeConfig:
    """Launch of the pipelined persistent stream (treewy_pipe.py, round 7 candidate).

    stages: ``tl.range`` num_stages (>= 2: the next tile's loads go to shared memory
    asynchronously while this tile computes); block_v: dv tile (halved at small B as
    _jit.pick_block_v); num_warps; bkc: key chunk (32: ~100-130 registers at T = 4 on
    sm_90, so ~7 two-warp programs per SM); ctas_per_sm: programs per SM (0: as many as the
    compiled kernel's registers and shared memory let reside, read from the compiled
    kernel at launch). pending_in_stage1 (deferred only): the hoisted pending
    coefficients (treewy_pending.py) come from stage 1's program instead of their own
    small kernel (one launch fewer, a longer stage-1 program). maxnreg > 0: a register
    cap for the GPU compile (more programs per SM, at the price of spills). pending_gram
    (deferred only): the window products take the pending path as [W, WP] corrections
    (K PK^T, Q PK^T from the hoisted kernel) instead of re-reading the updated tile.
    fused_window (W <= 8): the window math in the tile loop (treewy_pipe_small.py), no
    stage-1 launch (deferred: the hoisted pending kernel, then the one stream).
    pack_qk (session 4; windows with 2 W <= BW, i.e. W <= 8): the window's keys and
    queries share one [BW, dk] operand (rows < W keys, rows W..2W-1 queries), so each key
    chunk takes one set of three bf16 products and one accumulator instead of two (the
    MMA's 16 rows were 3/4 padding at W = 4). Not with pending_gram.
    tma (session 5): the state tile's chunks loaded (deferred: also stored) through a
    host-side tensor descriptor (Hopper TMA; treewy_pipe.state_descriptor), where dv is a
    multiple of the dv tile; elsewhere (and in the fused-window kernel) plain loads.
    slot_ahead (session 5): each tile's pool slot is loaded one tile early and carried
    through the loop, so the state tile's load depends on no load of its own iteration
    (Triton 3.6 then gives it its own stage: NUM_STAGES - 1 tiles ahead instead of one).
    early_rows (session 13; needs pack_qk, applies where it packs): the window's packed
    key / query rows and pending keys of the next key chunk are loaded before this chunk's
    state chunk is waited for (Triton 3.6 leaves them synchronous, one L2 round trip per
    chunk after the state chunk); not with slot_ahead.
    """

    stages: int = 2
    block_v: int = 32
    num_warps: int = 2
    bkc: int = 32
    ctas_per_sm: int = 0
    pending_in_stage1: bool = False
    maxnreg: int = 0
    pending_gram: bool = False
    fused_window: bool = False
    pack_qk: bool = False
    tma: bool = False
    slot_ahead: bool = False
    early_rows: bool = False

    def __post_init__(self) -> None:
        for name in ("stages", "block_v", "num_warps", "bkc"):
            if getattr(self, name) < 1:
                raise ValueError(f"PipeConfig.{name} must be >= 1, got {getattr(self, name)}")
        for name in ("ctas_per_sm", "maxnreg"):
            if getattr(self, name) < 0:
                raise ValueError(f"PipeConfig.{name} must be >= 0, got {getattr(self, name)}")
        if self.pack_qk and self.pending_gram:
            raise ValueError("PipeConfig.pack_qk cannot be combined with pending_gram=True")
        if self.early_rows and (self.slot_ahead or not self.pack_qk):
            raise ValueError("PipeConfig.early_rows needs pack_qk=True and slot_ahead=False")

    def label(self) -> str:
        return (f"pipe s{self.stages} bv{self.block_v} w{self.num_warps} kc{self.bkc} "
                f"c{self.ctas_per_sm or 'auto'}"
                + (" pending-in-stage1" if self.pending_in_stage1 else "")
                + (f" maxnreg{self.maxnreg}" if self.maxnreg else "")
                + (" gram" if self.pending_gram else "")
                + (" fused-window" if self.fused_window else "")
                + (" pack-qk" if self.pack_qk else "")
                + (" tma" if self.tma else "")
                + (" slot-ahead" if self.slot_ahead else "")
                + (" early-rows" if self.early_rows else ""))  # fmt: skip


@dataclass(frozen=True)
class LaunchPolicy:
    """Every launch choice of the TreeWY kernels.

    single_launch / small_max_w / small_max_heads: windows of W <= small_max_w take the
    single-launch kernel, always for the fused variant and for verify / deferred while
    B * Hv < small_max_heads (round 4, T = 4: 1.54x faster at B * Hv = 32, 0.95x at 1024;
    at W = 15 it lost at every B, 0.35-0.69x). prep_blocked: the blocked (I + N)^-1 for
    32 < BW <= 64 (round 2). persistent_ctas_per_sm > 0: the verify stream (no pending
    path, no commit) runs treewy_persistent.py's kernel on that many programs per SM
    (round 6: slower at T = 4, 401 vs 302 us; 0 keeps the round-5 kernel).
    pipe_verify / pipe_deferred: a PipeConfig routes the verify stream (no commit) /
    the deferred stream of windows with BW <= 32 (W <= 32) to treewy_pipe.py's pipelined
    persistent kernel (round 7 candidates; None, the default: the round-5 kernel).
    """

    stream: Mapping = field(default_factory=lambda: _frozen(_STREAM))
    commit: Mapping = field(default_factory=lambda: _frozen(_COMMIT))
    small: Mapping = field(default_factory=lambda: _frozen(_SMALL))
    prep_warps_by_bw: Mapping = field(default_factory=lambda: MappingProxyType(_PREP_WARPS))
    prep_warps_few_heads_by_bw: Mapping = field(
        default_factory=lambda: MappingProxyType(_PREP_WARPS_FEW_HEADS)
    )
    prep_blocked: bool = True
    single_launch: bool = True
    small_max_w: int = 8
    small_max_heads: int = 512
    persistent_ctas_per_sm: int = 0
    pipe_verify: PipeConfig | None = None
    pipe_deferred: PipeConfig | None = None

    def with_entry(self, table: str, key, value) -> LaunchPolicy:
        """A copy with ``table[key] = value`` (table: stream, commit, small,
        prep_warps_by_bw)."""
        if table not in ("stream", "commit", "small", "prep_warps_by_bw"):
            raise ValueError(
                f"table must be stream, commit, small or prep_warps_by_bw, got {table!r}"
            )
        new = dict(getattr(self, table))
        new[key] = MappingProxyType(dict(value)) if isinstance(value, Mapping) else value
        return dataclasses.replace(self, **{table: MappingProxyType(new)})

    def stream_config(self, bw: int, variant: str = "verify") -> dict:
        """variant: "verify" (also fused) or "deferred"."""
        return dict(self.stream.get((bw, variant), self.stream[64, variant]))

    def commit_config(self, bw: int, state_dtype: torch.dtype) -> dict:
        name = "float32" if state_dtype == torch.float32 else "bfloat16"
        return dict(self.commit.get((bw, name), self.commit[64, name]))

    def small_config(self, half: int, variant: str) -> dict:
        return dict(self.small[half, variant])

    def prep_warps(self, bw: int, num_heads_total: int = 1 << 30) -> int:
        """Warps of the per-head window kernel for B * Hv = ``num_heads_total`` programs."""
        if num_heads_total < self.small_max_heads and bw in self.prep_warps_few_heads_by_bw:
            return self.prep_warps_few_heads_by_bw[bw]
        return self.prep_warps_by_bw.get(bw, 4)

    def use_single_launch(self, num_nodes: int, num_heads_total: int, fused: bool) -> bool:
        """Whether a window takes the single-launch kernel."""
        if not self.single_launch or num_nodes > self.small_max_w:
            return False
        return fused or num_heads_total < self.small_max_heads

    def use_persistent(self, bw: int) -> bool:
        """Whether the verify stream takes treewy_persistent.py's kernel (BW <= 32 only:
        it spills at BW = 64)."""
        return self.persistent_ctas_per_sm > 0 and bw <= 32

    def pipe_config(self, deferred: bool) -> PipeConfig | None:
        """The pipelined stream's launch for verify (deferred False) or deferred, or None."""
        return self.pipe_deferred if deferred else self.pipe_verify

    def reconstruct_kernels(self, num_nodes: int, num_heads_total: int) -> str:
        """Which TreeWY kernels a reconstruct step takes when the accepted node is known at
        launch (a chain once the accepted length is fixed, a replayed window): "fused"
        (one launch, S read once: round 5 B = 1 T = 4 fp32 11.3 us vs verify+commit 16.1,
        tuned store-all 13.4) while the window takes the single-launch kernel and
        B * Hv < small_max_heads; "verify+commit" otherwise (at B = 256 the fused
        kernel was no faster: 574.6 vs 568.6 us)."""
        small = self.use_single_launch(num_nodes, num_heads_total, fused=True)
        return "fused" if small and num_heads_total < self.small_max_heads else "verify+commit"

    def as_dict(self) -> dict:
        """JSON-friendly form (for meta.json)."""

        def table(t):
            return {",".join(map(str, k)) if isinstance(k, tuple) else str(k):
                    dict(v) if isinstance(v, Mapping) else v for k, v in t.items()}  # fmt: skip

        return {
            "stream": table(self.stream), "commit": table(self.commit),
            "small": table(self.small), "prep_warps_by_bw": table(self.prep_warps_by_bw),
            "prep_warps_few_heads_by_bw": table(self.prep_warps_few_heads_by_bw),
            "prep_blocked": self.prep_blocked, "single_launch": self.single_launch,
            "small_max_w": self.small_max_w, "small_max_heads": self.small_max_heads,
            "persistent_ctas_per_sm": self.persistent_ctas_per_sm,
            "pipe_verify": dataclasses.asdict(self.pipe_verify) if self.pipe_verify else None,
            "pipe_deferred": (dataclasses.asdict(self.pipe_deferred) if self.pipe_deferred
                              else None),
        }  # fmt: skip


DEFAULT_POLICY = LaunchPolicy()

# The fastest verify launch of the 2026-12-01 23:56 UTC H200 run (s2-kbench 628da70, phase
# gdn_kc, copy 4278.5 GB/s, fp32 state, float64-checked over all requests): the pipelined
# stream, 64-row dv tile, 4 warps, 32-key chunks, 2 stages ("pipe_d"). 35B TP1 B = 256:
# verify T = 4 214.8 us vs 301.3 (default), verify+commit 485.8 vs 572.5 (1.24x its floor);
# fastest of the five verify launches at every measured cell (T = 2..9, 15, (2,2,2); B = 64
# and 256; 397B TP8 T = 4 64.8 vs 83.0 us). Deferred keeps the round-6 kernel (the
# pipelined deferred was 1.8-2.8x slower). Opt-in: the calibration tables were measured
# with DEFAULT_POLICY.
MEASURED_POLICY_R7 = LaunchPolicy(pipe_verify=PipeConfig(stages=2, block_v=64, num_warps=4,
                                                         bkc=32))  # fmt: skip

# Session 4 (round 8, H200, 2026-12-02 ~06:00 UTC call, stage s4-kbench 762182b = s4-kcode
# a140f15, copy 4238.7 GB/s, every row float64-checked over all requests): pipe_d with the
# keys and queries packed into one operand (variants "pipe_r", verify). 35B TP1 fp32 B = 256:
# verify T = 4 207.2 us vs pipe_d 216.3 (-4.2%), T = 2 199.2 vs 211.3 (-5.7%), T = 9 (W = 10,
# packing off: the same kernel) 230.8 vs 232.6; B = 64 T = 4 62.9 vs 64.3, T = 2 61.5 vs
# 63.5; B = 1 equal (12.2-12.3 us). verify+commit T = 4 478.1 us (1.21x its floor) vs 487.6.
# The rule declared before the call (>= 3% faster than pipe_d at B = 256 T = 4 and T = 2)
# held. Deferred keeps the round-6 kernel: the best variant (pipe_s, pipe_f at 3 stages,
# 488.4 us at T = 4) was 0.985x of min(default 495.7, pipe_f 492.5), not <= 0.95x, and slower
# than the default at T = 2 (481.2 vs 473.2). Opt-in, like MEASURED_POLICY_R7.
MEASURED_POLICY_S4 = LaunchPolicy(pipe_verify=PipeConfig(stages=2, block_v=64, num_warps=4,
                                                         bkc=32, pack_qk=True))  # fmt: skip

# Session 5 (round 9, H200, device call 17, 2026-12-02, command wall 315.8 s, copy 4241.1 GB/s,
# 827 timed rows, every row float64-checked over all requests, no contract miss): the deferred
# commit of pipe_s with its state chunks moved by tensor descriptor (TMA bulk copies; variants
# "pipe_x" deferred, no slot_ahead). 35B TP1 fp32: B = 256 T = 4 450.7 us vs default 494.7 /
# pipe_s 489.2 (0.921x, rule <= 0.95x), T = 2 444.7 vs 473.4, T = 9 480.6 vs 556.0; B = 64
# T = 4 126.8 vs 136.3; B = 1 14.1 vs 14.3. The rule declared before the call (NOTES.md
# section 12) held; verify keeps pipe_r (pipe_v / pipe_x verify were 5-18% slower). Opt-in.
MEASURED_POLICY_S5 = LaunchPolicy(
    pipe_verify=MEASURED_POLICY_S4.pipe_verify,
    pipe_deferred=PipeConfig(stages=3, block_v=64, num_warps=4, bkc=32, pending_in_stage1=True,
                             tma=True))  # fmt: skip

# Session 6 (round 10, H200, 2026-12-02 16:55 UTC, stage 742248f, copy 4242.9 GB/s, 126 timed
# rows, every row float64-checked over all requests, no contract miss): pipe_x's TMA deferred
# at 32-row dv tiles and 2 warps (variants "pipe_zw2": 168 registers, 31 KB, 6 programs / SM,
# the same 12 warps per SM as pipe_x over twice the programs). 35B TP1 fp32: B = 256 T = 4
# 405.8 us vs pipe_x 449.7 (0.902x, rule <= 0.97x), T = 2 402.4 vs 444.3, T = 9 439.0 vs 480.7;
# B = 64 T = 4 112.8 vs 126.6; B = 1 T = 4 14.0 vs 14.2. The rule declared before the call
# (NOTES.md section 14) held; verify keeps pipe_r (pipe_y / pipe_y96, TMA verify, 2-3% slower).
# Opt-in, like the earlier measured policies.
MEASURED_POLICY_S6 = LaunchPolicy(
    pipe_verify=MEASURED_POLICY_S4.pipe_verify,
    pipe_deferred=PipeConfig(stages=3, block_v=32, num_warps=2, bkc=32, pending_in_stage1=True,
                             tma=True))  # fmt: skip

# Session 7 (round 11, staged session 6 at s6-k11 7f97d9a = main's kernels; run 2026-12-02
# 21:21 UTC from main 973357b's stage, 42 timed rows, every row float64-checked over all
# requests, no contract miss): pipe_zw2's TMA deferred at 16-row dv tiles and 1 warp
# (variants "pipe_zw1": 168 registers, 14.7 KB, 12 programs / SM, the same 12 warps and 96 KB
# of state per SM as pipe_zw2). 35B TP1 fp32: B = 256 T = 4 387.3 us vs pipe_zw2 405.8 (0.954x,
# rule <= 0.97x), T = 2 377.3 vs 400.7, T = 9 435.3 vs 436.9; B = 64 T = 4 109.6 vs 112.7. The
# rule declared before the call (NOTES.md section 16) held; verify as MEASURED_POLICY_S6. Opt-in.
MEASURED_POLICY_S6B = LaunchPolicy(
    pipe_verify=MEASURED_POLICY_S4.pipe_verify,
    pipe_deferred=PipeConfig(stages=3, block_v=16, num_warps=1, bkc=32, pending_in_stage1=True,
                             tma=True))  # fmt: skip
