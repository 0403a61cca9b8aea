"""The GDN table's precedence over runs: the newest round-6 call, then the first, then
round 5's gdn_verify.csv; a run whose metadata lacks checks_ok is refused; the slow-gate
accuracy cell is not a timing of the serving inputs."""

from __future__ import annotations

import csv
import json
from pathlib import Path

import pytest

from capsim.calibration.build import round6_rows

COLS = ("kernel", "label", "model_shape", "state_dtype", "T", "tree", "B", "Hv", "Hk", "dk",
        "dv", "p20_us", "p50_us", "p80_us", "bytes_moved", "gate_floor", "phase")  # fmt: skip


def _row(kernel: str, b: int, p50: float, gate: float = 0.3) -> dict:
    return {"kernel": kernel, "label": kernel, "model_shape": "m", "state_dtype": "float32",
            "T": 4, "tree": "chain", "B": b, "Hv": 32, "Hk": 16, "dk": 128, "dv": 128,
            "p20_us": p50, "p50_us": p50, "p80_us": p50, "bytes_moved": 1e6,
            "gate_floor": gate, "phase": "gdn_main"}  # fmt: skip


def _write(path: Path, rows: list[dict]) -> None:
    with path.open("w", newline="") as fh:
        w = csv.DictWriter(fh, fieldnames=COLS)
        w.writeheader()
        w.writerows(rows)


def _run(tmp: Path, name: str, rows: list[dict], ok: bool = True) -> None:
    _write(tmp / f"{name}_gdn_main.csv", rows)
    (tmp / f"{name}_meta.json").write_text(json.dumps({"checks_ok": ok}))


def test_newest_run_wins_then_first_call_then_round5(tmp_path):
    _run(tmp_path, "round6", [_row("deferred", 256, 2.0), _row("deferred", 64, 2.0)])
    _run(tmp_path, "round6_rerun", [_row("deferred", 256, 3.0), _row("deferred", 1, 3.0, 0.9)])
    older = [{**_row("deferred", b, 1.0), "source": "gdn_verify.csv"} for b in (1, 64, 256, 8)]
    for r in older:
        for c in ("T", "B", "Hv", "Hk", "dk", "dv"):
            r[c] = int(r[c])
    got = {r["B"]: (r["p50_us"], r["source"]) for r in round6_rows(tmp_path, older)}
    assert got == {
        256: (3.0, "round6_rerun_gdn_main.csv"),  # the newest call
        64: (2.0, "round6_gdn_main.csv"),  # the first call
        1: (1.0, "gdn_verify.csv"),  # the rerun's B = 1 row is the slow-gate cell: not used
        8: (1.0, "gdn_verify.csv"),
    }


def test_a_run_without_checks_ok_is_refused(tmp_path):
    _run(tmp_path, "round6_rerun", [_row("deferred", 256, 3.0)], ok=False)
    with pytest.raises(ValueError, match="checks_ok=False"):
        round6_rows(tmp_path, [])
