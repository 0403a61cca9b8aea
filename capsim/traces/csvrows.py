"""CSV rows with their line numbers, a header check and per-cell parsers that explain failures."""

from __future__ import annotations

import csv
import io
import math
from pathlib import Path

from capsim.traces.errors import RowIssue, TraceFormatError
from capsim.traces.textio import read_text

INT64_MAX = 2**63 - 1
CSV_FIELD_LIMIT = csv.field_size_limit()
"""Python's csv module refuses a field longer than this (131072 characters, 128 KiB)."""


def csv_error_reason(exc: csv.Error) -> str:
    """Python's csv error as a user-facing reason (what is wrong, what to do)."""
    msg = str(exc)
    if "field larger than field limit" in msg:
        return (
            f"a field is longer than {CSV_FIELD_LIMIT} characters (128 KiB), the CSV reader's "
            "limit; a token-count file has short fields: check the column separator/quotes"
        )
    if "new-line character seen in unquoted field" in msg:
        return (
            "a bare carriage return (CR, \\r) inside a row; save the file with LF or CRLF line ends"
        )
    return msg


def read_csv_rows(
    path: Path | str, schemas: dict[str, tuple[str, ...]]
) -> tuple[str, tuple[str, ...], list[tuple[int, list[str]]], list[RowIssue]]:
    """Read a CSV whose header is one of ``schemas`` (name -> column names).

    Returns the schema name, the header, ``(line, cells)`` per data row and the rows whose
    field count is wrong (as issues). A header matching no schema is a whole-file error.
    """
    text = read_text(path)
    reader = csv.reader(io.StringIO(text))
    try:
        header = tuple(h.strip() for h in next(reader))
    except StopIteration as exc:
        raise TraceFormatError(path, f"cannot read a CSV header: {exc}") from exc
    except csv.Error as exc:
        raise TraceFormatError(path, f"cannot read a CSV header: {csv_error_reason(exc)}") from exc
    schema = next((name for name, cols in schemas.items() if cols == header), None)
    if schema is None:
        expected = " or ".join(",".join(c) for c in schemas.values())
        raise TraceFormatError(path, f"header {','.join(header)!r} is not {expected!r}")
    rows: list[tuple[int, list[str]]] = []
    issues: list[RowIssue] = []
    try:
        for cells in reader:
            line = reader.line_num
            if not cells or all(not c.strip() for c in cells):
                continue
            if len(cells) != len(header):
                issues.append(RowIssue(line, f"{len(cells)} fields, expected {len(header)}"))
                continue
            rows.append((line, cells))
    except csv.Error as exc:
        raise TraceFormatError(
            path, f"CSV error at line {reader.line_num}: {csv_error_reason(exc)}"
        ) from exc
    if not rows and not issues:
        raise TraceFormatError(path, "no data rows")
    return schema, header, rows, issues


def parse_int(value: str, column: str, *, minimum: int) -> int:
    """An integer cell (``'12'``; ``'12.0'`` is accepted), or ValueError naming the column."""
    s = value.strip()
    try:
        out = int(s)
    except ValueError:
        try:
            f = float(s)
        except ValueError:
            raise ValueError(f"{column}={value!r} is not an integer") from None
        if not math.isfinite(f) or f != int(f):
            raise ValueError(f"{column}={value!r} is not an integer") from None
        out = int(f)
    if out < minimum:
        raise ValueError(f"{column}={out} must be >= {minimum}")
    if out > INT64_MAX:
        raise ValueError(f"{column}={s[:40]} is above the int64 maximum {INT64_MAX}")
    return out


def parse_float(value: str, column: str, *, minimum: float | None = None) -> float:
    """A finite float cell, or ValueError naming the column."""
    try:
        out = float(value.strip())
    except ValueError:
        raise ValueError(f"{column}={value!r} is not a number") from None
    if not math.isfinite(out):
        raise ValueError(f"{column}={value!r} is not finite")
    if minimum is not None and out < minimum:
        raise ValueError(f"{column}={out} must be >= {minimum}")
    return out
