"""Results directory -> PNG figures, CSV tables and one self-contained HTML page.

Reads ``points.parquet``, ``matched.parquet`` and ``manifest.json`` of a sweep directory;
writes into ``OUT`` (default ``DIR/report``): one PNG per figure image
(``figure1_pool_usage.png``, or ``figure2_ttft_1.png``, ``figure2_ttft_2.png``, ... when a
figure has several images: Figure 2 has one per deployment), ``table1.csv``, ``knee.csv``
and ``report.html``, in which every image is inlined as base64 (the page needs no other
file and no network). The page is responsive (figures scale to the window, wide tables
scroll inside their box, a print style sheet) and says whether every point of the grid is
drawn in some figure. Every file is written atomically. Never simulates.
"""

from __future__ import annotations

import base64
import html
import io
import json
from pathlib import Path
from typing import Any

import pandas as pd
from matplotlib.figure import Figure

from capsim.reports.figures import (
    figure1_pool_usage,
    figure2_ttft,
    figure3_matched,
    table1,
)
from capsim.reports.prefix_figure import figure5_prefix_caching
from capsim.reports.style import Drawn, uncovered
from capsim.reports.tree_figure import figure4_trees
from capsim.sweep.knee import SETTINGS, knee_table
from capsim.sweep.store import atomic_write_bytes

FIGURES: tuple[tuple[str, str, str], ...] = (
    (
        "figure1_pool_usage",
        "Figure 1: peak KV/state pool usage vs offered load",
        "Chain drafts, prefix caching off where a grid has both. One panel per deployment and "
        "load mode, one y scale for all.",
    ),
    (
        "figure2_ttft",
        "Figure 2: p99 TTFT vs load, per deployment",
        "Every chain-draft point: one image per deployment, one panel per workload (open-loop "
        "workloads in req/s); one log y scale for every panel of every image.",
    ),
    (
        "figure3_matched",
        "Figure 3: matched points, memory-bound vs headroom",
        "Ratios at every matched point, > 1 better for TreeWY; one log scale.",
    ),
    (
        "figure4_trees",
        "Figure 4: draft-tree study (store-all N+1 slots vs TreeWY 1)",
        "Every tree-shaped point: one image per deployment, workload and caching setting.",
    ),
    (
        "figure5_prefix_caching",
        "Figure 5: prefix caching on vs off (hit rate, admitted, TTFT)",
        "Every chain-draft workload that has prefix caching on for some of its points.",
    ),
)
ABSENT = {
    "figure3_matched": "not drawn: the grid has no matched store-all / TreeWY points",
    "figure4_trees": "not drawn: the grid has no draft-tree points",
    "figure5_prefix_caching": "not drawn: the grid has no points with prefix caching on",
}
DPI = 170
"""PNG resolution: about 1.7 image pixels per CSS pixel at the page's widest, crisp when
the browser scales the figure down to a phone's width."""

CSS = """
*, *::before, *::after { box-sizing: border-box; }
body { font-family: system-ui, sans-serif; color: #222; line-height: 1.4;
       margin: 0 auto; padding: 16px 20px; max-width: 1240px; }
h1 { font-size: 22px; } h2 { font-size: 18px; margin-top: 30px; }
nav { font-size: 13px; } nav a { margin-right: 10px; white-space: nowrap; }
.scroll { overflow-x: auto; max-width: 100%; }
table { border-collapse: collapse; font-size: 12px; margin: 8px 0; }
th, td { border: 1px solid #ccc; padding: 3px 7px; text-align: right; }
th { background: #f2f2f2; white-space: normal; vertical-align: bottom; }
td:first-child, th:first-child { text-align: left; }
figure { margin: 10px 0 18px; }
figure img { display: block; width: 100%; height: auto; border: 1px solid #ddd; }
figcaption, .note { color: #555; font-size: 13px; overflow-wrap: anywhere; }
dl { display: grid; grid-template-columns: max-content minmax(0, 1fr); gap: 2px 14px;
     font-size: 13px; }
dt { font-weight: 600; } dd { margin: 0; overflow-wrap: anywhere; }
@media (max-width: 900px) {
  body { padding: 10px; }
  dl { grid-template-columns: minmax(0, 1fr); } dd { margin-bottom: 4px; }
  table { font-size: 11px; }
}
@media print {
  body { max-width: none; padding: 0; font-size: 11px; }
  nav { display: none; }
  .scroll { overflow: visible; }
  table { font-size: 9px; }
  figure, tr { break-inside: avoid; }
  h2 { break-after: avoid; }
  figure img { border: none; max-width: 100%; }
}
"""


def png_bytes(fig: Figure, dpi: int = DPI) -> bytes:
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=dpi)
    return buf.getvalue()


def load_results(result_dir: Path) -> tuple[pd.DataFrame, pd.DataFrame, dict[str, Any]]:
    pts, mat = result_dir / "points.parquet", result_dir / "matched.parquet"
    if not pts.exists() or not mat.exists():
        raise ValueError(
            f"{result_dir} is not a sweep results directory (no points.parquet/matched.parquet)"
        )
    manifest_path = result_dir / "manifest.json"
    manifest = json.loads(manifest_path.read_text()) if manifest_path.exists() else {}
    points = pd.read_parquet(pts)
    matched = pd.read_parquet(mat)
    if points.empty:
        raise ValueError(f"{result_dir}/points.parquet has no points")
    return points, matched, manifest


def _table_html(df: pd.DataFrame) -> str:
    if df.empty:
        return "<p class='note'>(no rows)</p>"
    table = df.to_html(index=False, float_format=_fmt, na_rep="-", border=0)
    return f"<div class='scroll'>{table}</div>"


def _fmt(v: float) -> str:
    """Counts and large values as integers, ratios to 3 significant digits."""
    if v == int(v) or abs(v) >= 100:
        return f"{v:.0f}"
    return f"{v:.3g}"


def describe_step_time(calib: dict[str, Any], calibration_id: Any = None) -> str:
    """The step-time model in words (kind, tables and their hash); full record: manifest."""
    if not calib:
        return "?"
    parts = [str(calib.get("kind", "?"))]
    if calib.get("table_path"):
        sha = str(calib.get("table_sha256") or "")[:12]
        parts.append(
            f"tables {Path(str(calib['table_path'])).name}" + (f" (sha256 {sha})" if sha else "")
        )
    if calib.get("measured_gpu"):
        parts.append(f"measured on {calib['measured_gpu']}")
    if calibration_id:
        parts.append(f"calibration id {calibration_id}")
    return "; ".join(parts) + " (full record: manifest.json 'calibration')"


def _provenance(manifest: dict[str, Any], points: pd.DataFrame) -> str:
    calib = manifest.get("calibration") or {}
    items = {
        "grid": manifest.get("spec", {}).get("name", "?"),
        "points": f"{len(points)} ({points['match_id'].nunique()} matched)",
        "requests per point": _requests_rule(manifest.get("spec", {})),
        "root seed": str(manifest.get("seeds", {}).get("root_seed", "?")),
        "step-time model": describe_step_time(calib, manifest.get("calibration_id")),
        "git sha": str(manifest.get("git_sha", "?")),
        "created (UTC)": str(manifest.get("created_utc", "?")),
        "versions": ", ".join(f"{k} {v}" for k, v in manifest.get("versions", {}).items()),
    }
    rows = "".join(f"<dt>{html.escape(k)}</dt><dd>{html.escape(v)}</dd>" for k, v in items.items())
    return f"<dl>{rows}</dl>"


def _requests_rule(spec: dict[str, Any]) -> str:
    if not spec:
        return "?"
    if spec.get("num_requests") is not None:
        return str(spec["num_requests"])
    return (
        f"{spec.get('requests_per_concurrency')} x concurrency or rate x "
        f"{spec.get('rate_window_s')} s, clamped to [{spec.get('min_requests')}, "
        f"{spec.get('max_requests')}] (per-workload overrides in the grid)"
    )


def _knee_html(knees: pd.DataFrame) -> str:
    """The knee table with the settings that are the same in every row said once above."""
    same = [c for c in SETTINGS if c in knees.columns and knees[c].nunique(dropna=False) == 1]
    if not same or knees.empty:
        return _table_html(knees)
    note = ", ".join(f"{c} = {knees[c].iloc[0]}" for c in same)
    return f"<p class='note'>Every row: {html.escape(note)}.</p>" + _table_html(
        knees.drop(columns=same)
    )


def draw_all(points: pd.DataFrame, matched: pd.DataFrame) -> list[Drawn]:
    """Every figure image the data supports, in report order (none for absent data)."""
    return [
        *figure1_pool_usage(points),
        *figure2_ttft(points),
        *figure3_matched(matched, points),
        *figure4_trees(points),
        *figure5_prefix_caching(points),
    ]


def file_names(drawn: list[Drawn]) -> list[str]:
    """``figure2_ttft.png`` for a figure of one image, ``figure2_ttft_1.png``, ... else."""
    count: dict[str, int] = {}
    for d in drawn:
        count[d.stem] = count.get(d.stem, 0) + 1
    seen: dict[str, int] = {}
    names = []
    for d in drawn:
        seen[d.stem] = seen.get(d.stem, 0) + 1
        names.append(f"{d.stem}.png" if count[d.stem] == 1 else f"{d.stem}_{seen[d.stem]}.png")
    return names


def _figure_html(d: Drawn, png: bytes) -> str:
    w_px = round(d.fig.get_figwidth() * DPI)
    h_px = round(d.fig.get_figheight() * DPI)
    # at most 120 CSS px per figure inch: large enough to read, never blown up past that
    css_w = round(d.fig.get_figwidth() * 120)
    b64 = base64.b64encode(png).decode()
    notes = "".join(f"<br>{html.escape(n)}" for n in d.notes)
    return (
        f"<figure style='max-width:{css_w}px'>"
        f"<img alt='{html.escape(d.title)}' width='{w_px}' height='{h_px}' "
        f"src='data:image/png;base64,{b64}'>"
        f"<figcaption>{html.escape(d.title)}{notes}</figcaption></figure>"
    )


def _coverage_html(points: pd.DataFrame, drawn: list[Drawn]) -> str:
    left = uncovered(points, drawn)
    if left.empty:
        return f"<p class='note'>Every one of the {len(points)} points is drawn in a figure.</p>"
    cols = [c for c in ("model", "gpu", "gmu", "workload", "load", "tree", "commit") if c in left]
    return (
        f"<p class='note'><b>{len(left)} of {len(points)} points are in no figure:</b></p>"
        + _table_html(left[cols])
    )


def build_report(result_dir: Path | str, out_dir: Path | str | None = None) -> Path:
    """Write the figures, tables and ``report.html``; returns the HTML path."""
    rdir = Path(result_dir)
    points, matched, manifest = load_results(rdir)
    out = Path(out_dir) if out_dir is not None else rdir / "report"
    out.mkdir(parents=True, exist_ok=True)

    drawn = draw_all(points, matched)
    names = file_names(drawn)
    for stale in out.glob("figure[0-9]_*.png"):  # images of an earlier, different grid
        if stale.name not in names:
            stale.unlink()
    images: list[bytes] = []
    for name, d in zip(names, drawn, strict=True):
        images.append(png_bytes(d.fig))
        atomic_write_bytes(out / name, images[-1])

    t1 = table1(matched)
    knees = knee_table(points)
    atomic_write_bytes(out / "table1.csv", t1.to_csv(index=False).encode())
    atomic_write_bytes(out / "knee.csv", knees.to_csv(index=False).encode())
    n_mem = int(matched["memory_bound"].sum()) if not matched.empty else 0
    steps = sorted({str(x) for x in points.get("step_time_label", pd.Series()).dropna()})

    toc = "".join(
        f"<a href='#{stem}'>{html.escape(title.split(':')[0])}</a>" for stem, title, _ in FIGURES
    )
    parts = [
        "<!DOCTYPE html><html lang='en'><head><meta charset='utf-8'>",
        "<meta name='viewport' content='width=device-width, initial-scale=1'>",
        "<title>capsim sweep report</title>",
        f"<style>{CSS}</style></head><body>",
        "<h1>capsim sweep report: store-all vs TreeWY</h1>",
        f"<nav><a href='#table1'>Table 1</a>{toc}<a href='#knee'>Knees</a></nav>",
        "<p class='note'>Simulated with capsim (SimPy model of the vLLM v1 engine). Step "
        "times come from the step-time model named below: a B200 figure is a projection, "
        "not a measurement. Ratios are oriented so that &gt; 1 is better for TreeWY.</p>",
        "<p class='note'><b>Step times:</b> "
        + html.escape("; ".join(steps) or "see the step-time model below")
        + "</p>",
        _provenance(manifest, points),
        _coverage_html(points, drawn),
        "<h2 id='table1'>Table 1: geometric means at the tightest gmu per model</h2>",
        "<p class='note'>Over the fixed-concurrency workloads, chain drafts, prefix caching "
        f"off where a grid has both; {n_mem} of {len(matched)} matched points are "
        "memory-bound.</p>",
        _table_html(t1),
    ]
    for stem, title, caption in FIGURES:
        parts.append(f"<h2 id='{stem}'>{html.escape(title)}</h2>")
        mine = [(d, png) for d, png in zip(drawn, images, strict=True) if d.stem == stem]
        if not mine:
            why = ABSENT.get(stem, "not drawn: no data")
            parts.append(f"<p class='note'>{html.escape(why)}</p>")
            continue
        parts.append(f"<p class='note'>{html.escape(caption)}</p>")
        parts += [_figure_html(d, png) for d, png in mine]
    parts += [
        "<h2 id='knee'>Knee per deployment, workload and setting</h2>",
        "<p class='note'>Smallest swept load at which peak admitted requests fall below the "
        "offered concurrency (rate workloads: first rate at which the mode is memory-bound); "
        "cap = analytical capacity of the memory plan at the sample's mean context. One row "
        "per setting that changes capacity (tree, prefix caching, ...).</p>",
        _knee_html(knees),
        "</body></html>",
    ]
    html_path = out / "report.html"
    atomic_write_bytes(html_path, "\n".join(parts).encode())
    return html_path
