"""Round 10's device plan (round6.py --plan r10) and the decision rules declared before the
call (report10.RULES10, NOTES.md section 14): one phase, the variants first, inside the
budget; a rule holds only when every declared inequality holds and the rows passed."""

from __future__ import annotations

import pytest

pytest.importorskip("torch")

from capsim_kernels.bench.gdn import round6
from capsim_kernels.bench.gdn.report9 import decide, targets
from capsim_kernels.bench.gdn.report10 import RULES10
from capsim_kernels.bench.gdn.round10_cells import (
    CELLS10,
    KC10_BASELINES,
    KC10_VARIANTS,
    WARM10,
    kc10_cells,
)
from capsim_kernels.bench.gdn.variants import VARIANT_KERNELS

# the one-line command's numbers (/work/notes/s6/k10_ready.md): --budget-s, python's
# timeout, the device call's timeout_s
BUDGET_S, PY_TIMEOUT_S, CALL_TIMEOUT_S = 260, 290, 330


def test_plan_r10_is_gdn_kc_alone_and_ends_inside_the_budget(monkeypatch):
    monkeypatch.setenv("R6_PLAN", "r10")
    plan = round6.PLANS["r10"]
    assert plan["order"] == ("gdn_kc",) and plan["prefix"] == "round10"
    assert plan["phases"] == "warm,gdn_kc" and set(plan["order"]) == set(CELLS10)
    ends = [plan["end"][p] for p in ("warm", *plan["order"])]
    assert ends == sorted(ends) and ends[-1] <= 0.95
    # the last phase's deadline + the child's 15 s kill grace end before python's timeout,
    # which ends before the call's; round 9's warm-up (more keys) took 79.6 s
    assert ends[-1] * BUDGET_S + 15 < PY_TIMEOUT_S - 10 and PY_TIMEOUT_S + 20 <= CALL_TIMEOUT_S
    assert plan["end"]["warm"] * BUDGET_S >= 100
    assert round6.warm_phases("r10") == WARM10 == ("gdn_kc",)
    cells = kc10_cells(False)
    assert [(c.tree.num_nodes, c.batch) for c in cells] == [
        (t, b) for t in (4, 2, 9) for b in (256, 64, 1)]  # fmt: skip
    assert all(c.shape.name == "qwen3.5-35b-a3b-tp1" and c.state_dtype == "float32"
               for c in cells)  # fmt: skip
    assert cells[0].kernels == (*KC10_VARIANTS, *KC10_BASELINES)
    known = {k.name for k in VARIANT_KERNELS}
    assert set(KC10_VARIANTS) <= known and {"deferred@pipe_x", "treewy_verify@pipe_r"} <= known
    # every rule's candidates and references are timed in every cell
    for cands, limits in RULES10.values():
        assert set(cands) <= set(KC10_VARIANTS)
        assert {ref for _, _, ref, _ in limits} <= set(KC10_BASELINES)
    # one warm-up key per worker (15): gdn_kc's capsim keys (3 windows x 2 batch sides)
    # and vLLM's per batch size (9); every kernel of a cell warmed at its key
    warm = round6.warm_cells(False, WARM10)
    assert 0 < len(warm) <= 15
    for c in cells:
        key = round6.warm_key(c, round6.warm_batch(c, False))
        mine = [w for w in warm if (w.shape.heads_key, w.state_dtype, w.tree.parent, w.batch)
                == key and w.kernels != ("vllm_storeall",)]  # fmt: skip
        assert len(mine) == 1 and set(c.kernels) - {"vllm_storeall"} <= set(mine[0].kernels)


def test_plan_r10_dry_cells_are_small():
    cells = kc10_cells(True)
    assert [(c.tree.num_nodes, c.batch) for c in cells] == [(4, 3), (4, 1), (2, 3), (2, 1)]


def _row(kernel: str, t: int, b: int, p50: float, ok: str = "True") -> dict:
    return {"kernel": kernel, "T": str(t), "B": str(b), "tree": "chain", "phase": "gdn_kc",
            "p50_us": str(p50), "check_ok": ok, "contract_ok": "True", "vt_err": "1e-7",
            "floor_ratio": "1.5", "state_dtype": "float32", "err_max_req_head": "3e-7"}  # fmt: skip


def _cell_rows(scale_z: float, scale_y: float, bad: str = "", t9_z: float | None = None):
    rows = []
    for t, b, x, v in ((4, 256, 450.0, 206.0), (2, 256, 445.0, 199.0), (9, 256, 481.0, 231.0),
                       (4, 64, 127.0, 63.0)):  # fmt: skip
        z = x * (t9_z if t9_z is not None and t == 9 else scale_z)
        rows += [_row("deferred", t, b, x * 1.1), _row("deferred@pipe_x", t, b, x),
                 _row("treewy_verify@pipe_r", t, b, v), _row("vllm_storeall", t, b, 814.0),
                 _row("deferred@pipe_z", t, b, z, "False" if bad == "z" else "True"),
                 _row("treewy_verify@pipe_y", t, b, v * scale_y)]  # fmt: skip
    return rows


def test_the_round10_rules_hold_only_when_every_inequality_holds():
    won = decide(_cell_rows(0.95, 0.96), RULES10)
    assert won["deferred"][0] == "deferred@pipe_z" and won["verify"][0] == "treewy_verify@pipe_y"
    lost = decide(_cell_rows(0.98, 0.98), RULES10)  # 0.98 x pipe_x > 0.97; verify -2% only
    assert lost["deferred"][0] is None and lost["verify"][0] is None
    assert decide(_cell_rows(0.95, 0.96, bad="z"), RULES10)["deferred"][0] is None
    # faster at T = 4 but slower than pipe_x at T = 9: not met
    assert decide(_cell_rows(0.95, 0.96, t9_z=1.01), RULES10)["deferred"][0] is None
    missing = [r for r in _cell_rows(0.95, 0.96)
               if not (r["B"] == "64" and "pipe_y" in r["kernel"])]  # fmt: skip
    assert decide(missing, RULES10)["verify"][0] is None  # B = 64 not measured: not met
    # the reference is pipe_x, not the round-6 default (1.1 x pipe_x here)
    lines = dict(decide(_cell_rows(0.98, 0.96), RULES10))["deferred"][1]
    assert "0.97 x deferred@pipe_x 450.0" in lines[0]


def test_round10_targets_name_the_fastest_passing_rows():
    got = dict(targets(_cell_rows(0.95, 0.96)))
    step = next(v for k, v in got.items() if k.startswith("fastest full"))
    assert "deferred@pipe_z" in step and step.startswith(f"{814.0 / (450.0 * 0.95):.2f}x")
