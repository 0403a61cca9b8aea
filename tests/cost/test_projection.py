import pytest

from capsim.cost.projection import HardwareProjection, class_fixed_us
from capsim.gpus import GPUS

H200_TO_B200 = HardwareProjection(source=GPUS["H200"], target=GPUS["B200"])


def test_memory_bound_point_scales_by_bandwidth():
    # 1 GB read, 1 MFLOP: memory-bound on both
    ratio = H200_TO_B200.floor_ratio(1e6, 1e9)
    assert ratio == pytest.approx(4.8e12 / 8.0e12)


def test_compute_bound_point_scales_by_flops():
    ratio = H200_TO_B200.floor_ratio(1e15, 1e6)
    assert ratio == pytest.approx(989e12 / 2.25e15)


def test_fixed_part_and_host_do_not_scale():
    t = H200_TO_B200.project_us("gemm", 110.0, 0.0, 1e9, fixed_us=10.0)
    assert t == pytest.approx(10.0 + 100.0 * 0.6)
    assert H200_TO_B200.project_us("gemm", 5.0, 0.0, 1e9, fixed_us=10.0) == 5.0
    assert H200_TO_B200.project_us("host", 25.0, 0.0, 8.0, fixed_us=1.0) == 25.0


def test_h100_is_slower_where_memory_bound():
    h100 = HardwareProjection(source=GPUS["H200"], target=GPUS["H100"])
    assert h100.project_us("moe", 500.0, 1e6, 1e9, fixed_us=50.0) > 500.0
    assert "PROJECTION H200->H100" in h100.label


def test_class_fixed_is_the_fastest_call_per_class():
    rows = [{"op": "a", "p50_us": 3.0}, {"op": "a", "p50_us": 2.0}, {"op": "b", "p50_us": 7.0}]
    assert class_fixed_us(rows) == {"a": 2.0, "b": 7.0}


def test_negative_times_are_refused():
    with pytest.raises(ValueError, match="t_us=-1"):
        H200_TO_B200.project_us("gemm", -1.0, 0.0, 1.0, fixed_us=0.0)
