"""whatif's rate mode is the plan's capacity search for one replica (steady-state rule)."""

from __future__ import annotations

from capsim.plan.whatif import whatif_rate
from capsim.sweep.whatif import Candidate, Slo


def test_rate_whatif_runs_the_plan_search():
    cands = [
        Candidate(
            model="qwen3.5-35b-a3b",
            gpu="H200",
            tp=1,
            gmu=0.92,
            tree=None,
            commit=m,
            workload="sharegpt",
            load_mode="rate",
            num_requests=40,
            max_load=80.0,
            step_time="roofline",
            max_model_len=8192,
            num_spec_tok=3,
        )
        for m in ("storeall", "reconstruct")
    ]
    allres, best = whatif_rate(cands, Slo(ttft_p99_s=0.3))
    assert list(allres["commit"]) == ["storeall", "reconstruct"]
    assert (allres["max_load"] > 0).all() and (allres["max_load"] <= 80.0).all()
    assert set(allres["steady"]) <= {True, False} and "run_multiplier" in allres
    assert len(best) == 2
