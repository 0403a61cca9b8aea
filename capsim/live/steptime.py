"""A step-time model fitted to a live engine's own per-step measurements.

The live engine core logs every step (experiments/live/steplog): its wall time and its
batch (tokens, decode requests, prefill requests, decode context). We fit, by least
squares over all logged steps,

    step_s = c0 + c_tok * num_tok + c_dec * num_decode_req + c_pre * num_prefill_req
             + c_ctx * decode_context_tok

and add the engine loop's measured gap between consecutive busy steps (output handling,
input polling: ``t_start[i+1] - t_start[i] - step_s[i]``, median over gaps below
``busy_gap_max_s``), because the simulator advances time by step_time_s alone. Every
constant comes from the log it was fitted to; ``describe()`` records them.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd

from capsim.cost.base import BatchShape

FEATURES: tuple[str, ...] = (
    "one",
    "num_tok",
    "num_decode_req",
    "num_prefill_req",
    "decode_ctx_tok",
)


def _features(df: pd.DataFrame) -> np.ndarray:
    return np.column_stack(
        [
            np.ones(len(df)),
            df["num_tok"].to_numpy(float),
            df["num_decode_req"].to_numpy(float),
            (df["num_req"] - df["num_decode_req"]).to_numpy(float),
            df["decode_ctx_tok"].to_numpy(float),
        ]
    )


@dataclass(frozen=True, slots=True, kw_only=True)
class FittedStepTime:
    """``StepTimeModel`` with coefficients fitted to a live step log."""

    coef: tuple[float, ...]
    loop_gap_s: float
    min_step_s: float
    num_steps_fitted: int
    rel_mae: float
    source: str = ""

    def __post_init__(self) -> None:
        if len(self.coef) != len(FEATURES):
            raise ValueError(f"steptime.coef has {len(self.coef)} values, expected {len(FEATURES)}")
        if not (np.isfinite(self.loop_gap_s) and self.loop_gap_s >= 0):
            raise ValueError(f"steptime.loop_gap_s={self.loop_gap_s} must be finite and >= 0")

    def step_time_s(self, shape: BatchShape) -> float:
        x = np.array(
            [
                1.0,
                shape.num_tok,
                shape.num_decode_req,
                shape.num_prefill_req,
                float(np.sum(shape.decode_context_tok)),
            ]
        )
        return max(float(x @ np.asarray(self.coef)), self.min_step_s) + self.loop_gap_s

    def describe(self) -> dict[str, object]:
        return {
            "kind": "live-fitted",
            "features": list(FEATURES),
            "coef": list(self.coef),
            "loop_gap_s": self.loop_gap_s,
            "min_step_s": self.min_step_s,
            "num_steps_fitted": self.num_steps_fitted,
            "rel_mae": self.rel_mae,
            "source": self.source,
        }


def fit_step_time(
    log: pd.DataFrame, source: str = "", busy_gap_max_s: float = 0.02
) -> FittedStepTime:
    """Fit ``FittedStepTime`` to a step log (rows of experiments/live/steplog)."""
    need = ("t_unix_s", "step_s", "num_tok", "num_req", "num_decode_req", "decode_ctx_tok")
    missing = [c for c in need if c not in log.columns]
    if missing:
        raise ValueError(f"step log {source!r} lacks columns {missing}")
    if len(log) < len(FEATURES) * 4:
        raise ValueError(f"step log {source!r} has {len(log)} steps: too few to fit")
    x = _features(log)
    y = log["step_s"].to_numpy(float)
    coef, *_ = np.linalg.lstsq(x, y, rcond=None)
    pred = np.maximum(x @ coef, y.min())
    rel_mae = float(np.mean(np.abs(pred - y)) / np.mean(y))
    t = log["t_unix_s"].to_numpy(float)
    gaps = t[1:] - t[:-1] - y[:-1]
    busy = gaps[(gaps >= 0) & (gaps < busy_gap_max_s)]
    gap = float(np.median(busy)) if busy.size else 0.0
    return FittedStepTime(
        coef=tuple(float(c) for c in coef),
        loop_gap_s=gap,
        min_step_s=float(y.min()),
        num_steps_fitted=len(log),
        rel_mae=rel_mae,
        source=source,
    )


def describe_fit(model: FittedStepTime) -> dict[str, Any]:
    return dict(model.describe())
