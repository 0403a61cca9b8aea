import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from capsim.calibration.interp import Curve, Sheet, curve_sum


def test_curve_hits_points_and_interpolates_linearly():
    c = Curve.from_points("t", [4, 1, 16], [40.0, 10.0, 100.0])
    assert c(1) == 10.0 and c(4) == 40.0 and c(16) == 100.0
    assert c(2.5) == pytest.approx(25.0)
    assert c(10) == pytest.approx(40.0 + 60.0 * 6 / 12)


def test_curve_clamps_below_and_refuses_above():
    c = Curve.from_points("gemm/n/k", [8, 64], [5.0, 9.0])
    assert c(1) == 5.0
    with pytest.raises(ValueError, match=r"gemm/n/k: 65 is above the measured grid \[8, 64\]"):
        c(65)


def test_curve_proportional_rule_above():
    c = Curve.from_points("v", [1, 256], [10.0, 700.0], above="proportional")
    assert c(512) == pytest.approx(1400.0)


@pytest.mark.parametrize(
    ("xs", "ys", "match"),
    [
        ([1, 1], [1.0, 2.0], "strictly increasing"),
        ([1, 2], [1.0, -2.0], ">= 0"),
        ([], [], "non-empty"),
    ],
)
def test_curve_rejects_bad_points(xs, ys, match):
    with pytest.raises(ValueError, match=match):
        Curve("bad", tuple(xs), tuple(ys))


@settings(max_examples=50, deadline=None)
@given(st.floats(min_value=1.0, max_value=100.0), st.floats(min_value=0.1, max_value=3.0))
def test_curve_sum_equals_sum_of_parts(x, w):
    a = Curve.from_points("a", [1, 10, 100], [1.0, 5.0, 50.0])
    b = Curve.from_points("b", [1, 3, 30, 100], [2.0, 2.5, 9.0, 70.0])
    s = curve_sum("s", [(w, a), (1.0, b)])
    assert s(x) == pytest.approx(w * a(x) + b(x), rel=1e-12)


def test_sheet_is_bilinear_between_curves():
    c1 = Curve.from_points("b1", [0, 100], [0.0, 100.0])
    c4 = Curve.from_points("b4", [0, 100], [0.0, 400.0])
    sheet = Sheet("s", (1.0, 4.0), (c1, c4))
    assert sheet(2.0, 50.0) == pytest.approx(100.0)  # t = batch * ctx, exact
    assert sheet(0.5, 50.0) == pytest.approx(50.0)  # clamp below the batch grid
    with pytest.raises(ValueError, match="above the measured grid"):
        sheet(5.0, 10.0)
    assert np.isfinite(sheet(4.0, 100.0))
