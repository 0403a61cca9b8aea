"""Per-workload draft acceptance in a grid reaches the simulated points."""

from __future__ import annotations

import pytest

from capsim.sweep.grid import expand
from capsim.sweep.grid_toml import spec_from_dict


def _raw(acceptance=None):  # type: ignore[no-untyped-def]
    wl = {"name": "sharegpt", "mode": "concurrency", "loads": [8]}
    if acceptance is not None:
        wl["acceptance"] = acceptance
    return {
        "sweep": {"name": "t", "commit_modes": ["storeall"]},
        "block": [
            {
                "name": "b",
                "deployment": [{"model": "qwen3.5-35b-a3b", "gpu": "B200", "tp": 1, "gmu": [0.9]}],
                "workload": [wl, {"name": "spec-bench", "mode": "concurrency", "loads": [8]}],
            }
        ],
    }


def test_workload_acceptance_is_used_per_workload() -> None:
    points = expand(spec_from_dict(_raw([0.9, 0.7, 0.5])))
    by_wl = {p.cfg.workload: p.cfg.spec.acceptance.conditional for p in points}
    assert by_wl["sharegpt"] == (0.9, 0.7, 0.5)
    assert by_wl["spec-bench"] == (0.8522,)
    # a different acceptance is a different point (never mixed on resume)
    other = expand(spec_from_dict(_raw([0.5])))
    assert {p.point_id for p in points} != {p.point_id for p in other}


def test_bad_workload_acceptance_names_the_values() -> None:
    with pytest.raises(ValueError, match=r"acceptance\.conditional=\(1\.5,\)"):
        spec_from_dict(_raw([1.5]))


def test_tree_model_and_temperature_reach_every_point() -> None:
    raw = _raw()
    raw["sweep"] |= {"tree_model": "independent", "temperature": 0.7}
    points = expand(spec_from_dict(raw))
    assert {p.cfg.spec.acceptance.tree_model for p in points} == {"independent"}
    assert {p.cfg.spec.acceptance.temperature for p in points} == {0.7}
    assert {p.keys()["tree_model"] for p in points} == {"independent"}
    # the default is the rank model at greedy verification, and it is a different point
    default = expand(spec_from_dict(_raw()))
    assert {p.cfg.spec.acceptance.tree_model for p in default} == {"rank"}
    assert {p.point_id for p in points}.isdisjoint({p.point_id for p in default})


@pytest.mark.parametrize(
    ("field", "value", "match"),
    [("tree_model", "oracle", r"sweep\.tree_model='oracle'"),
     ("temperature", 9.0, r"sweep\.temperature=9\.0")],
)  # fmt: skip
def test_bad_sweep_acceptance_options_name_the_field(field, value, match) -> None:
    raw = _raw()
    raw["sweep"][field] = value
    with pytest.raises(ValueError, match=match):
        spec_from_dict(raw)
