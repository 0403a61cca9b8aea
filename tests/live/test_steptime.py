from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from capsim.cost.base import BatchShape
from capsim.live.steptime import fit_step_time


def _log(n: int = 400, seed: int = 0) -> pd.DataFrame:
    rng = np.random.default_rng(seed)
    dec = rng.integers(0, 8, n)
    pre_req = rng.integers(0, 2, n)
    pre_tok = pre_req * rng.integers(1, 400, n)
    ctx = dec * rng.integers(50, 900, n)
    num_tok = dec + pre_tok
    step = 0.003 + 2e-5 * num_tok + 4e-4 * dec + 1e-3 * pre_req + 1e-6 * ctx
    t, ts = 1000.0, []
    for s in step:
        ts.append(t)
        t += s + 0.0007  # the engine loop's gap between steps
    return pd.DataFrame(
        {
            "t_unix_s": ts,
            "step_s": step,
            "num_tok": num_tok,
            "num_req": dec + pre_req,
            "num_decode_req": dec,
            "decode_ctx_tok": ctx,
        }
    )


def test_fit_recovers_coefficients_and_gap() -> None:
    m = fit_step_time(_log())
    assert m.coef == pytest.approx((0.003, 2e-5, 4e-4, 1e-3, 1e-6), rel=1e-6, abs=1e-9)
    assert m.loop_gap_s == pytest.approx(0.0007)
    shape = BatchShape(
        num_decode_req=4,
        query_tok_per_decode=1,
        decode_context_tok=np.array([100] * 4),
        prefill_new_tok=np.array([200]),
        prefill_computed_tok=np.array([0]),
    )
    want = 0.003 + 2e-5 * 204 + 4e-4 * 4 + 1e-3 * 1 + 1e-6 * 400 + 0.0007
    assert m.step_time_s(shape) == pytest.approx(want)
    assert m.describe()["kind"] == "live-fitted"


def test_fit_rejects_short_or_incomplete_logs() -> None:
    with pytest.raises(ValueError, match="too few"):
        fit_step_time(_log(5))
    with pytest.raises(ValueError, match="decode_ctx_tok"):
        fit_step_time(_log().drop(columns=["decode_ctx_tok"]))
