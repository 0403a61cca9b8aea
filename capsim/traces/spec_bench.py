"""Spec-Bench ``question.jsonl`` -> first user turns, as ``vllm bench serve`` uses them.

One JSON object a line: ``question_id`` (int), ``category`` (str), ``turns`` (non-empty list of
str), optional ``reference``. vLLM's ``SpecBench`` takes ``turns[0]`` only, wraps it in the
model's chat template (always) and sends ``max_tokens = --spec-bench-output-len`` (default 256).
Blank lines are allowed; every other line that breaks the schema is reported with its number.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

from capsim.traces.errors import RowIssue, TraceFormatError, raise_if_issues
from capsim.traces.textio import read_text

VLLM_SPEC_BENCH_OUTPUT_TOK = 256  # vLLM --spec-bench-output-len default (NOTES.md §4)


@dataclass(frozen=True, slots=True)
class SpecBenchQuestion:
    question_id: int
    category: str
    first_turn: str
    line: int


def _issue(obj: object) -> str | None:
    if not isinstance(obj, dict):
        return f"line is {type(obj).__name__}, expected an object"
    qid = obj.get("question_id")
    if isinstance(qid, bool) or not isinstance(qid, int):
        return f"question_id={qid!r} is not an int"
    if not isinstance(obj.get("category"), str):
        return f"category={obj.get('category')!r} is not a string"
    turns = obj.get("turns")
    if not isinstance(turns, list) or not turns or not all(isinstance(t, str) for t in turns):
        return "turns must be a non-empty list of strings"
    return None


def read_spec_bench(path: Path | str) -> tuple[SpecBenchQuestion, ...]:
    """Parse a Spec-Bench JSONL file; raise ``TraceFormatError`` listing every bad line."""
    text = read_text(path)
    out: list[SpecBenchQuestion] = []
    issues: list[RowIssue] = []
    seen: dict[int, int] = {}
    for lineno, line in enumerate(text.splitlines(), start=1):
        if not line.strip():
            continue
        try:
            obj = json.loads(line)
        except json.JSONDecodeError as exc:
            issues.append(RowIssue(lineno, f"invalid JSON: {exc.msg}"))
            continue
        except RecursionError:
            issues.append(RowIssue(lineno, "JSON nested too deeply (~1000 levels)"))
            continue
        problem = _issue(obj)
        if problem is None and obj["question_id"] in seen:
            problem = f"question_id {obj['question_id']} repeats line {seen[obj['question_id']]}"
        if problem is not None:
            issues.append(RowIssue(lineno, problem))
            continue
        seen[obj["question_id"]] = lineno
        out.append(SpecBenchQuestion(obj["question_id"], obj["category"], obj["turns"][0], lineno))
    raise_if_issues(path, issues, "Spec-Bench")
    if not out:
        raise TraceFormatError(path, "no questions")
    return tuple(out)
