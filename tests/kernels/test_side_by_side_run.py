"""``side_by_side.run``'s bookkeeping on CPU, the GPU pieces stubbed: which operators are
skipped, noted, timed or refused timing after a failed float64 check, what each row
carries, and what the meta file says (the H200 run takes the same code path)."""

from __future__ import annotations

import csv
import json
from dataclasses import dataclass

import pytest
import torch
from capsim_kernels.bench.gdn import side_by_side as sbs
from capsim_kernels.bench.gdn import vllm_storeall as vllm_ops


@dataclass
class _Prep:
    math: str
    config: str
    check: dict
    fn: object = None


def _build(state_err: float, exc: BaseException | None = None):  # type: ignore[no-untyped-def]
    def build(case, ctx):  # type: ignore[no-untyped-def]
        if exc is not None:
            raise exc
        return _Prep(
            "fp32", "cfg", {"state_err": state_err, "state_err_max_head": 0.0, "o_err": 0.0}
        )

    return build


OPS = (
    ("good", "treewy", False, ("float32", "bfloat16"), _build(0.0)),
    ("bad", "treewy", False, ("float32", "bfloat16"), _build(1.0)),
    ("chain_only", "storeall", True, ("float32",), _build(0.0)),
    ("missing", "storeall", False, ("float32",), _build(0.0, LookupError("no config"))),
    ("broken", "storeall", False, ("bfloat16",), _build(0.0, RuntimeError("boom"))),
)


@pytest.fixture
def stubbed(monkeypatch: pytest.MonkeyPatch):  # type: ignore[no-untyped-def]
    monkeypatch.setattr(sbs, "OPS", OPS)
    monkeypatch.setattr(sbs, "measure_copy_gbps", lambda: 4000.0)
    monkeypatch.setattr(sbs, "make_case", lambda shape, sd, b, tree, seed: object())
    monkeypatch.setattr(sbs, "ncheck", lambda case: 1)
    monkeypatch.setattr(sbs, "truth", lambda case, n: None)
    monkeypatch.setattr(sbs, "time_graph_us", lambda fn: (1.0, 2.0, 3.0))
    monkeypatch.setattr(sbs, "bytes_moved", lambda kernel, shape, sd, w, b: 8_000_000)
    monkeypatch.setattr(torch.cuda, "get_device_name", lambda: "stub GPU")
    monkeypatch.setattr(torch.cuda, "empty_cache", lambda: None)

    def no_op(path):  # type: ignore[no-untyped-def]
        raise FileNotFoundError(f"no vLLM op under {path}")

    monkeypatch.setattr(vllm_ops, "load_fused_sigmoid_gating", no_op)


def test_run_rows_notes_and_meta(stubbed, tmp_path) -> None:  # type: ignore[no-untyped-def]
    rc = sbs.run(tmp_path, [1, 2], 1e9, tmp_path / "ops", sweep=False, storeall_config={"x": 1})
    assert rc == 0
    with (tmp_path / "side_by_side.csv").open() as fh:
        rows = list(csv.DictReader(fh))
    meta = json.loads((tmp_path / "side_by_side_meta.json").read_text())
    chains = [t for t in sbs.WINDOWS if t.is_chain]
    per_batch = {
        "good": 2 * len(sbs.WINDOWS),  # both state dtypes, every window
        "bad": 2 * len(sbs.WINDOWS),
        "chain_only": len(chains),  # float32 chains only
    }
    for name, n in per_batch.items():
        assert sum(r["kernel"] == name for r in rows) == 2 * n, name
    assert not any(r["kernel"] in ("missing", "broken") for r in rows)
    good = [r for r in rows if r["kernel"] == "good"]
    assert all(r["check_ok"] == "True" and r["p50_us"] == "2.0" for r in good)
    assert all(r["floor_us"] == "2.0" and r["achieved_tbps"] == "4.0" for r in good)
    bad = [r for r in rows if r["kernel"] == "bad"]
    assert all(r["check_ok"] == "False" and r["p50_us"] == "" for r in bad)
    assert meta["num_rows"] == len(rows)
    assert meta["gpu"] == "stub GPU" and meta["copy_gbps"] == 4000.0
    assert meta["storeall_config"] == {"x": 1}
    notes = meta["notes"]
    assert notes[0].startswith("vLLM op not loaded: FileNotFoundError")
    assert sum(n.startswith("missing float32") and "no config" in n for n in notes) == 2 * len(
        sbs.WINDOWS
    )
    assert sum(n.startswith("broken bfloat16") and "boom" in n for n in notes) == 2 * len(
        sbs.WINDOWS
    )
    assert sum(n.startswith("not timed: bad (fp32)") for n in notes) == 4 * len(sbs.WINDOWS)


def test_run_stops_at_the_budget(stubbed, tmp_path) -> None:  # type: ignore[no-untyped-def]
    sbs.run(tmp_path, [1], -1.0, tmp_path / "ops", sweep=False, storeall_config={})
    meta = json.loads((tmp_path / "side_by_side_meta.json").read_text())
    assert meta["num_rows"] == 0
    assert [n for n in meta["notes"] if n.startswith("budget spent")] == [
        f"budget spent before B=1 {sd} {sbs.WINDOWS[0].label}" for sd in sbs.STATE_DTYPES
    ]
