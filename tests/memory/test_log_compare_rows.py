"""The term rows ``capsim memory --from-log`` / ``--validate`` set beside a log: every term, in
order, with the log's own value and the tolerance it is held to."""

from __future__ import annotations

from pathlib import Path

import pytest

from capsim.memory.log_validate import validate_dir

LOGS = Path(__file__).resolve().parents[2] / "experiments" / "vllm_logs"
TERMS = (
    "weights (GiB)",
    "peak activation (GiB)",
    "non-torch (GiB)",
    "consumed: weights + non-torch + runner buffers (GiB)",
    "CUDA graph estimate (GiB)",
    "CUDA graphs captured (PIECEWISE)",
    "largest capture size (tok)",
    "available KV (GiB)",
    "attention block size (tok)",
    "mamba page padding (%)",
    "GPU KV cache size (tok, pool pinned to the log)",
)


@pytest.fixture(scope="module")
def h200_k0():  # type: ignore[no-untyped-def]
    # row h200-35b-g090-k0-s2call4: weights 65.53, peak 4.26, non-torch 0.25, estimate 0.55,
    # PIECEWISE=51 (largest=512), available KV 55.24, block 1056, padding 0.76, 2,852,376 tok
    r = next(r for r in validate_dir(LOGS) if r.row_id == "h200-35b-g090-k0-s2call4")
    assert r.comparison is not None
    return {t.term: t for t in r.comparison.rows}, [t.term for t in r.comparison.rows]


def test_every_term_in_order(h200_k0) -> None:  # type: ignore[no-untyped-def]
    assert tuple(h200_k0[1]) == TERMS


@pytest.mark.parametrize(
    ("term", "logged", "status"),
    [
        ("weights (GiB)", 65.53, "within tolerance"),
        ("peak activation (GiB)", 4.26, "within tolerance"),
        ("non-torch (GiB)", 0.25, "within tolerance"),
        ("consumed: weights + non-torch + runner buffers (GiB)", None, "log lacks it"),
        ("CUDA graph estimate (GiB)", 0.55, "within tolerance"),
        ("CUDA graphs captured (PIECEWISE)", 51, "same"),
        ("largest capture size (tok)", 512, "same"),
        ("available KV (GiB)", 55.24, "within tolerance"),
        ("attention block size (tok)", 1056, "same"),
        ("mamba page padding (%)", 0.76, "same"),
        ("GPU KV cache size (tok, pool pinned to the log)", 2852376, "within tolerance"),
    ],
)
def test_log_value_and_status(h200_k0, term: str, logged: float | None, status: str) -> None:  # type: ignore[no-untyped-def]
    row = h200_k0[0][term]
    assert row.log == logged
    assert row.status == status
