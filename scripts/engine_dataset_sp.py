"""Build the shared-prefix pair for a real-engine run with prefix caching (CPU work, here).

capsim's ``shared-prefix`` workload (ShareGPT first turns behind 16 shared system prompts of
2,048 tokens, Zipf(1.0) popularity), first rows that fit the caps, as
``capsim.live.engine_dataset`` writes it:
  - ``experiments/engine/data/sharedprefix{N}.csv`` (committed; with a ``segments`` column
    that ``capsim.live.engine_oos`` attaches to the recorded run's requests);
  - ``{DEST}/sharedprefix{N}.jsonl`` (not committed; default .devstage/engine/datasets/,
    which engine_device.sh copies into the unpacked model dir's datasets/ on the device, so
    a job reads /tmp/capsim_engine/model/datasets/sharedprefix{N}.jsonl without a new
    model.tar.xz). The JSONL is ~7.2 MiB; `xz -9 -k` makes it ~0.33 MiB and engine_device.sh
    unpacks a datasets/NAME.jsonl.xz the same way (carry one of the two, not both).

Usage:
  python3 scripts/engine_dataset_sp.py [--rows 512] [--seed 0] [--dest .devstage/engine/datasets]
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import numpy as np

from capsim.live.engine_dataset import workload_rows, write_custom_dataset

WORKLOAD = "shared-prefix"
MAX_PROMPT_TOK = 6144
MAX_OUTPUT_TOK = 1024


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description="write the shared-prefix JSONL + CSV pair")
    ap.add_argument("--rows", type=int, default=512)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--dest", default=".devstage/engine/datasets", help="where the JSONL goes")
    ap.add_argument("--data", default="experiments/engine/data", help="where the CSV goes")
    ap.add_argument("--tokenizer", default="/work/shared/traces/tokenizers/qwen3/tokenizer.json")
    a = ap.parse_args(argv)
    rows = workload_rows(WORKLOAD, a.rows, a.seed, MAX_PROMPT_TOK, MAX_OUTPUT_TOK)
    stem = f"sharedprefix{a.rows}"
    jsonl, csv = Path(a.dest) / f"{stem}.jsonl", Path(a.data) / f"{stem}.csv"
    write_custom_dataset(rows, Path(a.tokenizer), jsonl, csv, seed=a.seed)
    assert rows.segments is not None
    lead = [s[0][0] for s in rows.segments]
    p = rows.prompt_tok
    stats = {
        "rows": rows.num_requests,
        "prompt_tok": {
            "min": int(p.min()),
            "p50": float(np.percentile(p, 50)),
            "p90": float(np.percentile(p, 90)),
            "p99": float(np.percentile(p, 99)),
            "max": int(p.max()),
            "mean": round(float(p.mean()), 1),
        },
        "output_tok_mean": round(float(rows.output_tok.mean()), 1),
        "distinct_system_prompts": len(set(lead)),
        "rows_per_system_prompt": sorted((lead.count(x) for x in set(lead)), reverse=True),
        "jsonl": str(jsonl),
        "csv": str(csv),
    }
    print(json.dumps(stats))
    return 0


if __name__ == "__main__":
    sys.exit(main())
