"""A user's own workload file: CSV, Parquet or JSONL with one request per row.

Columns (names exact):

- ``prompt_tok`` (int >= 1, required): prompt tokens;
- ``output_tok`` (int >= 1, required): output tokens;
- ``arrival_s`` (float >= 0, optional): arrival offset in seconds, non-decreasing; leave the
  column out for a closed-loop workload (every value blank is treated as absent);
- ``source_id`` (str, optional): a label per row.

Other columns are an error (to catch typos such as ``prompt_tokens``). The format comes from
the suffix (``.csv``, ``.parquet``, ``.jsonl``; ``.gz`` allowed on CSV/JSONL) unless ``fmt``
names it. Every malformed row is reported with its line (row number for Parquet).
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np

from capsim.traces.csvrows import parse_float, parse_int
from capsim.traces.errors import RowIssue, TraceFormatError, raise_if_issues
from capsim.traces.table import RequestTable
from capsim.traces.textio import read_text

REQUIRED = ("prompt_tok", "output_tok")
OPTIONAL = ("arrival_s", "source_id")
FORMATS = ("csv", "parquet", "jsonl")
JSON_TOO_DEEP = "JSON nested too deeply (arrays/objects within each other ~1000 levels)"


def _sniff(path: Path, fmt: str | None) -> str:
    if fmt is not None:
        if fmt not in FORMATS:
            raise ValueError(f"fmt={fmt!r} must be one of {FORMATS}")
        return fmt
    suffixes = [s.lower() for s in path.suffixes]
    if suffixes and suffixes[-1] == ".gz":
        suffixes = suffixes[:-1]
    ext = suffixes[-1].lstrip(".") if suffixes else ""
    if ext not in FORMATS:
        raise ValueError(f"{path}: cannot tell the format from suffix {ext!r}; pass fmt= {FORMATS}")
    return ext


def _records(path: Path, fmt: str) -> tuple[list[str], list[tuple[int, dict[str, object]]]]:
    """Column names and ``(line, record)`` pairs; values still raw."""
    if fmt == "parquet":
        import pyarrow.parquet as pq

        try:
            table = pq.read_table(path)
        except Exception as exc:  # pyarrow raises several types for a bad file
            raise TraceFormatError(path, f"not a readable Parquet file: {exc}") from exc
        cols = list(table.column_names)
        data = table.to_pydict()
        recs = [(i + 1, {c: data[c][i] for c in cols}) for i in range(table.num_rows)]
        return cols, recs
    if fmt == "csv":
        import csv
        import io

        from capsim.traces.csvrows import csv_error_reason

        text = read_text(path)
        reader = csv.DictReader(io.StringIO(text))
        recs = []
        try:
            cols = [c.strip() for c in (reader.fieldnames or [])]
            reader.fieldnames = cols
            for row in reader:
                if None in row or any(v is None for v in row.values()):
                    recs.append((reader.line_num, {"__bad__": "wrong number of fields"}))
                    continue
                if all(not str(v).strip() for v in row.values()):
                    continue
                recs.append((reader.line_num, dict(row)))
        except csv.Error as exc:
            raise TraceFormatError(
                path, f"CSV error at line {reader.line_num + 1}: {csv_error_reason(exc)}"
            ) from None
        return cols, recs
    text = read_text(path)
    cols_seen: list[str] = []
    recs = []
    for lineno, line in enumerate(text.splitlines(), start=1):
        if not line.strip():
            continue
        try:
            obj = json.loads(line, object_pairs_hook=_no_duplicate_keys)
        except json.JSONDecodeError as exc:
            recs.append((lineno, {"__bad__": f"invalid JSON: {exc.msg}"}))
            continue
        except RecursionError:
            recs.append((lineno, {"__bad__": JSON_TOO_DEEP}))
            continue
        except ValueError as exc:
            recs.append((lineno, {"__bad__": str(exc)}))
            continue
        if not isinstance(obj, dict):
            recs.append((lineno, {"__bad__": "line is not a JSON object"}))
            continue
        for k in obj:
            if k not in cols_seen:
                cols_seen.append(k)
        recs.append((lineno, obj))
    return cols_seen, recs


def _no_duplicate_keys(pairs: list[tuple[str, object]]) -> dict[str, object]:
    keys = [k for k, _ in pairs]
    dups = sorted({k for k in keys if keys.count(k) > 1})
    if dups:
        raise ValueError(f"duplicate key(s) {dups}")
    return dict(pairs)


def _blank(value: object) -> bool:
    return value is None or (isinstance(value, str) and not value.strip())


def load_file(path: Path | str, fmt: str | None = None) -> RequestTable:
    """Load a user workload file (see module docstring for the columns)."""
    p = Path(path)
    kind = _sniff(p, fmt)
    cols, recs = _records(p, kind)
    if not cols:  # no row could be read: say why, line by line
        raise_if_issues(
            p, [RowIssue(line, str(r["__bad__"])) for line, r in recs if "__bad__" in r], "workload"
        )
    dups = sorted({c for c in cols if cols.count(c) > 1})
    if dups:
        raise TraceFormatError(p, f"duplicate column(s) {dups}")
    unknown = [c for c in cols if c not in REQUIRED + OPTIONAL]
    missing = [c for c in REQUIRED if c not in cols]
    if unknown or missing:
        raise TraceFormatError(
            p,
            f"columns must be {list(REQUIRED)} plus optional {list(OPTIONAL)}; "
            f"missing {missing}, unknown {unknown}",
        )
    if not recs:
        raise TraceFormatError(p, "no rows")
    has_arrival = "arrival_s" in cols and any(not _blank(r.get("arrival_s")) for _, r in recs)
    issues: list[RowIssue] = []
    prompt: list[int] = []
    output: list[int] = []
    arrival: list[float] = []
    source: list[str] = []
    for line, rec in recs:
        if "__bad__" in rec:
            issues.append(RowIssue(line, str(rec["__bad__"])))
            continue
        try:
            pr = parse_int(_text(rec.get("prompt_tok")), "prompt_tok", minimum=1)
            out = parse_int(_text(rec.get("output_tok")), "output_tok", minimum=1)
            if has_arrival:
                arr = parse_float(_text(rec.get("arrival_s")), "arrival_s", minimum=0.0)
                if arrival and arr < arrival[-1]:
                    raise ValueError(f"arrival_s={arr} is earlier than the row before")
        except ValueError as exc:
            issues.append(RowIssue(line, str(exc)))
            continue
        prompt.append(pr)
        output.append(out)
        if has_arrival:
            arrival.append(arr)
        sid = rec.get("source_id")
        source.append(f"{p.name}:{line}" if _blank(sid) else str(sid))
    raise_if_issues(p, issues, "workload")
    return RequestTable(
        name=p.name,
        prompt_tok=np.asarray(prompt, dtype=np.int64),
        output_tok=np.asarray(output, dtype=np.int64),
        arrival_s=np.asarray(arrival, dtype=np.float64) if has_arrival else None,
        source_id=tuple(source),
    )


def _text(value: object) -> str:
    if value is None:
        return ""
    if isinstance(value, bool):
        return "nan"  # booleans are not counts; make the parser reject them
    return str(value)
