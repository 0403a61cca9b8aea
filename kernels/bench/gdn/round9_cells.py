"""Round 9's GDN cells (round6.py ``--plan r9``): the session-5 pipelined-stream variants
(kernels/gdn_verify/NOTES.md section 12: the state tile through a TMA tensor descriptor,
each tile's pool slot loaded one tile early) side by side with the incumbents first, then
round 7's unfinished interpolation points with the time left.

Phases, in priority order:

- gdn_kc: KC9_VARIANTS (env R6_KC_KERNELS, a comma list, overrides them) next to the
  round-6 deferred and pipe_s (the deferred decision rule's references), verify and
  verify+commit with pipe_r (``MEASURED_POLICY_S4``) and pipe_d, the fused chain, capsim's
  tuned store-all and vLLM 0.33's Triton store-all; 35B TP1 fp32, T = 4 at B = 256, 64, 1,
  then T = 2 and 9 at the same batches; every timed kernel float64-checked over all
  requests of its cell first.
- gdn_tpT, gdn_cal: round 7's phases of the same names (round7_cells), only the points
  still unmeasured (round 8 timed 18 of gdn_tpT's 114, none of gdn_cal's 67, both compiled
  in line). Their compiles join the warm-up after gdn_kc's (WARM9): round 8 spent its
  fill time compiling.
"""

from __future__ import annotations

from .round6_cells import Cell
from .round7_cells import cal7_cells, tpT_cells
from .round8_cells import kc_side_by_side_cells

# the session-5 variants (board, 2026-12-02, before the call), most informative first
KC9_VARIANTS: tuple[str, ...] = (
    "deferred@pipe_u", "treewy_verify@pipe_v", "treewy_verify_commit@pipe_v", "deferred@pipe_w",
    "deferred@pipe_x", "treewy_verify@pipe_x", "treewy_verify_commit@pipe_x",
)  # fmt: skip
# the incumbents of the decision rules (NOTES.md section 12) and the side-by-side baselines
KC9_BASELINES = (
    "deferred", "deferred@pipe_s", "treewy_verify@pipe_r", "treewy_verify_commit@pipe_r",
    "treewy_verify@pipe_d", "fused_chain", "storeall", "vllm_storeall",
)  # fmt: skip


def kc9_cells(dry: bool) -> list[Cell]:
    """Phase gdn_kc (module docstring): 35B TP1 fp32, T = 4 then 2 and 9, B = 256, 64, 1."""
    return kc_side_by_side_cells(dry, KC9_VARIANTS, KC9_BASELINES)


CELLS9 = {"gdn_kc": kc9_cells, "gdn_tpT": tpT_cells, "gdn_cal": cal7_cells}
# the phases the compile warm-up covers, in this order (what it does not reach by its
# deadline compiles in line)
WARM9 = ("gdn_kc", "gdn_tpT", "gdn_cal")
__all__ = ["CELLS9", "KC9_BASELINES", "KC9_VARIANTS", "WARM9", "kc9_cells"]
