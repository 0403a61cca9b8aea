"""ShareGPT JSON (plain or gzipped) -> first turn pairs, as ``vllm bench serve`` uses them.

Format: a JSON array of ``{"id": str, "conversations": [{"from": str, "value": str}, ...]}``.
vLLM keeps entries that have a ``conversations`` list of >= 2 turns and takes turn 0 as the
prompt and turn 1 as the reference completion, whatever their roles (``NOTES.md`` §3). An entry
with fewer than 2 turns is skipped by design (counted in ``num_short``); an entry whose first two
turns are not ``{"value": str}`` objects, or that is not an object, is malformed and reported with
its line. A file that is not a complete JSON array (e.g. truncated) is an error.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

from capsim.traces.errors import RowIssue, TraceFormatError, raise_if_issues
from capsim.traces.textio import line_of, read_text


@dataclass(frozen=True, slots=True)
class SharegptPair:
    """The first turn pair of one entry with >= 2 turns."""

    index: int  # position of the entry in the JSON array (0-based)
    entry_id: str
    num_turns: int
    prompt: str
    completion: str


@dataclass(frozen=True, slots=True)
class SharegptFile:
    pairs: tuple[SharegptPair, ...]
    num_entries: int
    num_short: int  # entries without a >= 2-turn conversation (vLLM drops them)


def _entry_issue(entry: object) -> str | None:
    if not isinstance(entry, dict):
        return f"entry is {type(entry).__name__}, expected an object"
    conv = entry.get("conversations")
    if conv is None:
        return None  # vLLM skips entries without conversations; counted as short
    if not isinstance(conv, list):
        return f"'conversations' is {type(conv).__name__}, expected a list"
    for k, turn in enumerate(conv[:2]):
        if not isinstance(turn, dict) or not isinstance(turn.get("value"), str):
            return f"turn {k} has no string 'value'"
    return None


def read_sharegpt(path: Path | str) -> SharegptFile:
    """Parse a ShareGPT file; raise ``TraceFormatError`` on a bad file or any bad entry."""
    text = read_text(path)
    decoder = json.JSONDecoder()
    pos = len(text) - len(text.lstrip())
    if text[pos : pos + 1] != "[":
        raise TraceFormatError(path, "expected a JSON array of conversations ('[' at the start)")
    pos += 1
    pairs: list[SharegptPair] = []
    issues: list[RowIssue] = []
    num_short = 0
    index = 0
    n = len(text)
    while True:
        while pos < n and text[pos] in " \t\r\n,":
            pos += 1
        if pos >= n:
            raise TraceFormatError(
                path, f"truncated: the array is not closed (after {index} entries)"
            )
        if text[pos] == "]":
            break
        start = pos
        try:
            entry, pos = decoder.raw_decode(text, pos)
        except json.JSONDecodeError as exc:
            raise TraceFormatError(
                path,
                f"invalid JSON at line {line_of(text, exc.pos)} in entry {index} "
                f"(starting line {line_of(text, start)}): {exc.msg}",
            ) from exc
        except RecursionError:
            raise TraceFormatError(
                path,
                f"entry {index} (line {line_of(text, start)}): JSON nested too deeply "
                "(~1000 levels)",
            ) from None
        problem = _entry_issue(entry)
        if problem is not None:
            issues.append(RowIssue(line_of(text, start), f"entry {index}: {problem}"))
        else:
            conv = entry.get("conversations") or []
            if len(conv) >= 2:
                pairs.append(
                    SharegptPair(
                        index=index,
                        entry_id=str(entry.get("id", index)),
                        num_turns=len(conv),
                        prompt=conv[0]["value"],
                        completion=conv[1]["value"],
                    )
                )
            else:
                num_short += 1
        index += 1
    if text[pos + 1 :].strip():
        raise TraceFormatError(
            path, f"unexpected data after the array at line {line_of(text, pos)}"
        )
    raise_if_issues(path, issues, "ShareGPT")
    if index == 0:
        raise TraceFormatError(path, "the array holds no entries")
    return SharegptFile(pairs=tuple(pairs), num_entries=index, num_short=num_short)
