"""Round 10's GDN cells (round6.py ``--plan r10``): the session-6 pipelined-stream variants
(kernels/gdn_verify/NOTES.md section 14: the verify stream's state tile through a TMA
tensor descriptor without slot_ahead, pipe_x's TMA deferred at 32-row tiles / 2 stages)
side by side with the incumbents of the decision rules. One phase, a short call.

- gdn_kc: KC10_VARIANTS (env R6_KC_KERNELS, a comma list, overrides them) next to the
  round-6 deferred, pipe_s and pipe_x (``MEASURED_POLICY_S5``'s deferred, the deferred
  rule's reference), verify and verify+commit with pipe_r (the verify rule's reference),
  capsim's tuned store-all and vLLM 0.33's Triton store-all; 35B TP1 fp32, T = 4 at
  B = 256, 64, 1, then T = 2 and 9 at the same batches; every timed kernel float64-checked
  over all requests of its cell first; CUDA-graph replays with the L2 flushed (round 9's
  method). Its compiles are the whole warm-up (WARM10).
"""

from __future__ import annotations

from .round6_cells import Cell
from .round8_cells import kc_side_by_side_cells

# the session-6 variants (NOTES.md section 14, written before the call), most informative first
KC10_VARIANTS: tuple[str, ...] = (
    "treewy_verify@pipe_y", "deferred@pipe_z", "treewy_verify@pipe_y96", "deferred@pipe_zw2",
    "deferred@pipe_z2", "treewy_verify_commit@pipe_y", "treewy_verify_commit@pipe_y96",
)  # fmt: skip
# the incumbents of the decision rules (NOTES.md section 14) and the side-by-side baselines
KC10_BASELINES = (
    "deferred", "deferred@pipe_s", "deferred@pipe_x", "treewy_verify@pipe_r",
    "treewy_verify_commit@pipe_r", "storeall", "vllm_storeall",
)  # fmt: skip


def kc10_cells(dry: bool) -> list[Cell]:
    """Phase gdn_kc (module docstring): 35B TP1 fp32, T = 4 then 2 and 9, B = 256, 64, 1."""
    return kc_side_by_side_cells(dry, KC10_VARIANTS, KC10_BASELINES)


CELLS10 = {"gdn_kc": kc10_cells}
# the phases the compile warm-up covers
WARM10 = ("gdn_kc",)
__all__ = ["CELLS10", "KC10_BASELINES", "KC10_VARIANTS", "WARM10", "kc10_cells"]
