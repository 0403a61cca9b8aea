"""Figures, Table 1, the HTML page, and a headless-Chromium screenshot of it."""

from __future__ import annotations

import base64
import re
import shutil
import subprocess

import numpy as np
import pandas as pd
import pytest
from matplotlib.figure import Figure

from capsim.reports.build import build_report
from capsim.reports.figures import (
    MODE_COLOUR,
    figure1_pool_usage,
    figure2_ttft,
    figure3_matched,
    figure4_trees,
    table1,
)
from capsim.sweep.matched import geomean


def _points(results_dir):
    return pd.read_parquet(results_dir / "points.parquet")


def _matched(results_dir):
    return pd.read_parquet(results_dir / "matched.parquet")


def test_figure1_panels_labels_ceiling(results_dir):
    fig = figure1_pool_usage(_points(results_dir))
    assert isinstance(fig, Figure)
    axes = [ax for ax in fig.axes if ax.get_visible()]
    assert len(axes) == 3  # (35B, 0.6), (35B, 0.9), (397B, 0.75)
    for ax in axes:
        assert "GiB" in ax.get_ylabel() and "concurrency" in ax.get_xlabel()
        labels = [t.get_text() for t in ax.get_legend().get_texts()]
        assert any("store-all" in t for t in labels) and any("TreeWY" in t for t in labels)
        assert any("pool ceiling" in t for t in labels)
        colours = {line.get_color() for line in ax.get_lines()}
        assert MODE_COLOUR["storeall"] in colours and MODE_COLOUR["reconstruct"] in colours
        # no curve above the ceiling
        ceiling = ax.get_lines()[-1].get_ydata()[0]
        for line in ax.get_lines()[:-1]:
            assert np.max(line.get_ydata()) <= ceiling + 1e-9


def test_figure2_log_scale_and_ratio(results_dir):
    fig = figure2_ttft(_points(results_dir))
    axes = fig.axes
    assert len(axes) == 3 * 2  # 3 (model, gmu) rows x 2 fixed-concurrency workloads
    for ax in axes:
        assert ax.get_yscale() == "log"
        assert any("SA/TW" in t.get_text() for t in ax.texts)


def test_figure3_and_table1(results_dir):
    matched = _matched(results_dir)
    fig = figure3_matched(matched)
    assert len(fig.axes) == 5
    t = table1(matched)
    # tightest gmu per model: 0.6 for the 35B, 0.75 for the 397B
    assert set(zip(t["model"], t["gmu"], strict=True)) == {
        ("qwen3.5-35b-a3b", 0.6),
        ("qwen3.5-397b-a17b", 0.75),
    }
    row = t[(t["model"] == "qwen3.5-35b-a3b") & (t["points"] == "all")].iloc[0]
    m = matched[
        (matched["model"] == "qwen3.5-35b-a3b")
        & (matched["gmu"] == 0.6)
        & (matched["load_mode"] == "concurrency")
    ]
    assert row["n"] == len(m) == 12
    assert row["KV reduction (SA/TW)"] == pytest.approx(geomean(m["kv_reduction"]))
    assert row["p99 TTFT (SA/TW)"] == pytest.approx(geomean(m["ttft_p99_ratio"]))


def test_figure4_tree_study(results_dir):
    points = _points(results_dir)
    fig = figure4_trees(points)
    assert len(fig.axes) == 4
    labels = [t.get_text() for t in fig.axes[0].get_legend().get_texts()]
    for shape in ("1x1x1", "2x2x2"):
        assert any(label.startswith(shape) for label in labels), labels
    assert "offered concurrency" in labels
    assert all(ax.get_xlabel() == "offered concurrency (requests)" for ax in fig.axes)
    # chain-only results have no tree study: an explicit empty figure, not an error
    empty = figure4_trees(points[points["tree"] == "chain"])
    assert "no data" in empty.texts[0].get_text()


def test_html_is_self_contained(results_dir, tmp_path):
    html_path = build_report(results_dir, tmp_path / "rep")
    text = html_path.read_text()
    names = ("figure1_pool_usage", "figure2_ttft", "figure3_matched", "figure4_trees")
    for name in names:
        assert (tmp_path / "rep" / f"{name}.png").exists()
    images = re.findall(r"src='data:image/png;base64,([A-Za-z0-9+/=]+)'", text)
    assert len(images) == len(names)
    assert all(base64.b64decode(b)[:8] == b"\x89PNG\r\n\x1a\n" for b in images)
    # nothing is fetched: no other src/href
    assert not re.search(r"(src|href)=['\"](?!data:)", text)
    assert "Table 1" in text and "Knee" in text
    assert (tmp_path / "rep" / "table1.csv").exists()


def test_report_rejects_non_sweep_dir(tmp_path):
    with pytest.raises(ValueError, match="not a sweep results directory"):
        build_report(tmp_path)


CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")


@pytest.mark.skipif(
    CHROMIUM is None,
    reason="headless Chromium not installed (CI: apt-get install -y chromium)",
)
def test_html_renders_in_headless_chromium(results_dir, tmp_path):
    html_path = build_report(results_dir, tmp_path / "rep")
    shot = tmp_path / "shot.png"
    cmd = [
        CHROMIUM,
        "--headless",
        "--no-sandbox",
        "--disable-gpu",
        "--disable-quic",
        "--no-first-run",
        "--disable-background-networking",
        "--disable-component-update",
        "--disable-sync",
        f"--user-data-dir={tmp_path / 'profile'}",
        "--hide-scrollbars",
        "--window-size=1400,2000",
        f"--screenshot={shot}",
        html_path.as_uri(),
    ]
    subprocess.run(cmd, check=True, capture_output=True, timeout=120)
    from matplotlib.image import imread

    img = imread(shot)
    assert img.shape[0] == 2000 and img.shape[1] == 1400
    rgb = img[..., :3]
    # The page drew something: a good share of non-white pixels, and both mode colours of
    # Figure 1 (store-all red, TreeWY blue) appear in the screenshot.
    assert (rgb.min(axis=2) < 0.9).mean() > 0.05
    for hex_colour in (MODE_COLOUR["storeall"], MODE_COLOUR["reconstruct"]):
        target = np.array([int(hex_colour[i : i + 2], 16) / 255 for i in (1, 3, 5)])
        close = (np.abs(rgb - target).max(axis=2) < 0.08).sum()
        assert close > 200, hex_colour
