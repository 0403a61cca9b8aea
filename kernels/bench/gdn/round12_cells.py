"""Round 12's GDN cells (round6.py ``--plan r12``): a short call on the deferred commit's
state stream (kernels/gdn_verify/NOTES.md section 18): round 11's winner pipe_zw1 (12
one-warp programs per SM) against two launches that pack its key / query operand and take
the window's synchronous row loads off its per-chunk critical path, the verify stream
pipe_r with the same early rows, and the references.

- gdn_kc: KC12_VARIANTS (env R6_KC_KERNELS, a comma list, overrides them) next to
  deferred@pipe_zw1 (``MEASURED_POLICY_S6B``'s deferred, the rule's reference),
  deferred@pipe_zw2 (``MEASURED_POLICY_S6``'s), the round-6 default deferred, verify @pipe_r
  (the measured verify stream, the verify rule's reference) and
  vLLM 0.33's Triton store-all (the baseline ratio); 35B TP1 fp32, T = 4 / 2 / 9 at
  B = 256 and 64; every timed kernel float64-checked over all requests of its cell first;
  CUDA-graph replays with the L2 flushed (round 9's method). Its compiles are the whole
  warm-up (WARM12).
"""

from __future__ import annotations

from .round6_cells import Cell
from .round8_cells import kc_side_by_side_cells

# NOTES.md section 18 (written before the call), most informative first
KC12_VARIANTS: tuple[str, ...] = ("deferred@pipe_zw1e", "treewy_verify@pipe_re",
                                  "deferred@pipe_zw1p")  # fmt: skip
# the rule's reference (pipe_zw1), the previous one, the default, verify pipe_r, vLLM's store-all
KC12_BASELINES = ("deferred@pipe_zw1", "deferred@pipe_zw2", "deferred", "treewy_verify@pipe_r",
                  "vllm_storeall")  # fmt: skip
KC12_BATCHES = (256, 64)


def kc12_cells(dry: bool) -> list[Cell]:
    """Phase gdn_kc (module docstring): 35B TP1 fp32, T = 4 then 2 and 9, B = 256 and 64."""
    return kc_side_by_side_cells(dry, KC12_VARIANTS, KC12_BASELINES, KC12_BATCHES)


CELLS12 = {"gdn_kc": kc12_cells}
# the phases the compile warm-up covers
WARM12 = ("gdn_kc",)
__all__ = ["CELLS12", "KC12_BASELINES", "KC12_BATCHES", "KC12_VARIANTS", "WARM12", "kc12_cells"]
