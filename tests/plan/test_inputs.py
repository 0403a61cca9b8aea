"""Bad plan inputs -> one ValueError naming the field and the value."""

from __future__ import annotations

import pytest

from capsim.plan.inputs import PlanSlo, SearchSettings, SearchSpace, Traffic
from capsim.plan.space import expand_space


@pytest.mark.parametrize(
    ("make", "match"),
    [
        (lambda: PlanSlo(), "slo.targets"),
        (lambda: PlanSlo(ttft_p99_s=-1.0), r"slo.ttft_p99_s=-1.0"),
        (lambda: PlanSlo(tpot_mean_s=0.05, goodput_frac=1.5), "slo.goodput_frac=1.5"),
        (lambda: Traffic(workload="sharegpt"), "traffic.rate_req_per_s=None"),
        (lambda: Traffic(rate_req_per_s=float("inf")), "traffic.rate_req_per_s=inf"),
        (lambda: SearchSpace(gpus=("H999",)), "gpu='H999' is unknown"),
        (lambda: SearchSpace(gpus=()), "space.gpus=()"),
        (lambda: SearchSpace(ks=()), "space.ks=()"),
        (lambda: SearchSpace(tps=(0,)), "space.tps=0"),
        (lambda: SearchSpace(commit_modes=("magic",)), "space.commit_modes='magic'"),
        (lambda: SearchSpace(step_time="fast"), "space.step_time='fast'"),
        (lambda: SearchSettings(rel_tol=0.0), "settings.rel_tol=0.0"),
    ],
)
def test_bad_inputs(make, match):
    with pytest.raises(ValueError, match=match) as info:
        make()
    assert "\n" not in str(info.value)


def test_k0_appears_once_and_trees_set_their_depth():
    space = SearchSpace(
        gpus=("H200",),
        tps=(1,),
        ks=(0, 2),
        trees=(None, (2, 1)),
        commit_modes=("storeall", "reconstruct"),
    )
    cands = expand_space("qwen3.5-35b-a3b", space, 8192)
    labels = [c.spec_label for c in cands]
    assert labels == [
        "off",
        "k=2 storeall",
        "k=2 reconstruct",
        "tree 2x1 storeall",
        "tree 2x1 reconstruct",
    ]
    assert len({c.cand_id for c in cands}) == len(cands)


def test_trace_sets_rate_and_burstiness():
    from capsim.plan.inputs import PlanInputs
    from capsim.plan.search import resolve_traffic

    slo = PlanSlo(ttft_p99_s=1.0)
    t = resolve_traffic(PlanInputs(traffic=Traffic(workload="azure-conv", trace=True), slo=slo))
    assert 1.0 < t.rate_req_per_s < 50.0 and 0.0 < t.burstiness < 10.0 and "trace" in t.source
    with pytest.raises(ValueError, match=r"traffic\.workload='sharegpt': has no timestamps"):
        resolve_traffic(PlanInputs(traffic=Traffic(workload="sharegpt", trace=True), slo=slo))
