"""Helpers for the traces tests (a plain module; pytest puts this folder on sys.path)."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
SHARED_TRACES = REPO.parent / "shared" / "traces"

needs_shared = pytest.mark.skipif(
    not (SHARED_TRACES / "raw").is_dir(),
    reason=f"shared/traces not present at {SHARED_TRACES} (raw inputs of the derive script)",
)


def write(path: Path, text: str, *, gz: bool = False) -> Path:
    data = text.encode("utf-8")
    path.write_bytes(gzip.compress(data) if gz else data)
    return path


def sharegpt_json(entries: list[object]) -> str:
    return json.dumps(entries, indent=2)
