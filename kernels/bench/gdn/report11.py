"""Round 11 tables from round11_gdn_kc.csv (round6.py --plan r11).

    python -m capsim_kernels.bench.gdn.report11 --results kernels/results/h200

Prints (report9.print_round): the round-11 deferred variants side by side with pipe_zw2,
pipe_x, the default deferred and vLLM's store-all, the issue-19 target table at 35B TP1 fp32
T = 4 B = 256, and the deferred rule declared before the call (kernels/gdn_verify/NOTES.md
section 16) evaluated on the run's rows.
"""

from __future__ import annotations

from .report9 import main as _main

__all__ = ["DEFERRED_CANDIDATES11", "RULES11", "main"]

DEFERRED_CANDIDATES11 = ("deferred@pipe_zw1", "deferred@pipe_zw2s4", "deferred@pipe_zw1s2")
_PIPE_ZW2 = "deferred@pipe_zw2"
# NOTES.md section 16: <= 0.97 x pipe_zw2 at T = 4 B = 256, not slower than pipe_zw2 at
# T = 2 / 9 B = 256, not > 2% slower at B = 64 T = 4, every row check_ok and contract_ok;
# the winner becomes pipe_deferred of an opt-in MEASURED_POLICY_S6B
RULES11 = {
    "deferred": (DEFERRED_CANDIDATES11, ((4, 256, _PIPE_ZW2, 0.97), (2, 256, _PIPE_ZW2, 1.0),
                                         (9, 256, _PIPE_ZW2, 1.0), (4, 64, _PIPE_ZW2, 1.02))),
}  # fmt: skip


def main(argv: list[str] | None = None) -> int:
    return _main(argv, tag="round11", rules=RULES11, doc=__doc__)


if __name__ == "__main__":
    raise SystemExit(main())
