"""Issue 22's summaries: the knee split by every capacity setting, the sweep's printed
summary one row per (deployment, workload, mode), and a grid TOML's errors all at once."""

from __future__ import annotations

import pandas as pd
import pytest

from capsim.sweep.grid_toml import spec_from_dict
from capsim.sweep.knee import format_knee, knee_table
from capsim.sweep.matched import matched_table
from capsim.sweep.runner import format_summary, summary_table


def _point(
    commit: str,
    load: float,
    *,
    caching: bool,
    gpu: str = "B200",
    cap: float = 100.0,
    workload: str = "sharegpt",
    mode: str = "concurrency",
) -> dict:
    running = min(load, cap)
    return {
        "point_id": f"{commit}-{load}-{caching}-{gpu}-{workload}",
        "match_id": f"{load}-{caching}-{gpu}-{workload}",
        "block": "main",
        "model": "qwen3.5-35b-a3b",
        "gpu": gpu,
        "tp": 1,
        "gmu": 0.6,
        "workload": workload,
        "load_mode": mode,
        "load": float(load),
        "tree": "chain",
        "tree_model": "rank",
        "temperature": 0.0,
        "num_spec_tok": 3,
        "commit": commit,
        "prefix_caching": caching,
        "seed": 0,
        "step_time_label": "test",
        "output_throughput_tok_per_s": 10.0 * running,
        "peak_kv_usage": running / cap,
        "peak_kv_blocks": running * 10.0,
        "peak_running": running,
        "num_preemptions": 0,
        "ttft_p99_s": 1.0 + load / cap,
        "ttft_mean_s": 0.5,
        "tpot_mean_s": 0.01,
        "e2el_mean_s": 1.0,
        "usable_blocks": cap * 10,
        "blocks_per_mean_request": 10.0,
        "analytical_capacity_req": cap,
    }


def _grid() -> pd.DataFrame:
    rows = []
    for caching, sa_cap in ((False, 100.0), (True, 120.0)):  # caching changes the capacity
        for gpu in ("B200", "H200"):
            for load in (64.0, 128.0):
                rows.append(_point("storeall", load, caching=caching, gpu=gpu, cap=sa_cap))
                rows.append(_point("reconstruct", load, caching=caching, gpu=gpu, cap=400.0))
            for rate in (20.0, 40.0):
                rows.append(
                    _point(
                        "storeall",
                        rate,
                        caching=caching,
                        gpu=gpu,
                        mode="rate",
                        workload="burst",
                        cap=sa_cap,
                    )
                )
                rows.append(
                    _point(
                        "reconstruct",
                        rate,
                        caching=caching,
                        gpu=gpu,
                        mode="rate",
                        workload="burst",
                        cap=400.0,
                    )
                )
    return pd.DataFrame(rows)


def test_knee_keeps_caching_on_and_off_apart():
    k = knee_table(_grid())
    assert len(k) == 2 * 2 * 2  # (caching) x (GPU) x (workload)
    conc = k[k["load_mode"] == "concurrency"].set_index(["gpu", "prefix_caching"])
    # whole capacities, not the 110 a merged row would report
    assert conc.loc[("B200", False), "capacity_storeall"] == 100
    assert conc.loc[("B200", True), "capacity_storeall"] == 120
    assert conc.loc[("B200", False), "knee_storeall"] == 128
    text = format_knee(k)
    assert "caching" in text and "every row: num_spec_tok=3" in text


def test_summary_one_row_per_deployment_workload_mode():
    matched = matched_table(_grid())
    t = summary_table(matched)
    assert len(t) == 8  # GPU x workload (load mode) x caching, one TreeWY mode
    assert set(t["workload"]) == {"sharegpt", "burst"}
    assert (t["matched"] == 2).all()
    text = format_summary(t)
    assert "qwen3.5-35b-a3b on B200 TP1, gmu 0.6:" in text
    assert "qwen3.5-35b-a3b on H200 TP1, gmu 0.6:" in text
    assert "every row: tree=chain, mode=reconstruct" in text
    assert max(len(line) for line in text.splitlines()) <= 120


def test_grid_toml_lists_every_error():
    raw = {
        "sweep": {"seed": -1, "num_request": 3},
        "block": [
            {
                "deployment": [
                    {"model": "qwen3.5-35b-a3b", "gpu": "B200", "gmu": 0.9},
                    {"model": "qwen3.5-35b-a3b", "gpu": "B200", "gmu": [1.5]},
                ],
                "workload": [{"name": "sharegpt", "loads": [-1]}, {"mode": "rate"}],
            }
        ],
    }
    with pytest.raises(ValueError) as exc:
        spec_from_dict(raw, where="g.toml")
    msg = str(exc.value)
    assert msg.startswith("g.toml: 6 errors: ")
    for part in (
        "sweep.num_request: unknown key",
        "block[0].deployment[0].gmu=0.9: must be a list",
        "block[0].deployment[1]: deployment.gmu=(1.5,)",
        "block[0].workload[0]: workload.loads=(-1,)",
        "block[0].workload[1].name: missing",
        "block[0].workload[1].loads: missing",
    ):
        assert part in msg, part
    raw["sweep"].pop("num_request")
    with pytest.raises(ValueError, match=r"sweep\.seed=-1: must be an int >= 0"):
        spec_from_dict(raw, where="g.toml")


def test_grid_toml_one_error_keeps_its_message():
    with pytest.raises(ValueError, match=r"^g.toml: sweep.num_request: unknown key"):
        spec_from_dict(
            {
                "sweep": {"num_request": 5},
                "block": [
                    {
                        "deployment": [{"model": "qwen3.5-35b-a3b", "gpu": "B200", "gmu": [0.9]}],
                        "workload": [{"name": "sharegpt", "loads": [8]}],
                    }
                ],
            },
            where="g.toml",
        )
