"""One GPU registry: every entry is complete and sourced, and the rest of capsim reads it."""

from __future__ import annotations

import pytest

from capsim.cost import calibrated
from capsim.gpus import GPUS, get_gpu, measured_gpu


def test_every_gpu_is_sourced_and_complete() -> None:
    for gpu in GPUS.values():
        assert gpu.sources, gpu.name
        assert gpu.sm_count > 0 and gpu.total_memory_bytes > 0
        assert gpu.step_times in ("measured", "projected")


def test_exactly_one_measured_gpu_and_calibration_uses_it() -> None:
    assert measured_gpu().name == "H200"
    assert measured_gpu().name == calibrated.MEASURED_GPU


@pytest.mark.parametrize(
    ("text", "name"),
    [
        ("rtx 3090", "RTX3090"),
        ("NVIDIA GeForce RTX 4090", "RTX4090"),
        ("A100-SXM4-40GB", "A100-40GB"),
        ("h200", "H200"),
    ],
)
def test_lookup_by_name_alias_or_device_name(text: str, name: str) -> None:
    assert get_gpu(text).name == name


def test_ambiguous_or_unknown_names_fail_naming_the_value() -> None:
    with pytest.raises(ValueError, match="gpu='A100' is unknown"):
        get_gpu("A100")


def test_capture_ceiling_from_compute_capability() -> None:
    assert get_gpu("B200").cudagraph_capture_ceiling == 1024
    assert get_gpu("RTX5090").cudagraph_capture_ceiling == 512  # sm_120 is not SM100
    assert get_gpu("H100").cudagraph_capture_ceiling == 512
