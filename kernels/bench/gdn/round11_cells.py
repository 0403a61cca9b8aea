"""Round 11's GDN cells (round6.py ``--plan r11``): a very short call on the deferred commit
alone (kernels/gdn_verify/NOTES.md section 16): round 10's winner pipe_zw2 (6 programs per
SM at pipe_x's 12 warps) against three launches further along its line and the references.

- gdn_kc: KC11_VARIANTS (env R6_KC_KERNELS, a comma list, overrides them) next to
  deferred@pipe_zw2 (``MEASURED_POLICY_S6``'s deferred, the rule's reference),
  deferred@pipe_x (``MEASURED_POLICY_S5``'s), the round-6 default deferred and vLLM 0.33's
  Triton store-all (the baseline ratio); 35B TP1 fp32, T = 4 / 2 / 9 at B = 256 and 64
  (B = 1 dropped: its vLLM and small-batch compiles cost warm-up time the call does not
  have); every timed kernel float64-checked over all requests of its cell first; CUDA-graph
  replays with the L2 flushed (round 9's method). Its compiles are the whole warm-up (WARM11).
"""

from __future__ import annotations

from .round6_cells import Cell
from .round8_cells import kc_side_by_side_cells

# NOTES.md section 16 (written before the call), most informative first
KC11_VARIANTS: tuple[str, ...] = ("deferred@pipe_zw1", "deferred@pipe_zw2s4", "deferred@pipe_zw1s2")
# the rule's reference (pipe_zw2), the previous measured choice, the default, vLLM's store-all
KC11_BASELINES = ("deferred@pipe_zw2", "deferred@pipe_x", "deferred", "vllm_storeall")
KC11_BATCHES = (256, 64)


def kc11_cells(dry: bool) -> list[Cell]:
    """Phase gdn_kc (module docstring): 35B TP1 fp32, T = 4 then 2 and 9, B = 256 and 64."""
    return kc_side_by_side_cells(dry, KC11_VARIANTS, KC11_BASELINES, KC11_BATCHES)


CELLS11 = {"gdn_kc": kc11_cells}
# the phases the compile warm-up covers
WARM11 = ("gdn_kc",)
__all__ = ["CELLS11", "KC11_BASELINES", "KC11_BATCHES", "KC11_VARIANTS", "WARM11", "kc11_cells"]
