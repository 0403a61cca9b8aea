"""Figure 5 (prefix caching on vs off) from a points table."""

from __future__ import annotations

import pandas as pd

from capsim.reports.prefix_figure import PREFIX_METRICS, figure5_prefix_caching


def _points() -> pd.DataFrame:
    rows = []
    for pc in (False, True):
        for mode in ("storeall", "reconstruct"):
            for load in (8, 64):
                rows.append(
                    {
                        "model": "qwen3.5-35b-a3b",
                        "gmu": 0.9,
                        "workload": "shared-prefix",
                        "load_mode": "concurrency",
                        "tree": "chain",
                        "commit": mode,
                        "prefix_caching": pc,
                        "load": float(load),
                        "prefix_cache_hit_rate": 0.4 if pc else float("nan"),
                        "peak_running": load,
                        "ttft_p99_s": 1.0,
                    }
                )
    return pd.DataFrame(rows)


def test_figure5_one_row_per_deployment_and_workload() -> None:
    fig = figure5_prefix_caching(_points())
    assert len(fig.axes) == len(PREFIX_METRICS)
    hit_ax = fig.axes[0]
    labels = [ln.get_label() for ln in hit_ax.get_lines()]
    # the hit rate exists only with caching on: two lines (one per mode), no 'off' line
    assert len(labels) == 2 and all("caching on" in x for x in labels)
    admitted = [ln.get_label() for ln in fig.axes[1].get_lines()]
    assert sum("caching off" in x for x in admitted) == 2


def test_figure5_without_caching_points_is_empty() -> None:
    df = _points()
    fig = figure5_prefix_caching(df[~df["prefix_caching"]])
    assert "no data" in fig.texts[0].get_text()
