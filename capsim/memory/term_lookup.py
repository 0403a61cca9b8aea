"""Non-KV memory terms measured on the H200, for the memory plan.

The table and its loader belong to ``capsim.memory.measured_terms``
(``data/h200_memory_terms.csv``: term, model, tp, max_num_batched_tokens, max_num_seqs,
capture_size, bytes, kernel, source, command, date). A term counts as measured only for
the same model preset and tp, inside the measured range along the term's axis (linear
between points, never extrapolated); anything else stays modelled. Without the table
(or its loader) every term is modelled.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any


def lookup_from_table(table: Any) -> Callable[[str, str, int, int], int | None]:
    """A plan lookup over a loaded ``MemoryTerms`` table (None: not measured there)."""

    def lookup(term: str, model: str, tp: int, x: int) -> int | None:
        if table is None:
            return None
        try:
            return round(table.bytes_at(term, model, tp, int(x)))
        except ValueError:
            return None

    return lookup


@functools.cache
def _table() -> Any:
    try:
        from capsim.memory.measured_terms import load_memory_terms
    except ImportError:
        return None
    try:
        return load_memory_terms()
    except ValueError:
        return None


def measured_term(term: str, model: str, tp: int, x: int) -> int | None:
    """Bytes of ``term`` for ``model``/``tp`` at ``x`` on the term's axis, or None."""
    return lookup_from_table(_table())(term, model, tp, x)
