"""The plan page: self-contained HTML from a tiny real plan, and a headless-Chromium shot."""

from __future__ import annotations

import numpy as np
import pytest

from capsim.plan.inputs import PlanInputs, PlanSlo, SearchSettings, SearchSpace, Traffic
from capsim.plan.output import write_plan
from capsim.plan.search import run_plan
from capsim.reports.browser import chromium, screenshot
from capsim.reports.plan_figures import GPU_COLOUR
from capsim.reports.plan_report import build_plan_report


@pytest.fixture(scope="module")
def plan_dir(tmp_path_factory):
    inputs = PlanInputs(
        traffic=Traffic(workload="sharegpt", rate_req_per_s=12.0),
        slo=PlanSlo(ttft_p99_s=1.0, tpot_mean_s=0.05),
        space=SearchSpace(
            gpus=("H200", "B200"),
            tps=(1,),
            ks=(0, 3),
            commit_modes=("storeall",),
            step_time="roofline",
            max_model_len=8192,
            max_replicas=4,
        ),
        settings=SearchSettings(probe_min_requests=30, probe_duration_s=1.5, max_doublings=0),
    )
    out = tmp_path_factory.mktemp("plan")
    write_plan(run_plan(inputs), out)
    return out


def test_page_is_self_contained(plan_dir):
    page = build_plan_report(plan_dir).read_text()
    assert page.count("data:image/png;base64,") >= 3
    assert "http://" not in page.replace("https://docs.runpod.io", "")  # only the cited source
    assert "list prices" in page and "Cheapest" in page


@pytest.mark.skipif(chromium() is None, reason="headless Chromium not installed")
def test_plan_page_renders_in_headless_chromium(plan_dir, tmp_path):
    shot = screenshot(build_plan_report(plan_dir), tmp_path / "shot.png", 1200, 1600)
    from matplotlib.image import imread

    rgb = imread(shot)[..., :3]
    assert rgb.shape[:2] == (1600, 1200)
    assert (rgb.min(axis=2) < 0.9).mean() > 0.03
    # the scatter's GPU colours are on screen
    for g in ("H200", "B200"):
        h = GPU_COLOUR[g]
        target = np.array([int(h[i : i + 2], 16) / 255 for i in (1, 3, 5)])
        assert (np.abs(rgb - target).max(axis=2) < 0.08).sum() > 30, g
