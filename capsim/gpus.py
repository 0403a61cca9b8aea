"""The GPU registry: one entry per GPU, everything capsim knows about it.

``total_memory_bytes`` is what ``torch.cuda.mem_get_info`` reports as total (the quantity
gmu multiplies in vLLM), not the marketing capacity. vLLM's per-GPU behaviour is derived
from the entry, never from the GPU's name elsewhere in capsim:

- the batch-default tier (``vllm_versions.batch_defaults``) from ``total_memory_bytes``
  and ``device_name`` (vLLM's ``EngineArgs.get_batch_defaults`` tests the memory and
  whether the torch device name contains "a100");
- the CUDA-graph capture ceiling (``cudagraph_capture_ceiling``) from
  ``compute_capability`` (vLLM's ``VllmConfig._set_cudagraph_sizes``: 1024 on the SM100
  family, 512 elsewhere);
- whether step times are measured on it or projected (``step_times``), and the SM count
  the kernel benchmarks use for split-KV heuristics.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

from capsim.units import GiB, MiB

StepTimes = Literal["measured", "projected"]


@dataclass(frozen=True, slots=True, kw_only=True)
class GpuSpec:
    name: str = field(metadata={"help": "GPU name (registry key)"})
    device_name: str = field(metadata={"help": "torch.cuda.get_device_name, as vLLM sees it"})
    total_memory_bytes: int = field(metadata={"help": "device memory torch reports as total"})
    hbm_bandwidth_bytes_per_s: float = field(metadata={"help": "peak HBM bandwidth"})
    dense_bf16_flop_per_s: float = field(metadata={"help": "peak dense bf16 tensor FLOP/s"})
    interconnect_bytes_per_s: float = field(
        metadata={"help": "per-GPU NVLink/PCIe bandwidth, one direction (for TP all-reduce)"}
    )
    sm_count: int = field(metadata={"help": "streaming multiprocessors"})
    compute_capability: tuple[int, int] = field(metadata={"help": "CUDA (major, minor)"})
    step_times: StepTimes = field(
        default="projected", metadata={"help": "measured here, or projected from a measured GPU"}
    )
    non_torch_bytes: tuple[int, int] | None = field(
        default=None,
        metadata={
            "help": "vLLM's logged non-torch memory per rank: (tp=1, extra when tp>1: NCCL "
            "and all-reduce buffers); None = unknown (not charged)"
        },
    )
    sources: tuple[str, ...] = field(default=())

    def __post_init__(self) -> None:
        for name in (
            "total_memory_bytes",
            "hbm_bandwidth_bytes_per_s",
            "dense_bf16_flop_per_s",
            "interconnect_bytes_per_s",
            "sm_count",
        ):
            if getattr(self, name) <= 0:
                raise ValueError(f"gpu {self.name!r}: {name}={getattr(self, name)!r} must be > 0")
        if self.step_times not in ("measured", "projected"):
            raise ValueError(f"gpu {self.name!r}: step_times={self.step_times!r} is unknown")

    @property
    def is_sm100_family(self) -> bool:
        """Data-centre Blackwell (B200/B300/GB200): ``is_device_capability_family(100)``."""
        return self.compute_capability[0] == 10

    @property
    def cudagraph_capture_ceiling(self) -> int:
        """vLLM's default largest CUDA-graph capture size (``_set_cudagraph_sizes``)."""
        return 1024 if self.is_sm100_family else 512


# Non-torch memory vLLM logs per rank on an 8-GPU NVSwitch Hopper node, stock vLLM 0.19.0
# (llm-d-planner accuracy logs, experiments/vllm_logs rows llama31-8b-h100-tp1-llmdplanner:
# 0.25 GiB at tp=1, and llama31-8b-h100-tp2-llmdplanner: 2.07 GiB at tp=2, so 1.82 GiB more
# once a TP communicator exists). These two rows are therefore fit rows of the validation.
HOPPER_NVSWITCH_NON_TORCH: tuple[int, int] = (round(0.25 * GiB), round(1.82 * GiB))

GPUS: dict[str, GpuSpec] = {
    g.name: g
    for g in (
        GpuSpec(
            name="B200",
            device_name="NVIDIA B200",
            total_memory_bytes=178 * GiB,
            hbm_bandwidth_bytes_per_s=8.0e12,
            dense_bf16_flop_per_s=2.25e15,
            interconnect_bytes_per_s=900e9,
            sm_count=148,
            compute_capability=(10, 0),
            non_torch_bytes=HOPPER_NVSWITCH_NON_TORCH,
            sources=(
                "non-torch memory: HOPPER_NVSWITCH_NON_TORCH (H100 logs, vLLM 0.19; assumed "
                "for the B200, no B200 log seen)",
                "178 GiB per GPU: SPEC.md s5 (published runs)",
                "8 TB/s HBM3e, 2.25 PFLOP/s dense BF16, NVLink5 1.8 TB/s bidirectional, "
                "148 SMs, sm_100: NVIDIA HGX B200 datasheet / Blackwell tuning guide",
            ),
        ),
        GpuSpec(
            name="H200",
            device_name="NVIDIA H200",
            total_memory_bytes=round(139.80 * GiB),
            hbm_bandwidth_bytes_per_s=4.8e12,
            dense_bf16_flop_per_s=989e12,
            interconnect_bytes_per_s=450e9,
            sm_count=132,
            compute_capability=(9, 0),
            step_times="measured",
            non_torch_bytes=HOPPER_NVSWITCH_NON_TORCH,
            sources=(
                "non-torch memory: HOPPER_NVSWITCH_NON_TORCH (H100 logs, vLLM 0.19; assumed "
                "the same on the H200: same NVSwitch generation)",
                "139.80 GiB: what torch reports as total on the lent H200 (vLLM 0.26.0 log 'Free "
                "memory on device (139.29/139.8 GiB)', REAL_VLLM_H200.md); nvidia-smi's 143771 MiB "
                "(140.40 GiB, device/KINDS.md) is not what gmu multiplies",
                "132 SMs: the split-KV heuristic of kernels/bench/model_ops.py, H200 runs",
                "4.8 TB/s HBM3e, 989 TFLOP/s dense BF16, NVLink4 900 GB/s bidirectional: "
                "NVIDIA H200 datasheet",
            ),
        ),
        GpuSpec(
            name="H100",
            device_name="NVIDIA H100 80GB HBM3",
            total_memory_bytes=round(79.19 * GiB),
            hbm_bandwidth_bytes_per_s=3.35e12,
            dense_bf16_flop_per_s=989e12,
            interconnect_bytes_per_s=450e9,
            sm_count=132,
            compute_capability=(9, 0),
            non_torch_bytes=HOPPER_NVSWITCH_NON_TORCH,
            sources=(
                "79.19 GiB: what torch reports (vLLM 0.19.0 logs 'Free memory on device "
                "(../79.19 GiB)', 21 llm-d-planner start-ups in experiments/vllm_logs); "
                "nvidia-smi's 81559 MiB (79.65 GiB) is not what gmu multiplies",
                "non-torch memory: HOPPER_NVSWITCH_NON_TORCH (vLLM 0.19 logs)",
                "3.35 TB/s HBM3, 989 TFLOP/s dense BF16, 132 SMs: NVIDIA H100 SXM datasheet",
            ),
        ),
        GpuSpec(
            name="A100-80GB",
            device_name="NVIDIA A100-SXM4-80GB",
            total_memory_bytes=81920 * MiB,
            hbm_bandwidth_bytes_per_s=2.039e12,
            dense_bf16_flop_per_s=312e12,
            interconnect_bytes_per_s=300e9,
            sm_count=108,
            compute_capability=(8, 0),
            sources=(
                "81920 MiB: nvidia-smi total on A100-SXM4-80GB (public nvidia-smi outputs)",
                "2.039 TB/s HBM2e, 312 TFLOP/s dense BF16, NVLink3 600 GB/s, 108 SMs: "
                "NVIDIA A100 datasheet",
            ),
        ),
        GpuSpec(
            name="A100-40GB",
            device_name="NVIDIA A100-SXM4-40GB",
            total_memory_bytes=40960 * MiB,
            hbm_bandwidth_bytes_per_s=1.555e12,
            dense_bf16_flop_per_s=312e12,
            interconnect_bytes_per_s=300e9,
            sm_count=108,
            compute_capability=(8, 0),
            sources=(
                "40960 MiB: nvidia-smi total on A100-SXM4-40GB (public nvidia-smi outputs)",
                "1.555 TB/s HBM2, 312 TFLOP/s dense BF16, 108 SMs: NVIDIA A100 datasheet",
            ),
        ),
        GpuSpec(
            name="H20",
            device_name="NVIDIA H20",
            total_memory_bytes=97871 * MiB,
            hbm_bandwidth_bytes_per_s=4.0e12,
            dense_bf16_flop_per_s=148e12,
            interconnect_bytes_per_s=450e9,
            sm_count=78,
            compute_capability=(9, 0),
            sources=(
                "97871 MiB: nvidia-smi total on H20 96GB (public nvidia-smi outputs)",
                "4.0 TB/s HBM3, 148 TFLOP/s dense BF16, 78 SMs: NVIDIA H20 product brief",
            ),
        ),
        GpuSpec(
            name="L40S",
            device_name="NVIDIA L40S",
            total_memory_bytes=46068 * MiB,
            hbm_bandwidth_bytes_per_s=864e9,
            dense_bf16_flop_per_s=362e12,
            interconnect_bytes_per_s=32e9,
            sm_count=142,
            compute_capability=(8, 9),
            sources=(
                "46068 MiB: nvidia-smi total on L40S (public nvidia-smi outputs)",
                "864 GB/s GDDR6, 362 TFLOP/s dense BF16, PCIe Gen4 x16, 142 SMs: "
                "NVIDIA L40S datasheet",
            ),
        ),
        GpuSpec(
            name="RTX4090",
            device_name="NVIDIA GeForce RTX 4090",
            total_memory_bytes=24564 * MiB,
            hbm_bandwidth_bytes_per_s=1.008e12,
            dense_bf16_flop_per_s=165e12,
            interconnect_bytes_per_s=32e9,
            sm_count=128,
            compute_capability=(8, 9),
            sources=(
                "24564 MiB: nvidia-smi total on RTX 4090 (public nvidia-smi outputs)",
                "1.008 TB/s GDDR6X, 165 TFLOP/s dense BF16 (fp32 accumulate), 128 SMs: "
                "NVIDIA Ada whitepaper",
            ),
        ),
        GpuSpec(
            name="RTX5090",
            device_name="NVIDIA GeForce RTX 5090",
            total_memory_bytes=round(31.36 * GiB),
            hbm_bandwidth_bytes_per_s=1.792e12,
            dense_bf16_flop_per_s=209.5e12,
            interconnect_bytes_per_s=64e9,
            sm_count=170,
            compute_capability=(12, 0),
            sources=(
                "31.36 GiB: torch total in vLLM 'Free memory on device (30.86/31.36 GiB)' lines "
                "of RTX 5090 runs (public logs, find_string ids 57676316864, 58820058051)",
                "1.792 TB/s GDDR7, 209.5 TFLOP/s dense BF16, 170 SMs: "
                "NVIDIA Blackwell RTX whitepaper",
            ),
        ),
        GpuSpec(
            name="RTXA5000",
            device_name="NVIDIA RTX A5000",
            total_memory_bytes=24564 * MiB,
            hbm_bandwidth_bytes_per_s=768e9,
            dense_bf16_flop_per_s=111e12,
            interconnect_bytes_per_s=32e9,
            sm_count=64,
            compute_capability=(8, 6),
            sources=(
                "24564 MiB: nvidia-smi total on RTX A5000 (public nvidia-smi outputs; torch's "
                "total is a few hundred MiB lower)",
                "768 GB/s GDDR6, 222 TFLOP/s sparse (111 dense) BF16 tensor, 64 SMs: NVIDIA "
                "RTX A5000 datasheet",
            ),
        ),
        GpuSpec(
            name="RTX3090",
            device_name="NVIDIA GeForce RTX 3090",
            total_memory_bytes=round(23.56 * GiB),
            hbm_bandwidth_bytes_per_s=936e9,
            dense_bf16_flop_per_s=71e12,
            interconnect_bytes_per_s=32e9,
            sm_count=82,
            compute_capability=(8, 6),
            sources=(
                "23.56 GiB: torch total in vLLM 'Free memory on device (x/23.56 GiB)' lines of "
                "24 GB GeForce cards (public logs, find_string id 53104232720; nvidia-smi "
                "says 24576 MiB)",
                "936 GB/s GDDR6X, 71 TFLOP/s dense BF16 (fp32 accumulate), 82 SMs: "
                "NVIDIA Ampere GA102 whitepaper",
            ),
        ),
    )
}

# Aliases: the names vLLM logs and users write for the same registry entry.
ALIASES: dict[str, str] = {
    "A100-SXM4-80GB": "A100-80GB",
    "A100-SXM4-40GB": "A100-40GB",
    "H100-80GB": "H100",
    "RTX-4090": "RTX4090",
    "RTX-5090": "RTX5090",
    "GeForce RTX 4090": "RTX4090",
    "GeForce RTX 5090": "RTX5090",
    "GeForce RTX 3090": "RTX3090",
    "RTX A5000": "RTXA5000",
    "H100 SXM": "H100",
    "H100-SXM": "H100",
}


def measured_gpu() -> GpuSpec:
    """The GPU whose step times are measured (the calibration tables' GPU)."""
    measured = [g for g in GPUS.values() if g.step_times == "measured"]
    if len(measured) != 1:
        raise ValueError(f"gpu registry: exactly one GPU must be measured, got {measured}")
    return measured[0]


def _norm(text: str) -> str:
    return "".join(ch for ch in text.upper() if ch.isalnum())


def get_gpu(name: str) -> GpuSpec:
    """A registry entry by name, alias or torch device name (case and spaces ignored)."""
    key = _norm(name)
    aliases = {_norm(a): b for a, b in ALIASES.items()}
    key = _norm(aliases.get(key, key))
    for gpu in GPUS.values():
        if key in (_norm(gpu.name), _norm(gpu.device_name)):
            return gpu
    raise ValueError(f"gpu={name!r} is unknown: choose one of {sorted(GPUS)}")


def with_total_memory(gpu: GpuSpec, total_memory_bytes: int) -> GpuSpec:
    """The same GPU with the total memory a log reports (a MIG slice, another SKU)."""
    from dataclasses import replace

    return replace(gpu, total_memory_bytes=int(total_memory_bytes))
