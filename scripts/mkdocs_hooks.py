"""MkDocs hooks (mkdocs.yml ``hooks:``), no network needed.

- ``on_config``: the topic pages other issues add (``docs/engine.md``, ``memory.md``,
  ``planning.md``, ``reliability.md``, ``calibration.md``) join the navigation under
  "Topics" once the file exists, so a strict build never names a page that is not there.
- ``on_page_markdown``: fill the generated reference pages. A page holding
  ``<!-- capsim:cli -->`` gets every click command's help and options (walked from the group
  the ``capsim`` console script names in pyproject.toml), one holding
  ``<!-- capsim:columns -->`` the result schema (capsim.sweep.columns), one holding
  ``<!-- capsim:grid -->`` the grid TOML layout (capsim.sweep.grid_toml).
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]

TOPICS: tuple[tuple[str, str], ...] = (
    ("vLLM engine runs", "engine.md"),
    ("Memory plan", "memory.md"),
    ("Fleet planning (capsim plan)", "planning.md"),
    ("Reliability", "reliability.md"),
    ("Calibration", "calibration.md"),
)


def on_config(config: Any) -> Any:
    docs = Path(config["docs_dir"])
    present = [{title: page} for title, page in TOPICS if (docs / page).exists()]
    nav = config.get("nav")
    if present and nav is not None:
        at = next((i for i, item in enumerate(nav) if "Reference" in item), len(nav))
        nav.insert(at, {"Topics": present})
    return config


def on_page_markdown(markdown: str, page: Any, config: Any, files: Any) -> str:
    # NOTE: done here, not at import: MkDocs restores sys.path after loading a hook module,
    # so a path added at import time is gone by the time pages are built
    if str(ROOT) not in sys.path:  # build from a checkout without installing it
        sys.path.insert(0, str(ROOT))
    from capsim.reports.reference import expand_markers

    return expand_markers(markdown, ROOT / "pyproject.toml")
