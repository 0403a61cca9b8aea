"""Round 8's GDN cells (round6.py ``--plan r8``): the step-model cells round 7 owed first,
under their own deadline, then kcode's deferred-commit variants side by side with the
incumbents, then round 7's unfinished interpolation points with the time left.

Phases, in priority order:

- gdn_cov: what keeps ``capsim simulate`` refusing deployments (issue 21 item 4;
  ``scripts/calibrated_coverage.py``): the 35B TP8 heads (fp32 state; the step model
  needs every (kernel, T) at two batch sizes: B = 256 has T = 1, 2 since round 7) and
  replay at the 35B TP2 heads (B = 1 has T = 2..5). Ordered so the first few cells
  already unrefuse every depth: TP8 B = 1 at T = 1 and 9 and B = 256 at T = 9 (T = 1 and
  9 become curves, T = 2..8 interpolate between them), replay B = 256 at T = 2 and 9 and
  B = 1 at T = 9 (curves at both ends of k = 1..8); then the other windows (T = 4, 2 at
  the TP8 heads; replay T = 3..8) and B = 64 at the TP8 heads. Points already in the
  packaged table are dropped (round7_cells.unmeasured).
- gdn_kc: the deferred-commit variants (KC8_KERNELS; env R6_KC_KERNELS, a comma list,
  overrides it) next to the round-6 deferred, round 7's hoisted pipelined deferred
  (pipe_f, pipe_h), verify+commit (default and pipe_d), the fused chain, capsim's tuned
  store-all and vLLM 0.33's Triton store-all, 35B TP1 fp32: T = 4 at B = 256, 64, 1,
  then T = 2 and 9 at the same batches; every timed kernel float64-checked over all
  requests of its cell first (round 7's method).
- gdn_tp64, gdn_tpT, gdn_cal: round 7's phases of the same names (round7_cells), only
  the points still unmeasured; they compile in line (not in the warm-up: WARM8).
"""

from __future__ import annotations

import os

from ...gdn_verify.tree import TreeSpec
from .round6_cells import TP_KERNELS, Cell, main_shapes
from .round7_cells import _cov_shapes, cal7_cells, tp64_cells, tpT_cells, unmeasured

# (shape: "heads" = 35B TP8, "replay" = 35B TP2; T; B) in priority order (docstring)
COV8_ORDER = (
    ("heads", 1, 1), ("heads", 9, 1), ("heads", 9, 256),
    ("replay", 2, 256), ("replay", 9, 256), ("replay", 9, 1),
    ("heads", 4, 1), ("heads", 4, 256), ("heads", 2, 1),
    *(("replay", t, 256) for t in (4, 6, 3, 5, 7, 8)),
    *(("replay", t, 1) for t in (6, 7, 8)),
    *(("heads", t, 64) for t in (1, 2, 4, 9)),
)  # fmt: skip
# the dry run's stand-in: the same order on tiny shapes (windows 1..3, B = 1..3)
COV8_DRY = (("heads", 1, 1), ("heads", 3, 2), ("replay", 2, 2), ("replay", 3, 1),
            ("heads", 2, 3))  # fmt: skip

# kcode's session-4 variants (board, 2026-12-02 05:44 UTC, s4-kcode a140f15): pipe_r
# (keys and queries packed in one MMA operand: verify, verify+commit and a 3-stage
# 16-row deferred), pipe_s (pipe_f at 3 stages), pipe_t (3-stage 16-row 4-warp packed
# deferred); kcode's order of importance (drop from the end when short)
KC8_VARIANTS: tuple[str, ...] = (
    "deferred@pipe_r", "deferred@pipe_s", "treewy_verify@pipe_r", "treewy_verify_commit@pipe_r",
    "deferred@pipe_t",
)  # fmt: skip
# the incumbents every variant is compared with in the same cell (kcode's decision rule
# reads deferred, deferred@pipe_f and treewy_verify@pipe_d)
KC8_BASELINES = (
    "deferred", "deferred@pipe_f", "deferred@pipe_h", "treewy_verify", "treewy_verify@pipe_d",
    "treewy_verify_commit", "treewy_verify_commit@pipe_d", "fused_chain", "storeall",
    "vllm_storeall",
)  # fmt: skip
KC8_WINDOWS = (4, 2, 9)
KC8_BATCHES = (256, 64, 1)


def cov8_cells(dry: bool) -> list[Cell]:
    """Phase gdn_cov (module docstring): one cell per (shape, T, B), the step model's
    kernels at the TP8 heads, replay at the TP2 heads; measured points dropped."""
    replay_shape, heads_shape = _cov_shapes(dry)
    cells = []
    for which, t, b in COV8_DRY if dry else COV8_ORDER:
        shape, kernels = (heads_shape, TP_KERNELS) if which == "heads" else (
            replay_shape, ("replay",))  # fmt: skip
        cells.append(Cell(shape, "float32", TreeSpec.chain(t), b, kernels, "gdn_cov"))
    return unmeasured(cells)


def kc8_kernels(default_variants: tuple[str, ...] = KC8_VARIANTS,
                baselines: tuple[str, ...] = KC8_BASELINES) -> tuple[str, ...]:
    """``default_variants`` (or env R6_KC_KERNELS) then ``baselines``, each once; names
    checked against the registry and variants.py (round 9 passes its own lists)."""
    from .registry import KERNELS
    from .variants import VARIANT_KERNELS

    listed = os.environ.get("R6_KC_KERNELS", "")
    variants = tuple(n.strip() for n in listed.split(",") if n.strip()) or default_variants
    names = tuple(dict.fromkeys((*variants, *baselines)))
    known = {k.name for k in KERNELS} | {k.name for k in VARIANT_KERNELS}
    unknown = [n for n in names if n not in known]
    if unknown:
        raise ValueError(f"R6_KC_KERNELS / KC8_VARIANTS: unknown kernel(s) {unknown}")
    return names


def kc_side_by_side_cells(dry: bool, variants: tuple[str, ...] = KC8_VARIANTS,
                          baselines: tuple[str, ...] = KC8_BASELINES,
                          batches: tuple[int, ...] = KC8_BATCHES) -> list[Cell]:
    """A gdn_kc phase (rounds 8-11): 35B TP1 fp32, T = 4 then 2 and 9 x ``batches``, every
    cell timing ``variants`` then ``baselines`` (kc8_kernels)."""
    shape = main_shapes(dry)[0]
    windows, batches = ((4, 2), (3, 1)) if dry else (KC8_WINDOWS, batches)
    names = kc8_kernels(variants, baselines)
    return [Cell(shape, "float32", TreeSpec.chain(t), b, names, "gdn_kc")
            for t in windows for b in batches]  # fmt: skip


def kc8_cells(dry: bool) -> list[Cell]:
    """Phase gdn_kc (module docstring): 35B TP1 fp32, T = 4 then 2 and 9, B = 256, 64, 1."""
    return kc_side_by_side_cells(dry)


CELLS8 = {"gdn_cov": cov8_cells, "gdn_kc": kc8_cells, "gdn_tp64": tp64_cells,
          "gdn_tpT": tpT_cells, "gdn_cal": cal7_cells}  # fmt: skip
# the phases the compile warm-up covers (the fill phases compile in line)
WARM8 = ("gdn_cov", "gdn_kc")
__all__ = ["CELLS8", "COV8_ORDER", "KC8_BASELINES", "KC8_VARIANTS", "WARM8", "cov8_cells",
           "kc8_cells", "kc8_kernels", "kc_side_by_side_cells"]
