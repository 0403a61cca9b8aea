"""GPU facts used by the memory plan and the analytical step-time model.

``total_memory_bytes`` is what ``torch.cuda.mem_get_info`` reports as total (the
quantity gmu multiplies in vLLM), not the marketing capacity.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from capsim.units import GiB, MiB


@dataclass(frozen=True, slots=True, kw_only=True)
class GpuSpec:
    name: str = field(metadata={"help": "GPU name"})
    total_memory_bytes: int = field(metadata={"help": "device memory torch reports as total"})
    hbm_bandwidth_bytes_per_s: float = field(metadata={"help": "peak HBM bandwidth"})
    dense_bf16_flop_per_s: float = field(metadata={"help": "peak dense bf16 tensor FLOP/s"})
    interconnect_bytes_per_s: float = field(
        metadata={"help": "per-GPU NVLink bandwidth, one direction (for TP all-reduce)"}
    )
    sources: tuple[str, ...] = field(default=())

    def __post_init__(self) -> None:
        for name in (
            "total_memory_bytes",
            "hbm_bandwidth_bytes_per_s",
            "dense_bf16_flop_per_s",
            "interconnect_bytes_per_s",
        ):
            if getattr(self, name) <= 0:
                raise ValueError(f"gpu {self.name!r}: {name}={getattr(self, name)!r} must be > 0")


GPUS: dict[str, GpuSpec] = {
    "B200": GpuSpec(
        name="B200",
        total_memory_bytes=178 * GiB,
        hbm_bandwidth_bytes_per_s=8.0e12,
        dense_bf16_flop_per_s=2.25e15,
        interconnect_bytes_per_s=900e9,
        sources=(
            "178 GiB per GPU: SPEC.md s5 (published runs)",
            "8 TB/s HBM3e, 2.25 PFLOP/s dense BF16 (4.5 sparse), NVLink5 1.8 TB/s "
            "bidirectional: NVIDIA HGX B200 datasheet",
        ),
    ),
    "H200": GpuSpec(
        name="H200",
        total_memory_bytes=143771 * MiB,
        hbm_bandwidth_bytes_per_s=4.8e12,
        dense_bf16_flop_per_s=989e12,
        interconnect_bytes_per_s=450e9,
        sources=(
            "143771 MiB: nvidia-smi on the lent H200 (device/KINDS.md, 2026-10-27)",
            "4.8 TB/s HBM3e, 989 TFLOP/s dense BF16, NVLink4 900 GB/s bidirectional: "
            "NVIDIA H200 datasheet",
        ),
    ),
    "H100": GpuSpec(
        name="H100",
        total_memory_bytes=81559 * MiB,
        hbm_bandwidth_bytes_per_s=3.35e12,
        dense_bf16_flop_per_s=989e12,
        interconnect_bytes_per_s=450e9,
        sources=(
            "81559 MiB: nvidia-smi total on H100 SXM 80GB (public nvidia-smi outputs)",
            "3.35 TB/s HBM3, 989 TFLOP/s dense BF16: NVIDIA H100 SXM datasheet",
        ),
    ),
}


def get_gpu(name: str) -> GpuSpec:
    key = name.upper()
    if key not in GPUS:
        raise ValueError(f"gpu={name!r} is unknown: choose one of {sorted(GPUS)}")
    return GPUS[key]
