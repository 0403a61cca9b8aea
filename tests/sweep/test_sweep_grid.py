"""Grid expansion, the published TOML, filters and the requests-per-point rule."""

from __future__ import annotations

import pytest

from capsim.sweep.grid import PUBLISHED_GRID, expand, restrict
from capsim.sweep.grid_toml import load_spec, spec_from_dict


def _matched_per(points, model, gmu, block="main"):
    return len(
        {
            p.match_id
            for p in points
            if p.cfg.model == model and p.cfg.engine.gmu == gmu and p.block == block
        }
    )


def test_published_grid_has_spec_counts():
    """SPEC.md s5: 35 matched points per (model, gmu); 105 for the 35B, 70 for the 397B."""
    points = expand(restrict(load_spec(PUBLISHED_GRID), gmu=(0.6, 0.75, 0.9)))
    for gmu in (0.6, 0.75, 0.9):
        assert _matched_per(points, "qwen3.5-35b-a3b", gmu) == 35
    for gmu in (0.75, 0.9):
        assert _matched_per(points, "qwen3.5-397b-a17b", gmu) == 35
    assert _matched_per(points, "qwen3.5-397b-a17b", 0.6) == 0
    main = {p.match_id for p in points if p.block == "main"}
    assert len(main) == 105 + 70
    trees = {p.cfg.spec.tree_widths for p in points if p.block == "trees"}
    assert trees == {(1, 1, 1), (2, 2, 1), (2, 2, 2), (3, 3, 3)}
    assert all(p.cfg.gpu == "B200" and p.cfg.spec.num_spec_tok == 3 for p in points)
    assert {p.cfg.spec.commit for p in points} == {"storeall", "reconstruct"}


def test_matched_points_differ_only_in_commit():
    points = expand(load_spec(PUBLISHED_GRID))
    assert len({p.point_id for p in points}) == len(points)
    by_match: dict[str, list] = {}
    for p in points:
        by_match.setdefault(p.match_id, []).append(p)
    for group in by_match.values():
        assert sorted(p.cfg.spec.commit for p in group) == ["reconstruct", "storeall"]
        a, b = (p.cfg.to_dict() for p in group)
        a["spec"].pop("commit")
        b["spec"].pop("commit")
        assert a == b  # same seed, same load, same everything


def test_gmu_filter_and_empty_grid(spec):
    only = restrict(spec, gmu=(0.9,))
    assert {p.cfg.engine.gmu for p in expand(only)} == {0.9}
    with pytest.raises(ValueError, match="empty grid"):
        restrict(spec, gmu=(0.5,))
    with pytest.raises(ValueError, match="empty grid"):
        restrict(spec, workloads=("nope",))


def test_requests_rule(spec):
    rule = _fields(spec, num_requests=None)
    assert rule.requests_for("concurrency", 1) == rule.min_requests
    assert rule.requests_for("concurrency", 64) == 192
    assert rule.requests_for("concurrency", 4096) == rule.max_requests
    assert rule.requests_for("rate", 4) == 80
    fixed = _fields(spec, num_requests=7)
    assert fixed.requests_for("concurrency", 256) == 7


def _fields(spec, **changes):
    from dataclasses import replace

    return replace(spec, **changes)


def test_toml_errors_name_the_field(tmp_path):
    with pytest.raises(ValueError, match=r"deployment\[0\]\.gmu: missing"):
        spec_from_dict({"block": [{"deployment": [{"model": "m", "gpu": "B200"}], "workload": []}]})
    with pytest.raises(ValueError, match="commit_modes"):
        spec_from_dict(
            {
                "sweep": {"commit_modes": ["storeall", "bogus"]},
                "block": [
                    {
                        "deployment": [{"model": "m", "gpu": "B200", "gmu": [0.9]}],
                        "workload": [{"name": "sharegpt", "loads": [1]}],
                    }
                ],
            }
        )
    with pytest.raises(ValueError, match=r"sweep\.num_request: unknown key"):
        spec_from_dict({"sweep": {"num_request": 5}, "block": []})
    bad = tmp_path / "bad.toml"
    bad.write_text("[sweep\n")
    with pytest.raises(ValueError, match="not valid TOML"):
        load_spec(bad)
    with pytest.raises(ValueError, match="does not exist"):
        load_spec(tmp_path / "missing.toml")
    with pytest.raises(ValueError, match="concurrencies must be integers"):
        spec_from_dict(
            {
                "block": [
                    {
                        "deployment": [{"model": "m", "gpu": "B200", "gmu": [0.9]}],
                        "workload": [{"name": "sharegpt", "loads": [1.5]}],
                    }
                ],
            }
        )
