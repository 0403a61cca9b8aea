"""Issue 22's acceptance case: a planner's own grid (open-loop and closed-loop workloads,
two commit modes, prefix caching on and off, two GPUs, a tree) through the real simulator
and the report: every point is in a figure, Figures 1-5 and Table 1 are there, a 0% hit
rate says why, the knee keeps caching on and off apart."""

from __future__ import annotations

import pandas as pd

from capsim.reports.build import draw_all, load_results
from capsim.reports.style import layout_problems, uncovered


def test_every_point_of_the_custom_grid_is_drawn(custom_dir):
    points, matched, _ = load_results(custom_dir)
    assert set(points["load_mode"]) == {"rate", "concurrency"}
    assert set(points["gpu"]) == {"B200", "H200"}
    assert set(points["prefix_caching"]) == {False, True}
    drawn = draw_all(points, matched)
    assert uncovered(points, drawn).empty
    assert {d.stem for d in drawn} == {
        "figure1_pool_usage",
        "figure2_ttft",
        "figure3_matched",
        "figure4_trees",
        "figure5_prefix_caching",
    }
    for d in drawn:
        assert layout_problems(d.fig) == [], d.title
    rate_panels = [
        ax.get_title()
        for d in drawn
        if d.stem == "figure2_ttft"
        for ax in d.fig.axes
        if "open loop" in ax.get_title()
    ]
    assert len(rate_panels) == 2  # sharegpt at 20/40/60 req/s on each GPU


def test_custom_report_page(custom_dir, custom_html):
    text = custom_html.read_text()
    points = pd.read_parquet(custom_dir / "points.parquet")
    assert f"Every one of the {len(points)} points is drawn in a figure." in text
    for n in range(1, 6):
        assert f"Figure {n}" in text
    # sharegpt-multiturn shares prefixes (an ideal cache hits) yet MTP's align mode gets 0%
    assert "0% hits on sharegpt-multiturn (an ideal cache would hit" in text
    assert "with MTP (k=3)" in text
    t1 = pd.read_csv(custom_html.parent / "table1.csv")
    assert set(t1["gpu"]) == {"B200", "H200"}
    knee = pd.read_csv(custom_html.parent / "knee.csv")
    multi = knee[(knee["workload"] == "sharegpt-multiturn") & (knee["gpu"] == "B200")]
    assert sorted(multi["prefix_caching"]) == [False, True]
    assert (multi["capacity_storeall"] == multi["capacity_storeall"].round()).all()
