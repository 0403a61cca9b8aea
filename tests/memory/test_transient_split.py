"""The #50780 GDN transient in two parts (session 4, issue 25): a k=0 part fitted on the fit row
h200-35b-g090-k0-s2call4 and a drafter part fitted on the fit row h200-35b-g090-k3-s2call3
(roles declared in experiments/memory_plan/h200/roles_s4.md, 06:10 UTC, before the change).
The k=1 rows are predictions: nothing was fitted to them."""

from __future__ import annotations

import csv
from pathlib import Path

import pytest

from capsim.config import EngineConfig, SpecDecodeConfig
from capsim.gpus import get_gpu
from capsim.memory import cudagraph as cg
from capsim.memory.log_validate import validate_dir
from capsim.memory.memory_plan import plan_memory
from capsim.models import get_model

LOGS = Path(__file__).resolve().parents[2] / "experiments" / "vllm_logs"
MiB = 1024**2
GiB = 1024**3


@pytest.fixture(scope="module")
def rows() -> dict[str, tuple[str, float | None]]:
    """row id -> (role, capsim's relative error on vLLM's 'Estimated CUDA graph memory')."""
    return {r.row_id: (r.role, r.err("cudagraph_estimate")) for r in validate_dir(LOGS)}


def _logged_gib(row_id: str) -> float:
    with (LOGS / "startups.csv").open() as f:
        return next(float(r["cudagraph_gib"]) for r in csv.DictReader(f) if r["id"] == row_id)


def _estimate_gib(version: str, k: int) -> float:
    plan = plan_memory(
        get_model("qwen3.5-35b-a3b"),
        get_gpu("H200"),
        EngineConfig(gmu=0.9, vllm_version=version),
        SpecDecodeConfig(num_spec_tok=k),
    )
    return plan.cudagraph_estimate_bytes / GiB


@pytest.mark.parametrize(
    ("row", "k"), [("h200-35b-g090-k0-s2call4", 0), ("h200-35b-g090-k3-s2call3", 3)]
)
def test_fit_rows_reproduce_their_logged_estimates(
    rows: dict[str, tuple[str, float | None]], row: str, k: int
) -> None:
    # excerpts line 18 "Estimated CUDA graph memory: 0.55 GiB total" (k=0) and line 23 "... 0.74
    # GiB total" (k=3); both rows are labelled fit in startups.csv
    role, err = rows[row]
    assert role.startswith("fit")
    assert err is not None and abs(err) < 0.005
    assert round(_estimate_gib("0.26.0", k), 2) == _logged_gib(row)


@pytest.mark.parametrize("row", ["h200-35b-g090-k1-s3call6", "h200-35b-g075-k1-s4call10"])
def test_k1_rows_predicted_within_20pct(
    rows: dict[str, tuple[str, float | None]], row: str
) -> None:
    # logged "Estimated CUDA graph memory: 0.75 GiB total" (PIECEWISE=50, FULL=50, largest 512)
    role, err = rows[row]
    assert role == "prediction"
    assert _logged_gib(row) == 0.75
    assert err is not None and abs(err) <= 0.20
    assert abs(_estimate_gib("0.26.0", 1) / 0.75 - 1) <= 0.20


def test_parts_sum_to_the_k3_fit_and_the_drafter_part_needs_drafts() -> None:
    k0, drafter = cg.gdn_transient_k0_bytes(8192), cg.gdn_transient_drafter_bytes(8192, 3)
    assert 110 * MiB < k0 < 125 * MiB  # 0.55 GiB - 257 MiB FA buffers - 187.5 MiB of graphs
    assert 175 * MiB < drafter < 190 * MiB
    assert cg.gdn_transient_drafter_bytes(8192, 0) == 0
    assert cg.gdn_transient_drafter_bytes(8192, 1) == drafter
    assert cg.gdn_transient_bytes(8192, 0) == k0
    assert cg.gdn_transient_bytes(8192, 3) == pytest.approx(k0 + drafter, abs=1)
    assert 290 * MiB < cg.gdn_transient_bytes(8192, 3) < 315 * MiB  # the session-3 constant
    assert cg.gdn_transient_k0_bytes(2048) * 4 == pytest.approx(k0, abs=4)  # per-rank width


@pytest.mark.parametrize("k", [0, 1, 3])
def test_split_is_version_gated_like_the_transient(k: int) -> None:
    # release rule gdn_first_full_capture_transient: from 0.26.0 (vllm #50780); before it neither
    # part is charged and the capture sizes are the same, so the difference is the transient alone
    from capsim.memory.release_rules import rule

    assert not rule("gdn_first_full_capture_transient", "0.25.0")
    assert rule("gdn_first_full_capture_transient", "0.26.0")
    delta_gib = _estimate_gib("0.26.0", k) - _estimate_gib("0.25.0", k)
    assert delta_gib * GiB == pytest.approx(cg.gdn_transient_bytes(8192, k), abs=2)
