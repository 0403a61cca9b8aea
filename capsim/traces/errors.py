"""One error type for bad trace input: names the file and every bad line.

Loaders never drop a malformed row silently. They collect a ``RowIssue`` per bad row and
raise ``TraceFormatError`` listing them (file, line, what is wrong); a file that cannot be
read at all (wrong header, truncated JSON, empty) raises it with no row issues.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

MAX_LISTED_ISSUES = 20


@dataclass(frozen=True, slots=True)
class RowIssue:
    """One malformed row: 1-based line number in the file and the reason."""

    line: int
    reason: str


class TraceFormatError(ValueError):
    """A trace file, or rows of it, do not follow the expected format."""

    def __init__(self, path: Path | str, message: str, issues: tuple[RowIssue, ...] = ()):
        self.path = Path(path)
        self.issues = tuple(issues)
        text = f"{self.path}: {message}"
        if self.issues:
            shown = "\n".join(
                f"  {self.path}:{i.line}: {i.reason}" for i in self.issues[:MAX_LISTED_ISSUES]
            )
            more = len(self.issues) - MAX_LISTED_ISSUES
            text += f" ({len(self.issues)} bad rows)\n{shown}"
            if more > 0:
                text += f"\n  ... and {more} more"
        super().__init__(text)


def raise_if_issues(path: Path | str, issues: list[RowIssue], what: str) -> None:
    """Raise ``TraceFormatError`` when any row was malformed."""
    if issues:
        raise TraceFormatError(path, f"malformed {what} rows", tuple(issues))
