"""Round 10 tables from round10_gdn_kc.csv (round6.py --plan r10).

    python -m capsim_kernels.bench.gdn.report10 --results kernels/results/h200

Prints (report9.print_round): the session-6 stream variants side by side with the
incumbents and vLLM's store-all, the issue-19 target table at 35B TP1 fp32 T = 4 B = 256,
and the two decision rules declared before the call (kernels/gdn_verify/NOTES.md section
14) evaluated on the run's rows.
"""

from __future__ import annotations

from .report9 import VERIFY_LIMITS
from .report9 import main as _main

__all__ = ["DEFERRED_CANDIDATES10", "RULES10", "VERIFY_CANDIDATES10", "main"]

DEFERRED_CANDIDATES10 = ("deferred@pipe_z", "deferred@pipe_z2", "deferred@pipe_zw2")
VERIFY_CANDIDATES10 = ("treewy_verify@pipe_y", "treewy_verify@pipe_y96")
_PIPE_X = "deferred@pipe_x"
# NOTES.md section 14: deferred <= 0.97 x pipe_x at T = 4 B = 256, not slower than pipe_x at
# T = 2 / 9 B = 256, not > 2% slower at B = 64 T = 4; verify as round 9 (vs pipe_r)
RULES10 = {
    "deferred": (DEFERRED_CANDIDATES10, ((4, 256, _PIPE_X, 0.97), (2, 256, _PIPE_X, 1.0),
                                         (9, 256, _PIPE_X, 1.0), (4, 64, _PIPE_X, 1.02))),
    "verify": (VERIFY_CANDIDATES10, VERIFY_LIMITS),
}  # fmt: skip


def main(argv: list[str] | None = None) -> int:
    return _main(argv, tag="round10", rules=RULES10, doc=__doc__)


if __name__ == "__main__":
    raise SystemExit(main())
