"""Look up non-KV memory terms measured on the H200 (capsim/calibration/data/
h200_memory_terms.csv: term, model, tp, max_num_batched_tokens, max_num_seqs,
capture_size, bytes, kernel, source, command, date).

Only an exact configuration counts as measured; anything else is left to the model.
The table is read once per process (functools.cache of an immutable mapping).
"""

from __future__ import annotations

import csv
import functools
from pathlib import Path

TABLE_PATH = Path(__file__).resolve().parents[1] / "calibration" / "data" / "h200_memory_terms.csv"

# capsim's term name -> the names the measurement table may use for it.
TERM_ALIASES: dict[str, tuple[str, ...]] = {
    "activation_peak": ("activation_peak", "profile_peak"),
    "cudagraph": ("cudagraph", "cudagraph_pool", "cuda_graph_pool"),
}


@functools.cache
def _table(path: str) -> dict[tuple[str, str, int, int, int, int], int]:
    p = Path(path)
    if not p.is_file():
        return {}
    out: dict[tuple[str, str, int, int, int, int], int] = {}
    with p.open(newline="") as fh:
        for row in csv.DictReader(fh):
            try:
                key = (
                    row["term"].strip(),
                    row["model"].strip(),
                    int(row["tp"] or 0),
                    int(row.get("max_num_batched_tokens") or 0),
                    int(row.get("max_num_seqs") or 0),
                    int(row.get("capture_size") or 0),
                )
                out[key] = int(float(row["bytes"]))
            except (KeyError, ValueError):
                continue
    return out


def measured_term(
    term: str,
    model: str,
    tp: int,
    max_num_batched_tokens: int,
    max_num_seqs: int,
    capture_size: int,
    *,
    path: Path = TABLE_PATH,
) -> int | None:
    """Bytes measured for exactly this configuration, or None."""
    table = _table(str(path))
    for name in TERM_ALIASES.get(term, (term,)):
        got = table.get((name, model, tp, max_num_batched_tokens, max_num_seqs, capture_size))
        if got is not None:
            return got
    return None
