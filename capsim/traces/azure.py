"""Azure LLM inference trace 2023 (Splitwise, ISCA 2024): timestamps and token counts.

``AzureLLMInferenceTrace_{conv,code}.csv`` from ``Azure/AzurePublicDataset`` (CC-BY-4.0), header
``TIMESTAMP,ContextTokens,GeneratedTokens``; ``TIMESTAMP`` is ``YYYY-MM-DD HH:MM:SS.fffffff``
and sorted. The table's ``arrival_s`` is the offset from the first row's timestamp. Used in
capsim as a real, bursty production arrival process (stand-in for BurstGPT's timestamps).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from capsim.traces.csvrows import parse_int, read_csv_rows
from capsim.traces.errors import RowIssue, raise_if_issues
from capsim.traces.table import RequestTable

AZURE_HEADER = ("TIMESTAMP", "ContextTokens", "GeneratedTokens")


def _parse_timestamp_ns(value: str) -> int:
    s = value.strip()
    if len(s) < 19 or s[10] != " ":
        raise ValueError(f"TIMESTAMP={value!r} is not 'YYYY-MM-DD HH:MM:SS[.fffffff]'")
    try:
        return int(np.datetime64(s.replace(" ", "T", 1), "ns").astype(np.int64))
    except ValueError:
        raise ValueError(f"TIMESTAMP={value!r} is not a valid time") from None


def read_azure(path: Path | str, *, name: str = "azure") -> RequestTable:
    """Load one Azure trace CSV; arrivals are seconds after its first request."""
    _, _, rows, issues = read_csv_rows(path, {"azure": AZURE_HEADER})
    ts_ns: list[int] = []
    prompt: list[int] = []
    output: list[int] = []
    lines: list[int] = []
    for line, cells in rows:
        try:
            t = _parse_timestamp_ns(cells[0])
            p = parse_int(cells[1], "ContextTokens", minimum=1)
            o = parse_int(cells[2], "GeneratedTokens", minimum=1)
        except ValueError as exc:
            issues.append(RowIssue(line, str(exc)))
            continue
        if ts_ns and t < ts_ns[-1]:
            issues.append(RowIssue(line, f"TIMESTAMP {cells[0]!r} is earlier than the row before"))
            continue
        ts_ns.append(t)
        prompt.append(p)
        output.append(o)
        lines.append(line)
    issues.sort(key=lambda i: i.line)
    raise_if_issues(path, issues, "Azure trace")
    ts = np.asarray(ts_ns, dtype=np.int64)
    arrival_s = (ts - ts[0]).astype(np.float64) * 1e-9
    return RequestTable(
        name=name,
        prompt_tok=np.asarray(prompt, dtype=np.int64),
        output_tok=np.asarray(output, dtype=np.int64),
        arrival_s=arrival_s,
        source_id=tuple(f"{name}:line{ln}" for ln in lines),
    )
