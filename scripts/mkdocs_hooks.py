"""MkDocs hook (mkdocs.yml ``hooks:``): fill the generated reference pages while the site
builds. A page holding ``<!-- capsim:cli -->`` gets every click command's help and options
(walked from the group the ``capsim`` console script names in pyproject.toml), one holding
``<!-- capsim:columns -->`` the result schema (capsim.sweep.columns). Needs no network."""

from __future__ import annotations

import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:  # build from a checkout without installing it
    sys.path.insert(0, str(ROOT))


def on_page_markdown(markdown: str, page, config, files) -> str:
    from capsim.reports.reference import expand_markers

    return expand_markers(markdown, ROOT / "pyproject.toml")
