"""Round 12 tables from round12_gdn_kc.csv (round6.py --plan r12).

    python -m capsim_kernels.bench.gdn.report12 --results kernels/results/h200

Prints (report9.print_round): the round-12 variants side by side with pipe_zw1,
pipe_zw2, the default deferred, verify @pipe_r and vLLM's store-all, the issue-19 target
table at 35B TP1 fp32 T = 4 B = 256, and the deferred and verify rules declared before the
call (kernels/gdn_verify/NOTES.md section 18) evaluated on the run's rows.
"""

from __future__ import annotations

from .report9 import VERIFY_LIMITS
from .report9 import main as _main

__all__ = ["DEFERRED_CANDIDATES12", "RULES12", "VERIFY_CANDIDATES12", "main"]

DEFERRED_CANDIDATES12 = ("deferred@pipe_zw1e", "deferred@pipe_zw1p")
VERIFY_CANDIDATES12 = ("treewy_verify@pipe_re",)
_PIPE_ZW1 = "deferred@pipe_zw1"
# NOTES.md section 18: <= 0.97 x pipe_zw1 at T = 4 B = 256, not slower than pipe_zw1 at
# T = 2 B = 256, not > 1% slower at T = 9 B = 256 (the variants run pipe_zw1's own kernel
# there: unpacked windows), not > 2% slower at B = 64 T = 4, every row check_ok and
# contract_ok; the winner becomes pipe_deferred of an opt-in MEASURED_POLICY_S13. Verify as
# rounds 9 / 10 (report9.VERIFY_LIMITS: >= 3% faster than pipe_r at T = 4 and 2 B = 256, not
# > 1% slower at T = 9 B = 256 and B = 64 T = 4, vt_err passes): pipe_verify of the same policy
RULES12 = {
    "deferred": (DEFERRED_CANDIDATES12, ((4, 256, _PIPE_ZW1, 0.97), (2, 256, _PIPE_ZW1, 1.0),
                                         (9, 256, _PIPE_ZW1, 1.01), (4, 64, _PIPE_ZW1, 1.02))),
    "verify": (VERIFY_CANDIDATES12, VERIFY_LIMITS),
}  # fmt: skip


def main(argv: list[str] | None = None) -> int:
    return _main(argv, tag="round12", rules=RULES12, doc=__doc__)


if __name__ == "__main__":
    raise SystemExit(main())
