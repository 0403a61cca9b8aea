"""Session 15: the 35B start-up of call 46 into the memory validation set, as session 14's rows
(ingest_s14_35b.py, whose row builder and excerpt filter this reuses): one prediction row in
experiments/vllm_logs/startups.csv and an excerpt of the raw server.log's memory lines.
Refuses to overwrite a row. Run from the repository root:

  python3 experiments/memory_plan/h200/ingest_s15_35b.py [--dry-run]
"""

from __future__ import annotations

import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
from ingest_s14_35b import main  # noqa: E402

ROWS = [
    {
        "id": "h200-35b-g090-k2-r6-s15call46",
        "job": "s_g090_k2_steps_r6",
        "call": 46,
        "session": 15,
        "raw": "/work/results_s15/dev46/x/s_g090_k2_steps_r6/server.log",
        "k": 2,
        "what": (
            "sixth repeat of h200-35b-g090-k2-s7call22, on a new machine (boot_id 01607ea2): "
            "the first engine start-up on it after the stage call (cold compile cache, "
            "start-up 354.3 s)"
        ),
        "started": "2026-12-04 21:33 UTC device clock",
        "plan_line": "2026-12-04 21:31 UTC",
        "main": "main 6a663db (memory code as 951c9cb, session 14's last commit)",
        "figures": (
            "KV 49.70 GiB, 2209 blocks (2208 usable), block 1072, padding 0.75%, peak 8.05, "
            "non-torch 0.25, graph estimate 0.73, 'GPU KV cache size' 2,279,827 tokens"
        ),
        "extra": "'Padding mamba page size by 0.75%'; PIECEWISE=49 FULL=49 (largest 498); "
        "'Add 3 padding layers'",
    },
]

if __name__ == "__main__":
    sys.exit(main(rows=ROWS))
