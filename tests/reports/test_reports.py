"""Figures, Table 1 and the HTML page on a small stand-in sweep (tests/reports/conftest.py)."""

from __future__ import annotations

import base64
import re

import numpy as np
import pandas as pd
import pytest
from matplotlib.figure import Figure

from capsim.reports.build import build_report, draw_all, file_names
from capsim.reports.figures import figure1_pool_usage, figure2_ttft, figure3_matched, table1
from capsim.reports.style import MAX_PANELS, MODE_COLOUR, layout_problems, uncovered
from capsim.reports.tree_figure import figure4_trees
from capsim.sweep.matched import geomean


def _points(results_dir):
    return pd.read_parquet(results_dir / "points.parquet")


def _matched(results_dir):
    return pd.read_parquet(results_dir / "matched.parquet")


def _visible(fig: Figure):
    return [ax for ax in fig.axes if ax.get_visible() and ax.axison]


def test_figure1_one_panel_per_deployment_and_load_mode(results_dir):
    drawn = figure1_pool_usage(_points(results_dir))
    # (35B, 0.6), (35B, 0.9), (397B, 0.75), once for concurrency and once for rate
    assert [len(_visible(d.fig)) for d in drawn] == [3, 3]
    xlabels = [{ax.get_xlabel() for ax in _visible(d.fig)} for d in drawn]
    assert xlabels == [{"offered concurrency (requests)"}, {"request rate (req/s)"}]
    tops = {ax.get_ylim() for d in drawn for ax in _visible(d.fig)}
    assert len(tops) == 1  # one y scale for every panel of every image
    for d in drawn:
        (legend,) = d.fig.legends
        labels = [t.get_text() for t in legend.get_texts()]
        assert any("store-all" in t for t in labels) and any("TreeWY" in t for t in labels)
        assert "pool ceiling" in labels
        for ax in _visible(d.fig):
            assert "GiB" in ax.get_ylabel() or ax.get_ylabel() == ""
            colours = {line.get_color() for line in ax.get_lines()}
            assert MODE_COLOUR["storeall"] in colours and MODE_COLOUR["reconstruct"] in colours
            ceiling = ax.get_lines()[-1].get_ydata()[0]
            for line in ax.get_lines()[:-1]:
                assert np.max(line.get_ydata()) <= ceiling + 1e-9


def test_figure2_one_image_per_deployment_rate_workloads_included(results_dir):
    drawn = figure2_ttft(_points(results_dir))
    assert len(drawn) == 3  # one per (model, gmu)
    ylims = set()
    for d in drawn:
        axes = _visible(d.fig)
        titles = [ax.get_title() for ax in axes]
        # the two closed-loop workloads and the open-loop one, each in its own panel
        assert [t.split("\n")[0] for t in titles] == [
            "sharegpt",
            "spec-bench",
            "burstgpt-standin (open loop)",
        ]
        assert all("p99 SA/TW at" in t for t in titles)
        assert all(ax.get_yscale() == "log" for ax in axes)
        ylims |= {ax.get_ylim() for ax in axes}
        assert len(axes) <= MAX_PANELS
    assert len(ylims) == 1  # every panel of every image on one scale


def test_figure3_and_table1(results_dir):
    matched = _matched(results_dir)
    (d,) = figure3_matched(matched, _points(results_dir))
    axes = _visible(d.fig)
    assert len(axes) == 5 and len({ax.get_ylim() for ax in axes}) == 1
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


def test_figure4_tree_study_compact_legend(results_dir):
    points = _points(results_dir)
    (d,) = figure4_trees(points)
    assert len(_visible(d.fig)) == 4
    labels = [t.get_text() for t in d.fig.legends[0].get_texts()]
    # each shape once and each mode once, not shape x mode
    assert labels == [
        "tree 1x1x1",
        "tree 2x2x2",
        "TreeWY (reconstruct)",
        "store-all (vLLM)",
        "offered concurrency",
    ]
    admitted = _visible(d.fig)[0]
    offered = [ln for ln in admitted.get_lines() if ln.get_color() == "black"]
    assert offered and offered[0].get_zorder() > max(
        ln.get_zorder() for ln in admitted.get_lines() if ln is not offered[0]
    )
    # chain-only results have no tree study: no image at all, not a "no data" box
    assert figure4_trees(points[points["tree"] == "chain"]) == []


def test_every_figure_lays_out_and_every_point_is_drawn(results_dir):
    points, matched = _points(results_dir), _matched(results_dir)
    drawn = draw_all(points, matched)
    for d in drawn:
        assert layout_problems(d.fig) == [], d.title
        assert len(_visible(d.fig)) <= MAX_PANELS
    assert uncovered(points, drawn).empty


def test_one_panel_figure_keeps_its_title(results_dir):
    points = _points(results_dir)
    one = points[
        (points["gmu"] == 0.6) & (points["workload"] == "sharegpt") & (points["tree"] == "chain")
    ]
    (fig1,) = figure1_pool_usage(one)
    assert len(_visible(fig1.fig)) == 1
    assert layout_problems(fig1.fig) == []  # the title wraps instead of running off the edge
    assert "Figure 1" in fig1.fig.get_suptitle()


def test_layout_check_catches_cut_text_and_legends_on_data():
    fig = Figure(figsize=(3, 2), layout="constrained")
    ax = fig.add_subplot()
    ax.plot([1, 2], [1, 2], label="a line")
    ax.legend()
    fig.text(0.9, 0.5, "a note that runs off the right edge of the figure")
    found = layout_problems(fig)
    assert any("legend inside axes" in p for p in found)
    assert any("outside the figure" in p for p in found)
    empty = Figure(figsize=(3, 2))
    empty.add_subplot()
    assert any("without data" in p for p in layout_problems(empty))


def test_html_is_self_contained_and_responsive(results_dir, report_html):
    points, matched = _points(results_dir), _matched(results_dir)
    text = report_html.read_text()
    names = file_names(draw_all(points, matched))
    assert "figure2_ttft_3.png" in names and "figure4_trees.png" in names
    for name in names:
        assert (report_html.parent / name).exists()
    images = re.findall(r"src='data:image/png;base64,([A-Za-z0-9+/=]+)'", text)
    assert len(images) == len(names)
    assert all(base64.b64decode(b)[:8] == b"\x89PNG\r\n\x1a\n" for b in images)
    # nothing is fetched: no src/href but inline data and links within the page
    assert not re.search(r"(src|href)=['\"](?!data:|#)", text)
    assert "name='viewport'" in text and "@media print" in text and "class='scroll'" in text
    assert f"Every one of the {len(points)} points is drawn in a figure." in text
    assert "Table 1" in text and "Knee" in text
    assert "not drawn: the grid has no points with prefix caching on" in text
    assert (report_html.parent / "table1.csv").exists()


def test_report_rejects_non_sweep_dir(tmp_path):
    with pytest.raises(ValueError, match="not a sweep results directory"):
        build_report(tmp_path)
