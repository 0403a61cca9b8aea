"""The documentation site builds strictly (no warning, no network) and its generated
reference pages hold what the code says."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
pytest.importorskip("mkdocs", reason="no 'docs' extra (scripts/test.sh installs it)")


@pytest.fixture(scope="module")
def site(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("site")
    done = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(out)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    return out


def test_every_nav_page_is_built(site):
    import yaml  # mkdocs' own dependency

    def pages(nav):
        for item in nav:
            for value in item.values():
                yield from (pages(value) if isinstance(value, list) else [value])

    nav = yaml.safe_load((ROOT / "mkdocs.yml").read_text())["nav"]
    for page in pages(nav):
        assert (site / page.replace(".md", ".html")).exists(), page


def test_generated_references_are_filled(site):
    cli = (site / "reference" / "cli.html").read_text()
    for cmd in ("capsim sweep", "capsim knee", "capsim report", "capsim whatif", "capsim memory"):
        assert f"<code>{cmd}</code>" in cli, cmd
    assert "capsim:cli" not in cli
    cols = (site / "reference" / "columns.html").read_text()
    assert "<code>ttft_p99_s</code>" in cols and "<code>prefix_cache_hit_rate</code>" in cols
    assert "capsim:columns" not in cols
    grid = (site / "reference" / "grid.html").read_text()
    for key in ("commit_modes", "prefix_caching", "gmu", "loads", "kv_cache_memory_bytes"):
        assert f"<code>{key}</code>" in grid, key
    assert "capsim:grid" not in grid


def test_site_dir_is_ignored():
    assert "/site/" in (ROOT / ".gitignore").read_text().split()
