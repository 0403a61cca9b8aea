"""Screenshots of a sweep's HTML report at 1400 and 800 px for the docs (docs/img/).

    python3 scripts/report_screenshots.py runs/published [--out docs/img]

Builds the report if RESULT_DIR/report/report.html is missing, takes the first 1,600 px of
the page in headless Chromium at each width, and stores them as small palette PNGs
(report-1400.png, report-800.png). Needs Debian's chromium.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from PIL import Image

from capsim.reports.browser import screenshot
from capsim.reports.build import build_report

WIDTHS = (1400, 800)
HEIGHT_PX = 1600


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("result_dir", type=Path)
    ap.add_argument("--out", type=Path, default=Path("docs/img"))
    a = ap.parse_args()
    html = a.result_dir / "report" / "report.html"
    if not html.exists():
        html = build_report(a.result_dir)
    a.out.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory() as tmp:
        for width in WIDTHS:
            raw = screenshot(html, Path(tmp) / f"{width}.png", width, HEIGHT_PX)
            rgb = Image.open(raw).convert("RGB")
            img = rgb.quantize(colors=64, method=Image.Quantize.MEDIANCUT)
            dest = a.out / f"report-{width}.png"
            img.save(dest, optimize=True)
            print(f"{dest}: {img.width} x {img.height} px, {dest.stat().st_size // 1024} KiB")


if __name__ == "__main__":
    main()
