"""Quick GPU gate before a benchmark run: the TreeWY kernels at two windows, one shape.

    python -m capsim_kernels.bench.gdn.gpu_smoke     # exit 0: all within tolerance

Runs ``run.run_checks`` (float64 references, SPEC.md tolerances) for the 35B TP1 head
shape, fp32 and bf16 state, on the T=4 chain and the (2,2,2) tree (the single-launch
kernel at HALF = 8 and 16) and the (3,3,3) tree (W=40, two launches), so a device
run can fall back to other kernels before spending its time budget on timing.
"""

from __future__ import annotations

import sys

from .run import run_checks
from .shapes import MODEL_SHAPES, WINDOWS


def main() -> int:
    windows = [
        w for w in WINDOWS if (w.label, w.num_nodes) in (("chain", 4), ("2,2,2", 15), ("3,3,3", 40))
    ]
    try:
        checks = run_checks(shapes=MODEL_SHAPES[:1], windows=windows)
    except Exception as e:  # compile or launch failure: report and fail the gate
        print("SMOKE FAILED", repr(e)[:400], flush=True)
        return 1
    ok = all(c["ok"] for c in checks)
    print("SMOKE", "ok" if ok else "FAILED", flush=True)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
