"""Round 9's device plan (round6.py --plan r9) and the decision rules declared before the
call (report9.decide): the variants first, the fill phases after, every phase inside the
budget; a rule holds only when every declared inequality holds and the rows passed."""

from __future__ import annotations

import pytest

pytest.importorskip("torch")

from capsim_kernels.bench.gdn import round6
from capsim_kernels.bench.gdn.report9 import decide, targets
from capsim_kernels.bench.gdn.round9_cells import (
    CELLS9,
    KC9_BASELINES,
    KC9_VARIANTS,
    WARM9,
    kc9_cells,
)


def test_plan_r9_times_the_variants_first_and_ends_inside_the_budget(monkeypatch):
    monkeypatch.setenv("R6_PLAN", "r9")  # as the orchestrator sets it for its workers
    plan = round6.PLANS["r9"]
    assert plan["order"][0] == "gdn_kc" and plan["prefix"] == "round9"
    ends = [plan["end"][p] for p in ("warm", *plan["order"])]
    assert ends == sorted(ends) and ends[-1] <= 0.95
    assert set(plan["order"]) == set(CELLS9) and round6.warm_phases("r9") == WARM9
    cells = kc9_cells(False)
    assert len(cells) == 9 and (cells[0].tree.num_nodes, cells[0].batch) == (4, 256)
    assert cells[0].kernels == (*KC9_VARIANTS, *KC9_BASELINES)
    # the warm-up's first keys are gdn_kc's: one per worker before any gdn_tpT compile
    warm, kc_warm = round6.warm_cells(False, WARM9), round6.warm_cells(False, ("gdn_kc",))
    assert 0 < len(kc_warm) <= 15 and len(kc_warm) <= len(warm)  # one gdn_kc key per worker
    # (the later phases hold only the points the calibration still lacks: after round 9's
    # ingest few or none are left, so the warm-up may hold gdn_kc's keys alone)
    # (a key shared with a later phase also warms that phase's kernels there)
    for got, want in zip(warm[:len(kc_warm)], kc_warm):
        assert (got.tree.parent, got.batch) == (want.tree.parent, want.batch)
        assert set(want.kernels) <= set(got.kernels)


def _row(kernel: str, t: int, b: int, p50: float, ok: str = "True") -> dict:
    return {"kernel": kernel, "T": str(t), "B": str(b), "tree": "chain", "phase": "gdn_kc",
            "p50_us": str(p50), "check_ok": ok, "contract_ok": "True", "vt_err": "1e-7",
            "floor_ratio": "1.5", "state_dtype": "float32", "err_max_req_head": "3e-7"}  # fmt: skip


def _cell_rows(scale_u: float, scale_v: float, bad: str = "") -> list[dict]:
    rows = []
    for t, b, d, v in ((4, 256, 495.0, 207.0), (2, 256, 473.0, 199.0), (9, 256, 554.0, 231.0),
                       (4, 64, 135.0, 63.0)):  # fmt: skip
        rows += [_row("deferred", t, b, d), _row("deferred@pipe_s", t, b, d - 5),
                 _row("treewy_verify@pipe_r", t, b, v), _row("vllm_storeall", t, b, 816.0),
                 _row("deferred@pipe_u", t, b, d * scale_u, "False" if bad == "u" else "True"),
                 _row("treewy_verify@pipe_v", t, b, v * scale_v)]  # fmt: skip
    return rows


def test_the_rules_hold_only_when_every_inequality_holds():
    won = decide(_cell_rows(0.85, 0.9))
    assert won["deferred"][0] == "deferred@pipe_u" and won["verify"][0] == "treewy_verify@pipe_v"
    lost = decide(_cell_rows(0.96, 0.98))  # 0.96 x default > 0.95 x pipe_s; verify -2% only
    assert lost["deferred"][0] is None and lost["verify"][0] is None
    assert decide(_cell_rows(0.85, 0.9, bad="u"))["deferred"][0] is None  # a failed check
    missing = [r for r in _cell_rows(0.85, 0.9) if not (r["T"] == "9" and "pipe_u" in r["kernel"])]
    assert decide(missing)["deferred"][0] is None  # T = 9 not measured: not met


def test_targets_name_the_fastest_passing_rows():
    got = dict(targets(_cell_rows(0.85, 0.9)))
    step = next(v for k, v in got.items() if k.startswith("fastest full"))
    assert "deferred@pipe_u" in step and step.startswith(f"{816.0 / (495.0 * 0.85):.2f}x")
