"""An unmeasured tree window (2,2,1 -> T=11) is priced linearly in T between the measured
windows around it (the stated rule), and a window past the measured ones is refused."""

from __future__ import annotations

import numpy as np
import pytest

from capsim.config import SpecDecodeConfig
from capsim.cost.base import BatchShape
from capsim.cost.calibrated import CalibratedStepTime
from capsim.gpus import get_gpu
from capsim.models import get_model


def _decode(n: int, w: int) -> BatchShape:
    z = np.zeros(0, dtype=np.int64)
    return BatchShape(
        num_decode_req=n,
        query_tok_per_decode=w,
        decode_context_tok=np.full(n, 1024),
        prefill_new_tok=z,
        prefill_computed_tok=z,
    )


def _gdn_s(widths: tuple[int, ...], n: int = 64) -> float:
    spec = SpecDecodeConfig(tree_widths=widths)
    m = CalibratedStepTime.from_config(get_model("qwen3.5-35b-a3b"), get_gpu("H200"), 1, spec)
    return m.breakdown_s(_decode(n, spec.window_tok))["gdn"], m.describe()


def test_tree_221_between_measured_windows() -> None:
    chain, d_chain = _gdn_s((1, 1, 1))
    mid, d_mid = _gdn_s((2, 2, 1))
    wide, d_wide = _gdn_s((2, 2, 2))
    assert d_chain["gdn_window_interpolation"] is None
    assert d_wide["gdn_window_interpolation"] is None
    assert "T=11" in str(d_mid["gdn_window_interpolation"])
    assert chain < mid < wide
    # linear in T between the two windows; the fit split holds back some batch points, so
    # the blend is taken on the batch sizes both windows kept (hence not exact here)
    assert mid == pytest.approx(chain + (wide - chain) * (11 - 4) / (15 - 4), rel=0.05)


def test_window_beyond_measured_is_refused() -> None:
    with pytest.raises(ValueError, match=r"cannot interpolate|no attn_decode points"):
        _gdn_s((4, 4, 4))
