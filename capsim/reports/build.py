"""Results directory -> PNG figures, CSV tables and one self-contained HTML page.

Reads ``points.parquet``, ``matched.parquet`` and ``manifest.json`` of a sweep directory;
writes into ``OUT`` (default ``DIR/report``): ``figure1_pool_usage.png``,
``figure2_ttft.png``, ``figure3_matched.png``, ``table1.csv``, ``knee.csv`` and
``report.html``, in which every image is inlined as base64 (the page needs no other file
and no network). Every file is written atomically. Never simulates.
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
    figure4_trees,
    table1,
)
from capsim.reports.prefix_figure import figure5_prefix_caching
from capsim.sweep.knee import knee_table
from capsim.sweep.store import atomic_write_bytes

FIGURES: tuple[tuple[str, str], ...] = (
    ("figure1_pool_usage", "Figure 1: peak KV/state pool usage vs offered load"),
    ("figure2_ttft", "Figure 2: p99 TTFT vs concurrency"),
    ("figure3_matched", "Figure 3: matched points, memory-bound vs headroom"),
    ("figure4_trees", "Figure 4: draft-tree study (store-all N+1 slots vs TreeWY 1)"),
    ("figure5_prefix_caching", "Figure 5: prefix caching on vs off (hit rate, admitted, TTFT)"),
)

CSS = """
body { font-family: system-ui, sans-serif; margin: 24px; color: #222; max-width: 1500px; }
h1 { font-size: 22px; } h2 { font-size: 18px; margin-top: 28px; }
table { border-collapse: collapse; font-size: 12px; margin: 8px 0; }
th, td { border: 1px solid #ccc; padding: 3px 7px; text-align: right; }
th { background: #f2f2f2; } td:first-child, th:first-child { text-align: left; }
img { max-width: 100%; border: 1px solid #ddd; margin: 6px 0; }
.note { color: #555; font-size: 13px; }
dl { display: grid; grid-template-columns: max-content auto; gap: 2px 14px; font-size: 13px; }
dt { font-weight: 600; }
"""


def png_bytes(fig: Figure, dpi: int = 110) -> bytes:
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
    return df.to_html(index=False, float_format=_fmt, na_rep="-", border=0)


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


def build_report(result_dir: Path | str, out_dir: Path | str | None = None) -> Path:
    """Write the figures, tables and ``report.html``; returns the HTML path."""
    rdir = Path(result_dir)
    points, matched, manifest = load_results(rdir)
    out = Path(out_dir) if out_dir is not None else rdir / "report"
    out.mkdir(parents=True, exist_ok=True)

    figs = {
        "figure1_pool_usage": figure1_pool_usage(points),
        "figure2_ttft": figure2_ttft(points),
        "figure3_matched": figure3_matched(matched),
        "figure4_trees": figure4_trees(points),
    }
    if "prefix_caching" in points.columns and points["prefix_caching"].astype(bool).any():
        figs["figure5_prefix_caching"] = figure5_prefix_caching(points)
    images: dict[str, bytes] = {}
    for name, fig in figs.items():
        images[name] = png_bytes(fig)
        atomic_write_bytes(out / f"{name}.png", images[name])

    t1 = table1(matched)
    knees = knee_table(points)
    atomic_write_bytes(out / "table1.csv", t1.to_csv(index=False).encode())
    atomic_write_bytes(out / "knee.csv", knees.to_csv(index=False).encode())
    n_mem = int(matched["memory_bound"].sum()) if not matched.empty else 0

    parts = [
        "<!DOCTYPE html><html lang='en'><head><meta charset='utf-8'>",
        "<title>capsim sweep report</title>",
        f"<style>{CSS}</style></head><body>",
        "<h1>capsim sweep report: store-all vs TreeWY</h1>",
        "<p class='note'>Simulated with capsim (SimPy model of the vLLM v1 engine). Step "
        "times come from the step-time model named below: a B200 figure is a projection, "
        "not a measurement. Ratios are oriented so that &gt; 1 is better for TreeWY.</p>",
        "<p class='note'><b>Step times:</b> "
        + html.escape(
            "; ".join(sorted({str(x) for x in points.get("step_time_label", pd.Series()).dropna()}))
            or "see the step-time model below"
        )
        + "</p>",
        _provenance(manifest, points),
        "<h2>Table 1: geometric means at the tightest gmu per model</h2>",
        "<p class='note'>Over the fixed-concurrency workloads, chain drafts; "
        f"{n_mem} of {len(matched)} matched points are memory-bound.</p>",
        _table_html(t1),
    ]
    for name, title in FIGURES:
        if name not in images:
            continue
        b64 = base64.b64encode(images[name]).decode()
        parts.append(f"<h2>{html.escape(title)}</h2>")
        parts.append(f"<img alt='{html.escape(title)}' src='data:image/png;base64,{b64}'>")
    parts += [
        "<h2>Knee per deployment and workload</h2>",
        "<p class='note'>Smallest swept load at which peak admitted requests fall below the "
        "offered concurrency (rate workloads: first rate at which the mode is memory-bound); "
        "cap = analytical capacity of the memory plan at the sample's mean context.</p>",
        _table_html(knees),
        "</body></html>",
    ]
    html_path = out / "report.html"
    atomic_write_bytes(html_path, "\n".join(parts).encode())
    return html_path
