"""Round 7's GDN cells: what the step model still lacks, then kcode's variants, then the
points that sharpen its interpolation (run by round6.py with ``--plan r7``).

Every phase but gdn_kc times only the kernels whose point is not yet in capsim's packaged
GDN table (``capsim/calibration/data/h200_gdn_verify.csv``: kernel, heads, state dtype,
T, tree, B): a cell whose kernels are all measured is dropped. gdn_kc re-times the
defaults and vLLM's store-all next to the variants (the comparison is within one run).

Phases, in priority order (what each closes, from ``scripts/calibrated_coverage.py``):

- gdn_cov: the cells without which ``capsim simulate`` refuses a deployment: replay at
  the 35B TP2 heads (T = 2..9 at B = 256 and 1: every window the other kernels have there,
  so no T is left to interpolate) and the 35B TP8 heads (fp32 state; B = 1 and 256 at
  T = 1, 2, 4, 9, then B = 64);
- gdn_kc: kcode's launch variants (variants.py) next to the defaults of their families
  and vLLM's store-all, B = 256 (T = 4 both shapes, the 35B's T = 2..9, 15, (2,2,2)) and
  B = 64 at T = 4;
- gdn_tp64: B = 64 at T = 1, 2, 4, 9 for every other TP head count (a third batch size
  between 1 and 256 for the step model's curve along B);
- gdn_cal: B = 8 (T >= 5: T = 1..4 were measured), 32 and 128 at the two main shapes;
- gdn_tpT: the TP head counts' other windows (T = 3, 5..8) at B = 256, 1 and 64.
"""

from __future__ import annotations

import csv
from functools import lru_cache
from pathlib import Path

from ...gdn_verify.tree import TreeSpec
from .round6_cells import (
    TP_KERNELS,
    TP_WINDOWS_FIRST,
    TP_WINDOWS_REST,
    Cell,
    cal_cells,
    main_shapes,
    tp_pairs,
)
from .shapes import gdn_shape

# the coverage cells' shapes: (model, tp) whose heads the step model refuses
COV_REPLAY = ("qwen3.5-35b-a3b", 2)
COV_HEADS = ("qwen3.5-35b-a3b", 8)
COV_BATCHES = (1, 256)
COV_MID_BATCH = 64
REPLAY_WINDOWS = tuple(range(2, 10))


@lru_cache(maxsize=1)
def measured_points() -> frozenset[tuple]:
    """(kernel, Hv, Hk, dk, dv, state dtype, T, tree, B) of every row of capsim's packaged
    GDN table (empty when the package has none)."""
    import capsim.calibration as calibration  # the package only (no numpy import)

    path = Path(calibration.__file__).parent / "data" / "h200_gdn_verify.csv"
    if not path.is_file():
        return frozenset()
    with path.open(newline="") as fh:
        return frozenset(
            (r["kernel"], int(r["Hv"]), int(r["Hk"]), int(r["dk"]), int(r["dv"]),
             r["state_dtype"].removeprefix("torch."), int(r["T"]), r["tree"], int(r["B"]))
            for r in csv.DictReader(fh)
        )  # fmt: skip


def point_key(cell: Cell, kernel: str) -> tuple:
    s = cell.shape
    return (kernel, s.num_v_heads, s.num_k_heads, s.dk, s.dv, cell.state_dtype,
            cell.tree.num_nodes, cell.tree.label, cell.batch)  # fmt: skip


def _applies(kernel: str, cell: Cell) -> bool:
    """The registry's window rule (Kernel.applies) without building the case."""
    from .registry import KERNELS

    rule = next((k.windows for k in KERNELS if k.name == kernel), "any")
    if rule == "t1":
        return cell.tree.num_nodes == 1
    if rule == "chain":
        return cell.tree.is_chain
    return True


def unmeasured(cells: list[Cell], done: frozenset[tuple] | None = None) -> list[Cell]:
    """``cells`` with the kernels already in the packaged table (or not applying to the
    window) removed, and the cells left with none dropped; order kept."""
    done = measured_points() if done is None else done
    out = []
    for c in cells:
        names = tuple(k for k in c.kernels or ()
                      if point_key(c, k) not in done and _applies(k, c))  # fmt: skip
        if names:
            out.append(Cell(c.shape, c.state_dtype, c.tree, c.batch, names, c.phase,
                            c.gate_floor))  # fmt: skip
    return out


def _cov_shapes(dry: bool):
    if dry:
        from .shapes import ModelShape

        return ModelShape("tiny-r", 2, 1, 16, 16), ModelShape("tiny-h", 2, 2, 16, 16)
    return gdn_shape(*COV_REPLAY), gdn_shape(*COV_HEADS)


def cov_cells(dry: bool) -> list[Cell]:
    """Phase gdn_cov (module docstring)."""
    replay_shape, heads_shape = _cov_shapes(dry)
    windows = (2, 3) if dry else REPLAY_WINDOWS
    batches = (1, 2) if dry else COV_BATCHES
    first = (1, 2) if dry else TP_WINDOWS_FIRST
    mid = 3 if dry else COV_MID_BATCH
    cells = [Cell(replay_shape, "float32", TreeSpec.chain(t), b, ("replay",), "gdn_cov")
             for b in batches for t in windows]  # fmt: skip
    cells += [Cell(heads_shape, "float32", TreeSpec.chain(t), b, TP_KERNELS, "gdn_cov")
              for b in batches for t in first]  # fmt: skip
    cells += [Cell(heads_shape, "float32", TreeSpec.chain(t), mid, TP_KERNELS, "gdn_cov")
              for t in first]  # fmt: skip
    return unmeasured(cells)


# kcode's pick for this call (/work/notes/s3/kcode_ready.md, 2026-12-02 02:40 UTC, s3-kcode
# 3dbc5a8): the three defaults, stage 1 alone, the incumbent pipe_d and the session-3
# variants; R6_KC_KERNELS (a comma list) overrides it
KC_KERNELS = (
    "treewy_verify", "treewy_verify_commit", "deferred", "treewy_prep", "treewy_verify@pipe_d",
    "treewy_verify_commit@pipe_d", "treewy_verify@pipe_i", "treewy_verify@pipe_j",
    "treewy_verify@pipe_n", "treewy_verify_commit@pipe_n", "treewy_verify@pipe_o",
    "treewy_verify_commit@pipe_o", "deferred@pipe_a", "deferred@pipe_b", "deferred@pipe_e",
    "deferred@pipe_f", "deferred@pipe_g", "deferred@pipe_h", "deferred@pipe_k",
    "deferred@pipe_l", "deferred@pipe_m", "deferred@pipe_p", "deferred@pipe_q",
)  # fmt: skip


def kc7_cells(dry: bool) -> list[Cell]:
    """Phase gdn_kc: variants.variant_cells with KC_KERNELS (or R6_KC_KERNELS) and vLLM's
    store-all timed in every cell."""
    import os

    from .variants import variant_cells

    out = []
    for c in variant_cells(dry, only=os.environ.get("R6_KC_KERNELS") or ",".join(KC_KERNELS)):
        names = (*c.kernels, *(k for k in ("vllm_storeall",) if k not in c.kernels))
        out.append(Cell(c.shape, c.state_dtype, c.tree, c.batch, names, c.phase, c.gate_floor))
    return out


def _tp_rest_pairs(dry: bool):
    """tp_pairs less the coverage cells' head count (gdn_cov times those)."""
    heads = _cov_shapes(dry)[1].heads_key
    return [(s, sd) for s, sd in tp_pairs(dry) if not (s.heads_key == heads and sd == "float32")]


def tp64_cells(dry: bool) -> list[Cell]:
    """Phase gdn_tp64 (module docstring)."""
    first = (1, 2) if dry else TP_WINDOWS_FIRST
    mid = 3 if dry else COV_MID_BATCH
    cells = [Cell(s, sd, TreeSpec.chain(t), mid, TP_KERNELS, "gdn_tp64")
             for s, sd in _tp_rest_pairs(dry) for t in first]  # fmt: skip
    return unmeasured(cells)


def cal7_cells(dry: bool) -> list[Cell]:
    """Phase gdn_cal: round 6's calibration cells not yet measured."""
    return unmeasured(cal_cells(dry))


def tpT_cells(dry: bool) -> list[Cell]:  # noqa: N802 (T: the window, as elsewhere)
    """Phase gdn_tpT: T = 3, 5..8 at every TP head count (coverage shape included)."""
    rest = (3,) if dry else TP_WINDOWS_REST
    batches = (2, 1, 3) if dry else (256, 1, COV_MID_BATCH)
    pairs = [*_tp_rest_pairs(dry), (_cov_shapes(dry)[1], "float32")]
    cells = [Cell(s, sd, TreeSpec.chain(t), b, TP_KERNELS, "gdn_tpT")
             for s, sd in pairs for b in batches for t in rest]  # fmt: skip
    return unmeasured(cells)


CELLS7 = {"gdn_cov": cov_cells, "gdn_kc": kc7_cells, "gdn_tp64": tp64_cells,
          "gdn_cal": cal7_cells, "gdn_tpT": tpT_cells}  # fmt: skip
__all__ = ["CELLS7", "cov_cells", "measured_points", "unmeasured", "main_shapes"]
