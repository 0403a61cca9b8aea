"""Reading trace files as text: transparent gzip, UTF-8, clear errors for unreadable files."""

from __future__ import annotations

import gzip
from pathlib import Path

from capsim.traces.errors import TraceFormatError

GZIP_MAGIC = b"\x1f\x8b"


def read_text(path: Path | str) -> str:
    """The whole file as text; gzip is detected from its magic bytes, not its name."""
    p = Path(path)
    if not p.is_file():
        raise TraceFormatError(p, "no such file")
    raw = p.read_bytes()
    if raw[:2] == GZIP_MAGIC:
        try:
            raw = gzip.decompress(raw)
        except (OSError, EOFError) as exc:
            raise TraceFormatError(p, f"broken gzip stream: {exc}") from exc
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise TraceFormatError(p, f"not UTF-8 text: {exc}") from exc
    if not text.strip():
        raise TraceFormatError(p, "file is empty")
    return text.removeprefix("\ufeff")


def line_of(text: str, offset: int) -> int:
    """1-based line number of character ``offset``."""
    return text.count("\n", 0, offset) + 1
