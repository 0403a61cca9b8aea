"""Round 12's device plan (round6.py --plan r12) and the decision rule declared before the
call (report12.RULES12, NOTES.md section 18): one phase, the deferred commit's state stream
next to pipe_zw1 / pipe_zw2 / the default / verify pipe_r / vLLM, ending inside a short
budget; the rule holds only when every declared inequality holds and the rows passed."""

from __future__ import annotations

import pytest

pytest.importorskip("torch")

from capsim_kernels.bench.gdn import round6
from capsim_kernels.bench.gdn.report9 import decide, targets
from capsim_kernels.bench.gdn.report12 import RULES12
from capsim_kernels.bench.gdn.round12_cells import (
    CELLS12,
    KC12_BASELINES,
    KC12_VARIANTS,
    WARM12,
    kc12_cells,
)
from capsim_kernels.bench.gdn.variants import VARIANT_KERNELS

# the one-line command's numbers (/work/notes/s13/k12_ready.md): --budget-s, python's
# timeout, the device call's timeout_s; the whole command must end within 150 s
BUDGET_S, PY_TIMEOUT_S, CALL_TIMEOUT_S = 110, 130, 150


def test_plan_r12_is_gdn_kc_alone_and_ends_inside_the_budget(monkeypatch):
    monkeypatch.setenv("R6_PLAN", "r12")
    plan = round6.PLANS["r12"]
    assert plan["order"] == ("gdn_kc",) and plan["prefix"] == "round12"
    assert plan["phases"] == "warm,gdn_kc" and set(plan["order"]) == set(CELLS12)
    ends = [plan["end"][p] for p in ("warm", *plan["order"])]
    assert ends == sorted(ends) and ends[-1] <= 0.95
    # the last phase's deadline + the child's 15 s kill grace end before python's timeout
    # (+3 s kill), and that before 150 s, the call's timeout_s; round 11's warm-up was
    # 17.5 s for 7 kernels on a fresh machine (here 8)
    assert ends[-1] * BUDGET_S + 15 <= PY_TIMEOUT_S - 5
    assert PY_TIMEOUT_S + 3 + 5 <= CALL_TIMEOUT_S <= 150
    assert plan["end"]["warm"] * BUDGET_S >= 3 * 17.5
    assert round6.warm_phases("r12") == WARM12 == ("gdn_kc",)
    cells = kc12_cells(False)
    assert [(c.tree.num_nodes, c.batch) for c in cells] == [
        (t, b) for t in (4, 2, 9) for b in (256, 64)]  # fmt: skip
    assert all(c.shape.name == "qwen3.5-35b-a3b-tp1" and c.state_dtype == "float32"
               for c in cells)  # fmt: skip
    assert cells[0].kernels == (*KC12_VARIANTS, *KC12_BASELINES)
    known = {k.name for k in VARIANT_KERNELS}
    assert set(KC12_VARIANTS) <= known
    assert {"deferred@pipe_zw1", "deferred@pipe_zw2", "treewy_verify@pipe_r"} <= known
    assert {c for cands, _ in RULES12.values() for c in cands} == set(KC12_VARIANTS)
    refs = {name: {ref for _, _, ref, _ in limits} for name, (_, limits) in RULES12.items()}
    assert refs == {"deferred": {"deferred@pipe_zw1"}, "verify": {"treewy_verify@pipe_r"}}
    assert set().union(*refs.values()) <= set(KC12_BASELINES)
    # one warm-up key per worker (15 at most): every kernel of a cell warmed at its key
    warm = round6.warm_cells(False, WARM12)
    assert 0 < len(warm) <= 15
    for c in cells:
        key = round6.warm_key(c, round6.warm_batch(c, False))
        mine = [w for w in warm if (w.shape.heads_key, w.state_dtype, w.tree.parent, w.batch)
                == key and w.kernels != ("vllm_storeall",)]  # fmt: skip
        assert len(mine) == 1 and set(c.kernels) - {"vllm_storeall"} <= set(mine[0].kernels)


def test_plan_r12_dry_cells_are_small():
    cells = kc12_cells(True)
    assert [(c.tree.num_nodes, c.batch) for c in cells] == [(4, 3), (4, 1), (2, 3), (2, 1)]


def _row(kernel: str, t: int, b: int, p50: float, ok: str = "True", cok: str = "True") -> dict:
    return {"kernel": kernel, "T": str(t), "B": str(b), "tree": "chain", "phase": "gdn_kc",
            "p50_us": str(p50), "check_ok": ok, "contract_ok": cok, "vt_err": "1e-7",
            "floor_ratio": "1.45", "state_dtype": "float32",
            "err_max_req_head": "3e-7"}  # fmt: skip


def _cell_rows(scale: float, bad: str = "", t9: float | None = None, b64: float | None = None,
               name: str = "deferred@pipe_zw1e"):  # fmt: skip
    rows = []
    for t, b, zw1 in ((4, 256, 387.0), (2, 256, 377.0), (9, 256, 435.0), (4, 64, 110.0)):
        f = t9 if t9 is not None and t == 9 else b64 if b64 is not None and b == 64 else scale
        rows += [_row("deferred", t, b, zw1 * 1.25), _row("deferred@pipe_zw2", t, b, zw1 * 1.05),
                 _row("deferred@pipe_zw1", t, b, zw1), _row("vllm_storeall", t, b, 805.0),
                 _row(name, t, b, zw1 * f, "False" if bad == "check" else "True",
                      "False" if bad == "contract" else "True")]  # fmt: skip
    return rows


def test_the_round12_rule_holds_only_when_every_inequality_holds():
    assert decide(_cell_rows(0.95), RULES12)["deferred"][0] == "deferred@pipe_zw1e"
    assert decide(_cell_rows(0.95, name="deferred@pipe_zw1p"), RULES12)["deferred"][0] == (
        "deferred@pipe_zw1p")  # fmt: skip
    assert decide(_cell_rows(0.98), RULES12)["deferred"][0] is None  # > 0.97 x pipe_zw1
    assert decide(_cell_rows(0.95, bad="check"), RULES12)["deferred"][0] is None
    assert decide(_cell_rows(0.95, bad="contract"), RULES12)["deferred"][0] is None
    # T = 9 runs pipe_zw1's own kernel: within 1% passes, beyond fails
    assert decide(_cell_rows(0.95, t9=1.009), RULES12)["deferred"][0] == "deferred@pipe_zw1e"
    assert decide(_cell_rows(0.95, t9=1.02), RULES12)["deferred"][0] is None
    assert decide(_cell_rows(0.95, b64=1.019), RULES12)["deferred"][0] == "deferred@pipe_zw1e"
    assert decide(_cell_rows(0.95, b64=1.03), RULES12)["deferred"][0] is None  # > 2% at B = 64
    missing = [r for r in _cell_rows(0.95) if not (r["T"] == "2" and "zw1e" in r["kernel"])]
    assert decide(missing, RULES12)["deferred"][0] is None  # T = 2 not measured: not met
    # the reference is pipe_zw1, not pipe_zw2 (1.05 x pipe_zw1 here)
    lines = dict(decide(_cell_rows(0.98), RULES12))["deferred"][1]
    assert "0.97 x deferred@pipe_zw1 387.0" in lines[0]


def test_the_round12_verify_rule_is_round9s_against_pipe_r():
    rows = []
    for t, b, r in ((4, 256, 206.0), (2, 256, 199.0), (9, 256, 231.0), (4, 64, 63.0)):
        f = 0.96 if b == 256 and t != 9 else 1.0
        rows += [_row("treewy_verify@pipe_r", t, b, r), _row("treewy_verify@pipe_re", t, b, r * f)]
    assert decide(rows, RULES12)["verify"][0] == "treewy_verify@pipe_re"
    slow = [dict(r, p50_us="202.0") if r["kernel"].endswith("pipe_re") and r["T"] == "4"
            and r["B"] == "256" else r for r in rows]  # fmt: skip
    assert decide(slow, RULES12)["verify"][0] is None  # 0.98 x pipe_r: not >= 3% faster


def test_round12_targets_name_the_fastest_passing_rows():
    got = dict(targets(_cell_rows(0.95)))
    step = next(v for k, v in got.items() if k.startswith("fastest full"))
    assert "deferred@pipe_zw1e" in step and step.startswith(f"{805.0 / (387.0 * 0.95):.2f}x")


def test_the_committed_round12_run_holds_neither_rule_and_no_s13_policy():
    # recomputed from the committed device rows (kernels/results/h200/round12_gdn_kc.csv,
    # 2026-12-04 04:06 UTC): pipe_zw1p 0.990 / pipe_zw1e 1.001 x pipe_zw1 at T = 4 B = 256
    # (limit 0.97), pipe_re 0.978 x pipe_r (needs <= 0.97) -> MEASURED_POLICY_S13 not created
    from pathlib import Path

    from capsim_kernels.bench.gdn.report9 import load_round
    from capsim_kernels.gdn_verify import policy

    results = Path(__file__).resolve().parents[2] / "kernels" / "results" / "h200"
    rows = load_round(results, "round12")
    assert len(rows) == 48 and all(r.get("check_ok") in ("True", True) for r in rows)
    assert all(r.get("contract_ok") in ("True", True) for r in rows)
    got = decide(rows, RULES12)
    assert got["deferred"][0] is None, got["deferred"][1]
    assert got["verify"][0] is None, got["verify"][1]
    assert not hasattr(policy, "MEASURED_POLICY_S13")
