"""The HTML report in headless Chromium: layout measured at a window width, screenshots.

``layout_at(html, width)`` loads a copy of the page with a small script appended that,
after load, measures what a reader would see cut or overflowing: the document's scroll
width against the viewport, every image's box against the viewport and its own aspect
ratio, every block of text that overflows its box, every wide table (which must sit in a
``.scroll`` box that scrolls, not widen the page). The script writes its JSON into the DOM;
Chromium's ``--dump-dom`` prints it. ``problems(layout)`` turns a measurement into a list
of findings (empty = the page reads at that width). Nothing is compared pixel by pixel.

Needs a ``chromium`` (or ``chromium-browser``) binary: Debian's package, ``apt-get install
chromium``. Used by ``tests/reports/test_report_browser.py`` and
``scripts/report_screenshots.py`` (the PNGs under ``docs/img/``).
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import tempfile
from pathlib import Path
from typing import Any

PROBE = """
<script>
window.addEventListener('load', () => {
  const iw = window.innerWidth;
  const box = (e) => { const r = e.getBoundingClientRect();
    return {left: r.left, right: r.right, width: r.width, height: r.height}; };
  const out = {iw: iw, sw: document.documentElement.scrollWidth, images: [], text: [],
               tables: [], scrolls: []};
  for (const img of document.images) {
    out.images.push(Object.assign(box(img), {alt: img.alt, nw: img.naturalWidth,
      nh: img.naturalHeight, parent: box(img.parentElement)}));
  }
  for (const e of document.querySelectorAll('h1,h2,p,figcaption,nav,dl,dt,dd')) {
    out.text.push(Object.assign(box(e), {tag: e.tagName, sw: e.scrollWidth,
      cw: e.clientWidth, text: e.textContent.slice(0, 60)}));
  }
  for (const t of document.querySelectorAll('table')) {
    const wrap = t.closest('.scroll');
    out.tables.push(Object.assign(box(t), {wrapped: !!wrap,
      wrap: wrap ? Object.assign(box(wrap), {overflow: getComputedStyle(wrap).overflowX})
                 : null}));
  }
  const pre = document.createElement('pre');
  pre.id = 'capsim-layout'; pre.textContent = JSON.stringify(out);
  document.body.appendChild(pre);
});
</script>
"""

_FLAGS = (
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--hide-scrollbars",
)


def chromium() -> str | None:
    """The Chromium binary on PATH, or None."""
    return shutil.which("chromium") or shutil.which("chromium-browser")


def _run(args: list[str], profile: Path, timeout_s: float = 120.0) -> str:
    exe = chromium()
    if exe is None:
        raise RuntimeError("headless Chromium not found (apt-get install chromium)")
    cmd = [exe, *_FLAGS, f"--user-data-dir={profile}", *args]
    done = subprocess.run(cmd, check=True, capture_output=True, timeout=timeout_s, text=True)
    return done.stdout


def layout_at(html_path: Path, width: int, height: int = 1200) -> dict[str, Any]:
    """The probe's measurement of ``html_path`` in a ``width`` x ``height`` window."""
    text = html_path.read_text()
    with tempfile.TemporaryDirectory(prefix="capsim-chromium-") as tmp:
        probe = Path(tmp) / "probe.html"
        probe.write_text(text.replace("</body>", PROBE + "</body>"))
        dom = _run(
            [
                f"--window-size={width},{height}",
                "--virtual-time-budget=10000",
                "--dump-dom",
                probe.as_uri(),
            ],
            Path(tmp) / "profile",
        )
    found = re.search(r'<pre id="capsim-layout">(.*?)</pre>', dom, re.S)
    if not found:
        raise RuntimeError(f"the layout probe did not run at width {width}")
    return json.loads(found.group(1).replace("&quot;", '"').replace("&amp;", "&"))


def problems(layout: dict[str, Any], tol_px: float = 1.0) -> list[str]:
    """What is cut or overflows in one measurement (empty when nothing is)."""
    iw = float(layout["iw"])
    out = []
    if layout["sw"] > iw + tol_px:
        out.append(f"page scrolls sideways: scrollWidth {layout['sw']} > viewport {iw:g}")
    for img in layout["images"]:
        name = img["alt"] or "image"
        if img["right"] > iw + tol_px or img["left"] < -tol_px:
            out.append(f"{name}: image box {img['left']:.0f}-{img['right']:.0f} outside {iw:g}")
        if not (img["nw"] and img["width"] > 0):
            out.append(f"{name}: not rendered")
            continue
        aspect, natural = img["height"] / img["width"], img["nh"] / img["nw"]
        if abs(aspect / natural - 1) > 0.02:
            out.append(f"{name}: drawn at aspect {aspect:.3f}, image is {natural:.3f}")
        if img["width"] < 0.95 * min(img["parent"]["width"], img["nw"]) - tol_px:
            out.append(f"{name}: {img['width']:.0f} px wide in a {img['parent']['width']:.0f} box")
    for t in layout["text"]:
        if t["right"] > iw + tol_px or t["sw"] > t["cw"] + tol_px:
            out.append(f"{t['tag']} overflows ({t['text']!r})")
    for t in layout["tables"]:
        if not t["wrapped"]:
            if t["right"] > iw + tol_px:
                out.append(f"table of width {t['width']:.0f} overflows the page")
        elif t["wrap"]["right"] > iw + tol_px or t["wrap"]["overflow"] not in ("auto", "scroll"):
            out.append("a table's scroll box overflows the page or does not scroll")
    return out


def screenshot(html_path: Path, out_png: Path, width: int, height: int) -> Path:
    """A PNG of the first ``height`` px of the page in a ``width`` px window."""
    with tempfile.TemporaryDirectory(prefix="capsim-chromium-") as tmp:
        _run(
            [
                f"--window-size={width},{height}",
                "--virtual-time-budget=10000",
                f"--screenshot={out_png}",
                html_path.resolve().as_uri(),
            ],
            Path(tmp) / "profile",
        )
    return out_png
