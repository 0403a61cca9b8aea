#!/usr/bin/env python3
"""Re-derive capsim's compact workload files from shared/traces.

    python scripts/derive_traces/derive.py --shared ../shared/traces  # writes capsim/traces/data/
    python scripts/derive_traces/derive.py --shared ../shared/traces --counts tokenizer  # recount

Needs ``tokenizers`` and ``tiktoken`` for ``--verify-sample > 0`` (default 300) or
``--counts tokenizer``; ``--verify-sample 0`` runs without them. See
scripts/derive_traces/README.md.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))

from capsim.traces.compact import DATA_DIR  # noqa: E402
from capsim.traces.derive import derive_all  # noqa: E402


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--shared", type=Path, default=REPO.parent / "shared" / "traces")
    ap.add_argument("--out", type=Path, default=DATA_DIR)
    ap.add_argument("--counts", choices=("derived", "tokenizer"), default="derived")
    ap.add_argument("--verify-sample", type=int, default=300)
    args = ap.parse_args(argv)
    paths = derive_all(args.shared, args.out, counts=args.counts, verify_sample=args.verify_sample)
    for p in paths:
        print(f"{p}  {p.stat().st_size:,} bytes")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
