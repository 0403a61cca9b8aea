"""Malformed parent arrays rejected before launch; grids past 65,535 programs on axis 1
split; the calibration build refuses results whose float64 checks failed."""

from __future__ import annotations

import json

import pytest
import torch
from capsim_kernels import storeall_verify, treewy_commit, treewy_verify
from capsim_kernels.gdn_verify import _jit
from capsim_kernels.gdn_verify.tree import TreeSpec
from gdn_testing import make_window

BAD_PARENTS = {
    "cycle": (-1, 2, 1, 0),  # 1 -> 2 -> 1
    "self": (-1, 1, 1),  # parent[1] = 1
    "forward": (-1, 0, 3, 0),  # parent >= index
    "out of range": (-1, 0, 7, 1),
    "no root": (0, 0, 1),
    "not preorder": (-1, 0, 0, 1),  # node 3's parent 1 is off the path of node 2
}


@pytest.mark.parametrize("name", list(BAD_PARENTS))
def test_malformed_parent_rejected_before_launch(name):
    good = make_window(parent=TreeSpec.chain(len(BAD_PARENTS[name])).parent, batch=1)
    bad = torch.tensor(BAD_PARENTS[name], dtype=torch.int32)
    pool_before = good.pool.clone()
    args = (good.q, good.k, good.v, good.log_gate, good.beta, good.pool, good.slot)
    with pytest.raises(ValueError, match=r"^parent"):
        treewy_verify(*args, bad)
    vt = torch.zeros(good.v.shape, dtype=torch.float32)
    accepted = torch.zeros(1, dtype=torch.int32)
    with pytest.raises(ValueError, match=r"^parent"):
        treewy_commit(good.pool, good.slot, good.k, vt, good.log_gate, bad, accepted)
    w = bad.shape[0]
    slots = torch.arange(w, dtype=torch.int32).view(1, w) + 3
    with pytest.raises(ValueError, match=r"^parent"):
        storeall_verify(*args, slots, bad, is_chain=False)
    torch.testing.assert_close(good.pool, pool_before, equal_nan=True)


def test_grid_chunks():
    assert _jit.grid_chunks(10, max_y=4) == [(0, 4), (4, 4), (8, 2)]
    assert _jit.grid_chunks(65535) == [(0, 65535)]
    assert _jit.grid_chunks(65536) == [(0, 65535), (65535, 1)]
    with pytest.raises(ValueError, match="num_programs"):
        _jit.grid_chunks(0)


@pytest.mark.parametrize("tree", [TreeSpec.chain(4), TreeSpec((2, 2, 2))], ids=lambda t: t.label)
def test_split_grid_gives_the_same_result(tree, monkeypatch):
    """B * Hv = 8 programs on axis 1 launched 3 at a time: identical outputs and states."""
    win = make_window(parent=tree.parent, batch=2, num_k_heads=2, num_v_heads=4, seed=3)
    bsz, w = win.q.shape[:2]
    accepted = torch.tensor([w - 1, 1], dtype=torch.int32)
    args = (win.q, win.k, win.v, win.log_gate, win.beta)

    def run():
        pool = win.pool.clone()
        o, vt = treewy_verify(*args, pool, win.slot, win.parent)
        treewy_commit(pool, win.slot, win.k, vt, win.log_gate, win.parent, accepted)
        sa_pool = torch.zeros((bsz * (w + 1), *win.pool.shape[1:]), dtype=win.pool.dtype)
        sa_pool[:bsz] = win.state0
        init = torch.arange(bsz, dtype=torch.int32)
        slots = (bsz + torch.arange(bsz * w, dtype=torch.int32)).view(bsz, w)
        o_sa = storeall_verify(*args, sa_pool, init, slots, win.parent)
        return o, vt, pool, o_sa, sa_pool

    whole = run()
    monkeypatch.setattr(_jit, "MAX_GRID_Y", 3)
    monkeypatch.setattr(_jit.grid_chunks, "__defaults__", (3,))
    split = run()
    for a, b in zip(whole, split, strict=True):
        torch.testing.assert_close(a, b, rtol=0, atol=0, equal_nan=True)


def test_calibration_refuses_failed_checks(tmp_path):
    from capsim.calibration.build import build

    src = tmp_path / "results"
    src.mkdir()
    (src / "model_step_run1.csv").write_text("op,key,p50_us\n")
    (src / "gdn_verify.csv").write_text("kernel,tree\n")
    (src / "meta.json").write_text(json.dumps({"checks_ok": False, "checks": [{"ok": False}]}))
    with pytest.raises(ValueError, match="checks_ok"):
        build(src, tmp_path / "data")


def test_benchmark_refuses_kernels_whose_check_failed():
    from capsim_kernels.bench.gdn.checks import checked_kernels

    check = {
        "model_shape": "m", "state_dtype": "float32", "tree": "chain", "storeall_o": 1e-3,
        "storeall_states": 7e-8, "treewy_o": 1e-3, "treewy_vt": 9e-8,
        "treewy_commit_state": 1.1e-7, "fused_o": 1e-3, "fused_state": 1e-7,
        "deferred_state": 1e-7, "deferred_o": 1e-3,
    }  # fmt: skip
    ok = checked_kernels([check])["m", "float32", "chain"]
    assert {"storeall", "treewy_verify_commit", "deferred", "fused_chain"} <= ok
    assert "fla_chunk" not in ok  # never checked: never timed
    check["treewy_commit_state"] = 2e-6  # above the fp32 contract
    check["deferred_state"] = float("nan")
    bad = checked_kernels([check])["m", "float32", "chain"]
    assert "treewy_verify_commit" not in bad and "treewy_commit" not in bad
    assert "deferred" not in bad and "treewy_verify" in bad


def test_launch_policy_is_an_argument_not_module_state():
    """The sweep builds candidate policies; the default is immutable and never changed."""
    import dataclasses

    from capsim_kernels.bench.gdn.sweep import sweep_parts
    from capsim_kernels.gdn_verify.policy import DEFAULT_POLICY

    before = DEFAULT_POLICY.as_dict()
    pol = DEFAULT_POLICY
    for _part, (apply, cands, default) in sweep_parts(DEFAULT_POLICY).items():
        assert default in cands
        for cfg in cands:
            cand = apply(pol, cfg)
            assert cand is not pol
        pol = apply(pol, cands[-1])
    assert DEFAULT_POLICY.as_dict() == before
    assert pol.as_dict() != before
    with pytest.raises(TypeError):
        DEFAULT_POLICY.stream[16, "verify"] = {}  # read-only tables
    with pytest.raises(dataclasses.FrozenInstanceError):
        DEFAULT_POLICY.single_launch = False
