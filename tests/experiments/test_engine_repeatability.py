"""experiments/engine/repeatability.md recomputes from the committed runs, and the spreads it
states hold (the real engine's own run-to-run variation; no model involved)."""

from __future__ import annotations

import pandas as pd
from engine_modules import ENGINE as ROOT
from engine_modules import load_engine_experiment

rep = load_engine_experiment("repeatability")


def test_markdown_is_what_the_runs_give() -> None:
    body = rep.markdown(rep.table(ROOT / "runs", ROOT / "manifest.json"))
    assert (ROOT / "repeatability.md").read_text() == body + rep.NOTES


def test_the_stated_spreads() -> None:
    df = rep.table(ROOT / "runs", ROOT / "manifest.json")
    sp = rep.spreads(df)
    k2 = sp.loc["k2_sg_c64"]
    # four machines: throughput and TPOT beyond issue 21's 10%; the GPU-bound FULL step within 10%
    assert k2["output_throughput"] > 30 and k2["mean_tpot_ms"] > 30
    assert k2["step_full_ms"] < 10 and k2["step_piecewise_ms"] > 40
    assert set(df[df["group"] == "k2_sg_c64"]["boot_id"]) == {
        "1ce86fe2", "c97f8c9d", "783bf819", "5498de22"
    }  # fmt: skip
    # light loads repeat across two machines; the shared-prefix c64 run does not (host steps)
    assert sp.loc["k2_rand_c16"]["output_throughput"] < 3
    assert sp.loc["k2_sg_r12"]["output_throughput"] < 3
    assert sp.loc["k0_pc_sp_c64"]["output_throughput"] > 20
    assert sp.loc["k0_pc_sp_c64"]["step_piecewise_ms"] > 30
    # one server, log on vs paused: within 6%
    assert sp.loc["k1_rand_c1"]["mean_tpot_ms"] < 6
    assert pd.isna(sp.loc["k1_rand_c1"]["step_full_ms"])  # one step log only
    # the third machine's k=4 run, minutes before its slow k=2 run, had normal host steps
    k4 = rep.step_medians_ms(ROOT / "runs" / "g090_k4_sg_c64")
    assert k4["piecewise"] < 65 and k4["eager"] < 135
