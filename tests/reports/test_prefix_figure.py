"""Figure 5 (prefix caching on vs off) from a points table."""

from __future__ import annotations

import pandas as pd

from capsim.reports.prefix_figure import PREFIX_METRICS, figure5_prefix_caching, zero_hit_reason
from capsim.reports.style import layout_problems


def _points(hit_rate: float = 0.4) -> pd.DataFrame:
    rows = []
    for pc in (False, True):
        for mode in ("storeall", "reconstruct"):
            for load in (8, 64):
                rows.append(
                    {
                        "point_id": f"{pc}-{mode}-{load}",
                        "model": "qwen3.5-35b-a3b",
                        "gpu": "B200",
                        "tp": 1,
                        "gmu": 0.9,
                        "workload": "shared-prefix",
                        "load_mode": "concurrency",
                        "tree": "chain",
                        "commit": mode,
                        "prefix_caching": pc,
                        "load": float(load),
                        "prefix_cache_hit_rate": hit_rate if pc else float("nan"),
                        "peak_running": load,
                        "ttft_p99_s": 1.0,
                        "num_spec_tok": 3,
                        "block_size_tok": 1088,
                        "seed": 0,
                        "num_requests_offered": 16,
                        "step_time_label": "test",
                    }
                )
    return pd.DataFrame(rows)


def test_figure5_one_column_per_deployment_and_workload() -> None:
    (d,) = figure5_prefix_caching(_points())
    axes = [ax for ax in d.fig.axes if ax.axison]
    assert len(axes) == len(PREFIX_METRICS)
    hit_ax = axes[0]
    labels = [ln.get_label() for ln in hit_ax.get_lines()]
    # the hit rate exists only with caching on: two lines (one per mode), no 'off' line
    assert len(labels) == 2 and all("caching on" in x for x in labels)
    admitted = [ln.get_label() for ln in axes[1].get_lines()]
    assert sum("caching off" in x for x in admitted) == 2
    assert layout_problems(d.fig) == []
    assert d.notes == ()


def test_zero_hit_rate_is_explained() -> None:
    (d,) = figure5_prefix_caching(_points(hit_rate=0.0))
    (note,) = d.notes
    # shared-prefix's 16 system prompts of 2,048 tokens: an ideal cache hits, MTP's align
    # mode drops the last of two 1,088-token blocks
    assert "with MTP (k=3)" in note and "2176 tokens" in note and "ideal cache would hit" in note
    assert layout_problems(d.fig) == []
    row = _points().iloc[0]
    assert "no request shares" in zero_hit_reason(row, 0.0)


def test_figure5_without_caching_points_draws_nothing() -> None:
    df = _points()
    assert figure5_prefix_caching(df[~df["prefix_caching"]]) == []
