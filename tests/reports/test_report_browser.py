"""The HTML report in headless Chromium at 1400 and 800 px: nothing cut, nothing wider than
the window (measured in the page: scroll width, element boxes, image aspect), not pixels."""

from __future__ import annotations

import base64
import io

import pytest
from matplotlib.figure import Figure
from matplotlib.image import imread

from capsim.reports.browser import chromium, layout_at, problems, screenshot

pytestmark = pytest.mark.skipif(
    chromium() is None, reason="headless Chromium not installed (CI: apt-get install chromium)"
)
WIDTHS = (1400, 800)


@pytest.mark.parametrize("width", WIDTHS)
def test_stand_in_report_reads_at(width, report_html):
    layout = layout_at(report_html, width)
    assert layout["iw"] == width
    assert problems(layout) == []
    assert len(layout["images"]) == 7 and len(layout["tables"]) == 2


@pytest.mark.parametrize("width", WIDTHS)
def test_custom_grid_report_reads_at(width, custom_html, tmp_path):
    layout = layout_at(custom_html, width)
    assert problems(layout) == []
    shot = screenshot(custom_html, tmp_path / f"shot{width}.png", width, 1400)
    img = imread(shot)
    assert img.shape[1] == width and img.shape[0] == 1400
    assert (img[..., :3].min(axis=2) < 0.9).mean() > 0.05  # the page drew something


def _png(w_in: float, h_in: float) -> str:
    fig = Figure(figsize=(w_in, h_in))
    fig.add_subplot().plot([0, 1], [0, 1])
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=50)
    return base64.b64encode(buf.getvalue()).decode()


def test_probe_finds_what_a_bad_page_gets_wrong(tmp_path):
    cells = "".join(f"<td>column {i} with a long header</td>" for i in range(30))
    page = tmp_path / "bad.html"
    page.write_text(
        "<!DOCTYPE html><html><head><meta name='viewport' content='width=device-width'>"
        "</head><body><h1>a page</h1>"
        f"<table><tr>{cells}</tr></table>"
        f"<img alt='squashed' width='700' height='100' src='data:image/png;base64,{_png(4, 4)}'>"
        "<p style='white-space:nowrap'>" + "a sentence that never wraps " * 20 + "</p>"
        "</body></html>"
    )
    found = problems(layout_at(page, 800))
    assert any("page scrolls sideways" in p for p in found)
    assert any("table of width" in p for p in found)
    assert any("squashed: drawn at aspect" in p for p in found)
    assert any(p.startswith("P overflows") for p in found)
