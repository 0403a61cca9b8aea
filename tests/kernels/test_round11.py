"""Round 11's device plan (round6.py --plan r11) and the decision rule declared before the
call (report11.RULES11, NOTES.md section 16): one phase, the deferred commit alone, ending
inside a very short budget; the rule holds only when every declared inequality holds and the
rows passed."""

from __future__ import annotations

import pytest

pytest.importorskip("torch")

from capsim_kernels.bench.gdn import round6
from capsim_kernels.bench.gdn.report9 import decide, targets
from capsim_kernels.bench.gdn.report11 import RULES11
from capsim_kernels.bench.gdn.round11_cells import (
    CELLS11,
    KC11_BASELINES,
    KC11_VARIANTS,
    WARM11,
    kc11_cells,
)
from capsim_kernels.bench.gdn.variants import VARIANT_KERNELS

# the one-line command's numbers (/work/notes/s6/k11_ready.md): --budget-s, python's
# timeout, the device call's timeout_s; the whole command must end within 110 s
BUDGET_S, PY_TIMEOUT_S, CALL_TIMEOUT_S = 85, 100, 115


def test_plan_r11_is_gdn_kc_alone_and_ends_inside_the_budget(monkeypatch):
    monkeypatch.setenv("R6_PLAN", "r11")
    plan = round6.PLANS["r11"]
    assert plan["order"] == ("gdn_kc",) and plan["prefix"] == "round11"
    assert plan["phases"] == "warm,gdn_kc" and set(plan["order"]) == set(CELLS11)
    ends = [plan["end"][p] for p in ("warm", *plan["order"])]
    assert ends == sorted(ends) and ends[-1] <= 0.95
    # the last phase's deadline + the child's 15 s kill grace end before python's timeout
    # (+3 s kill), and that before 110 s and the call's timeout_s; round 10's warm-up was
    # 26.5 s for 15 keys x 14 kernels (here fewer keys, 7 kernels)
    assert ends[-1] * BUDGET_S + 15 <= PY_TIMEOUT_S - 5
    assert PY_TIMEOUT_S + 3 + 5 <= 110 <= CALL_TIMEOUT_S <= 120
    assert plan["end"]["warm"] * BUDGET_S >= 1.6 * 26.5
    assert round6.warm_phases("r11") == WARM11 == ("gdn_kc",)
    cells = kc11_cells(False)
    assert [(c.tree.num_nodes, c.batch) for c in cells] == [
        (t, b) for t in (4, 2, 9) for b in (256, 64)]  # fmt: skip
    assert all(c.shape.name == "qwen3.5-35b-a3b-tp1" and c.state_dtype == "float32"
               for c in cells)  # fmt: skip
    assert cells[0].kernels == (*KC11_VARIANTS, *KC11_BASELINES)
    assert all(k.startswith("deferred") or k == "vllm_storeall" for k in cells[0].kernels)
    known = {k.name for k in VARIANT_KERNELS}
    assert set(KC11_VARIANTS) <= known and {"deferred@pipe_zw2", "deferred@pipe_x"} <= known
    for cands, limits in RULES11.values():
        assert set(cands) == set(KC11_VARIANTS)
        assert {ref for _, _, ref, _ in limits} == {"deferred@pipe_zw2"} <= set(KC11_BASELINES)
    # one warm-up key per worker (15 at most): every kernel of a cell warmed at its key
    warm = round6.warm_cells(False, WARM11)
    assert 0 < len(warm) <= 15
    for c in cells:
        key = round6.warm_key(c, round6.warm_batch(c, False))
        mine = [w for w in warm if (w.shape.heads_key, w.state_dtype, w.tree.parent, w.batch)
                == key and w.kernels != ("vllm_storeall",)]  # fmt: skip
        assert len(mine) == 1 and set(c.kernels) - {"vllm_storeall"} <= set(mine[0].kernels)


def test_plan_r11_dry_cells_are_small():
    cells = kc11_cells(True)
    assert [(c.tree.num_nodes, c.batch) for c in cells] == [(4, 3), (4, 1), (2, 3), (2, 1)]


def _row(kernel: str, t: int, b: int, p50: float, ok: str = "True", cok: str = "True") -> dict:
    return {"kernel": kernel, "T": str(t), "B": str(b), "tree": "chain", "phase": "gdn_kc",
            "p50_us": str(p50), "check_ok": ok, "contract_ok": cok, "vt_err": "1e-7",
            "floor_ratio": "1.5", "state_dtype": "float32", "err_max_req_head": "3e-7"}  # fmt: skip


def _cell_rows(scale: float, bad: str = "", t9: float | None = None, b64: float | None = None):
    rows = []
    for t, b, zw2 in ((4, 256, 406.0), (2, 256, 402.0), (9, 256, 439.0), (4, 64, 113.0)):
        f = t9 if t9 is not None and t == 9 else b64 if b64 is not None and b == 64 else scale
        rows += [_row("deferred", t, b, zw2 * 1.2), _row("deferred@pipe_x", t, b, zw2 * 1.1),
                 _row("deferred@pipe_zw2", t, b, zw2), _row("vllm_storeall", t, b, 812.0),
                 _row("deferred@pipe_zw1", t, b, zw2 * f, "False" if bad == "check" else "True",
                      "False" if bad == "contract" else "True")]  # fmt: skip
    return rows


def test_the_round11_rule_holds_only_when_every_inequality_holds():
    assert decide(_cell_rows(0.95), RULES11)["deferred"][0] == "deferred@pipe_zw1"
    assert decide(_cell_rows(0.98), RULES11)["deferred"][0] is None  # > 0.97 x pipe_zw2
    assert decide(_cell_rows(0.95, bad="check"), RULES11)["deferred"][0] is None
    assert decide(_cell_rows(0.95, bad="contract"), RULES11)["deferred"][0] is None
    assert decide(_cell_rows(0.95, t9=1.01), RULES11)["deferred"][0] is None  # slower at T = 9
    assert decide(_cell_rows(0.95, b64=1.019), RULES11)["deferred"][0] == "deferred@pipe_zw1"
    assert decide(_cell_rows(0.95, b64=1.03), RULES11)["deferred"][0] is None  # > 2% at B = 64
    missing = [r for r in _cell_rows(0.95) if not (r["T"] == "2" and "zw1" in r["kernel"])]
    assert decide(missing, RULES11)["deferred"][0] is None  # T = 2 not measured: not met
    # the reference is pipe_zw2, not pipe_x (1.1 x pipe_zw2 here)
    lines = dict(decide(_cell_rows(0.98), RULES11))["deferred"][1]
    assert "0.97 x deferred@pipe_zw2 406.0" in lines[0]


def test_round11_targets_name_the_fastest_passing_rows():
    got = dict(targets(_cell_rows(0.95)))
    step = next(v for k, v in got.items() if k.startswith("fastest full"))
    assert "deferred@pipe_zw1" in step and step.startswith(f"{812.0 / (406.0 * 0.95):.2f}x")


def test_the_committed_round11_run_picks_pipe_zw1_and_the_policy_follows():
    # recomputed from the committed device rows (kernels/results/h200/round11_gdn_kc.csv)
    from pathlib import Path

    from capsim_kernels.bench.gdn.report9 import load_round
    from capsim_kernels.bench.gdn.variants import VARIANTS
    from capsim_kernels.gdn_verify.policy import MEASURED_POLICY_S6B

    results = Path(__file__).resolve().parents[2] / "kernels" / "results" / "h200"
    rows = load_round(results, "round11")
    assert len(rows) == 42 and all(r.get("check_ok") in ("True", True) for r in rows)
    best, lines = decide(rows, RULES11)["deferred"]
    assert best == "deferred@pipe_zw1", lines
    assert MEASURED_POLICY_S6B.pipe_deferred == VARIANTS["pipe_zw1"].pipe_deferred
