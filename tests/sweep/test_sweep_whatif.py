"""What-if search: the bisection equals a brute-force scan of a monotone stand-in."""

from __future__ import annotations

import pytest
from sweep_fakes import fake_simulate

from capsim.sweep.whatif import Candidate, SearchTask, Slo, search_max_load, whatif


def _cand(**kw):
    base = {
        "model": "qwen3.5-35b-a3b",
        "gpu": "B200",
        "tp": 1,
        "gmu": 0.6,
        "tree": None,
        "commit": "storeall",
        "workload": "sharegpt",
        "load_mode": "concurrency",
        "num_requests": 20,
        "max_load": 600,
    }
    base.update(kw)
    return Candidate(**base)


def _brute(cand, slo):
    best = 0
    for load in range(1, int(cand.max_load) + 1):
        if slo.meets(fake_simulate(cand.config(load)).summary):
            best = load
    return best


@pytest.mark.parametrize("commit", ["storeall", "reconstruct"])
@pytest.mark.parametrize("ttft_s", [0.2, 0.5, 3.0])
def test_bisection_matches_brute_force(commit, ttft_s):
    slo = Slo(ttft_p99_s=ttft_s)
    cand = _cand(commit=commit, rel_tol=0.0)
    got = search_max_load(SearchTask(cand, slo, fake_simulate))
    assert got["max_load"] == _brute(cand, slo)
    assert got["num_sims"] <= 25  # guided search, not a scan


def test_tolerance_gives_a_close_lower_bound():
    slo = Slo(ttft_p99_s=0.5)
    cand = _cand(rel_tol=0.05)
    got = search_max_load(SearchTask(cand, slo, fake_simulate))["max_load"]
    exact = _brute(cand, slo)
    assert exact * 0.95 - 1 <= got <= exact


def test_unmeetable_and_unlimited():
    cand = _cand()
    none = search_max_load(SearchTask(cand, Slo(ttft_p99_s=0.01), fake_simulate))
    assert none["max_load"] == 0
    everything = search_max_load(SearchTask(cand, Slo(ttft_p99_s=1e6), fake_simulate))
    assert everything["max_load"] == cand.max_load and everything["at_search_limit"]


def test_rate_mode_within_tolerance():
    cand = _cand(load_mode="rate", workload="burstgpt-standin", max_load=500.0)
    slo = Slo(ttft_p99_s=0.5)
    got = search_max_load(SearchTask(cand, slo, fake_simulate))
    x = got["max_load"]
    assert slo.meets(fake_simulate(cand.config(x)).summary)
    assert not slo.meets(fake_simulate(cand.config(x * (1 + 2 * cand.rel_tol))).summary)


def test_best_candidate_maximises_goodput():
    slo = Slo(ttft_p99_s=0.5, tpot_s=0.05)
    cands = [_cand(gmu=g, commit=m) for g in (0.6, 0.9) for m in ("storeall", "reconstruct")]
    allres, best = whatif(cands, slo, point_fn=fake_simulate)
    assert len(allres) == 4 and list(best["commit"]) == ["storeall", "reconstruct"]
    for _, b in best.iterrows():
        same = allres[allres["commit"] == b["commit"]]
        assert b["goodput_tok_per_s"] == same["goodput_tok_per_s"].max()
    # more memory never lowers the SLO-meeting load of the stand-in
    sa = allres[allres["commit"] == "storeall"].set_index("gmu")["max_load"]
    assert sa[0.9] >= sa[0.6]


def test_slo_validation():
    with pytest.raises(ValueError, match="give a p99 TTFT target"):
        Slo()
    with pytest.raises(ValueError, match=r"slo\.tpot_s"):
        Slo(tpot_s=-1.0)
