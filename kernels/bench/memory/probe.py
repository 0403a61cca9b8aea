"""Allocated-memory probe, call measurement, the CSV writer and run bookkeeping."""

from __future__ import annotations

import contextlib
import csv
import gc
import json
import platform
import time
import traceback
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import torch

from .shapes import GpuShape

CSV_COLUMNS = (
    "term",
    "model",
    "tp",
    "max_num_batched_tokens",
    "max_num_seqs",
    "capture_size",
    "bytes",
    "kernel",
    "source",
    "command",
    "date",
)

VLLM_REF = "vLLM 0.33.0 wheel (PyPI vllm-0.33.0-cp38-abi3-manylinux_2_28_x86_64.whl)"


class Probe:
    """Allocated-memory bookkeeping; on CPU every figure is 0 (plumbing check only)."""

    def __init__(self, device: torch.device) -> None:
        self.cuda = device.type == "cuda"

    def sync(self) -> None:
        if self.cuda:
            torch.cuda.synchronize()

    def clean(self) -> None:
        gc.collect()
        if self.cuda:
            torch.cuda.synchronize()
            torch.cuda.empty_cache()

    def allocated(self) -> int:
        return torch.cuda.memory_allocated() if self.cuda else 0

    def reset_peak(self) -> None:
        if self.cuda:
            torch.cuda.reset_peak_memory_stats()

    def peak(self) -> int:
        return torch.cuda.max_memory_allocated() if self.cuda else 0

    def free(self) -> int:
        return torch.cuda.mem_get_info()[0] if self.cuda else 0

    def reserved(self) -> int:
        return torch.cuda.memory_reserved() if self.cuda else 0


def measure_call(probe: Probe, run: Callable[[], Any], warmup: bool = True) -> dict[str, int]:
    """Run ``run`` (once to compile/autotune, then measured); inputs already allocated.

    Returns base (inputs), peak, held (outputs still referenced) and transient
    (peak - base - held) in bytes.
    """
    if warmup:
        out = run()
        probe.sync()
        del out
        probe.clean()
    base = probe.allocated()
    probe.reset_peak()
    out = run()
    probe.sync()
    peak = probe.peak()
    held = probe.allocated() - base
    del out
    return {
        "base": base,
        "peak": peak,
        "held": held,
        "transient": peak - base - held,
        "peak_over_base": peak - base,
    }


# ----------------------------------------------------------------------------- terms


def randn(
    *shape: int, dtype: torch.dtype, device: torch.device, scale: float = 1.0
) -> torch.Tensor:
    return (scale * torch.randn(*shape, device=device, dtype=torch.float32)).to(dtype)


class Writer:
    """Appends rows to the CSV as they are measured (a crash keeps what was written)."""

    def __init__(self, out: Path, command: str, date: str) -> None:
        self.path = out / "h200_memory_terms.csv"
        self.command, self.date = command, date
        with self.path.open("w", newline="") as f:
            csv.writer(f).writerow(CSV_COLUMNS)

    def row(
        self,
        term: str,
        s: GpuShape,
        *,
        tokens: int = 0,
        seqs: int = 0,
        capture: int = 0,
        nbytes: int,
        kernel: str,
        source: str,
    ) -> None:
        values = (
            term,
            s.model,
            s.tp,
            tokens,
            seqs,
            capture,
            int(nbytes),
            kernel,
            source,
            self.command,
            self.date,
        )
        with self.path.open("a", newline="") as f:
            csv.writer(f).writerow(values)
        print(
            f"{term:32s} {s.model:18s} tp{s.tp} tok={tokens:6d} seqs={seqs:5d} cap={capture:4d} "
            f"{nbytes / 2**20:10.1f} MiB",
            flush=True,
        )


def _versions() -> dict[str, Any]:
    import triton

    info: dict[str, Any] = {
        "python": platform.python_version(),
        "torch": torch.__version__,
        "triton": triton.__version__,
        "cuda_runtime": torch.version.cuda,
    }
    try:
        import fla

        info["fla_core"] = getattr(fla, "__version__", "unknown")
    except Exception:
        info["fla_core"] = None
    if torch.cuda.is_available():
        p = torch.cuda.get_device_properties(0)
        info.update(gpu=p.name, gpu_total_bytes=p.total_memory, sms=p.multi_processor_count)
        with contextlib.suppress(Exception):
            import subprocess

            info["driver"] = subprocess.run(
                ["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"],
                capture_output=True,
                text=True,
                timeout=20,
            ).stdout.strip()
    return info


def _write_json(path: Path, payload: dict[str, Any]) -> None:
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(payload, indent=1, sort_keys=True, default=str))
    tmp.replace(path)


@contextlib.contextmanager
def _step(name: str, details: dict[str, Any], errors: list[str]) -> Iterator[None]:
    t0 = time.time()
    try:
        yield
    except Exception as exc:
        errors.append(f"{name}: {exc!r}")
        traceback.print_exc()
        print(f"FAILED {name}: {exc!r}", flush=True)
    finally:
        details.setdefault("_seconds", {})[name] = round(time.time() - t0, 2)
        gc.collect()
        if torch.cuda.is_available():
            torch.cuda.empty_cache()
