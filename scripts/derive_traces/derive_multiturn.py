#!/usr/bin/env python3
"""Derive capsim/traces/data/sharegpt_multiturn.parquet from the raw ShareGPT file.

    python scripts/derive_traces/derive_multiturn.py --shared ../shared/traces \
        [--conversations 3000]

Per turn of the first CONVERSATIONS multi-turn conversations: user message tokens (in the
chat template) and assistant message tokens, Qwen3 and Qwen3.5 tokenizers
(``capsim.traces.multiturn``). Needs ``tokenizers`` and ``tiktoken``.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))

from capsim.traces.compact import DATA_DIR, write_compact  # noqa: E402
from capsim.traces.derive import SHAREGPT_RAW, load_counters  # noqa: E402
from capsim.traces.multiturn import STEM, derive_multiturn  # noqa: E402


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--shared", type=Path, default=REPO.parent / "shared" / "traces")
    ap.add_argument("--out", type=Path, default=DATA_DIR)
    ap.add_argument("--conversations", type=int, default=3000)
    args = ap.parse_args(argv)
    counters = load_counters(args.shared)
    frame = derive_multiturn(
        args.shared / SHAREGPT_RAW, counters.qwen3, counters.qwen35, args.conversations
    )
    path = write_compact(STEM, frame, args.out)
    print(f"{path}  {path.stat().st_size:,} bytes, {len(frame)} turns")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
