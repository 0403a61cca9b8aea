"""Every repository path that README.md and the pages under docs/ name in backticks
exists (``path/module.name`` may name a module's attribute), so moving a file cannot leave
the documentation pointing at nothing."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PATH = re.compile(r"`((?:capsim|kernels|experiments|scripts|tests|docs|\.ci)/[^`\s]*)`")


def _files() -> list[Path]:
    return [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]


def test_named_paths_exist():
    missing = []
    for f in _files():
        for m in PATH.finditer(f.read_text()):
            raw = m.group(1).split(":")[0].rstrip(".,;)")
            if "<" in raw or "*" in raw:
                continue
            module, _, _attr = raw.rpartition(".")  # capsim/live/x.func names x.py's func
            if not (ROOT / raw).exists() and not (ROOT / f"{module}.py").exists():
                missing.append(f"{f.relative_to(ROOT)}: {raw}")
    assert missing == []
