"""CUDA-graph timing of operator copies (host clock off CUDA), the host round trip, and the
row writer of the step-operator benchmark."""

from __future__ import annotations

import csv
import time
from collections.abc import Callable, Iterable
from pathlib import Path

import numpy as np
import torch


def _percentiles(samples_us: list[float]) -> tuple[float, float, float]:
    p20, p50, p80 = np.percentile(np.asarray(samples_us), [20, 50, 80])
    return float(p20), float(p50), float(p80)


def time_calls(
    fns: list[Callable[[], object]], replays: int, *, graph: bool = True
) -> tuple[str, tuple]:
    """Per-call time of ``fns`` run back to back: CUDA graph replays, else eager/host.

    ``graph=False`` times eager launches between events (prefill kernels, which vLLM
    runs outside CUDA graphs at large token counts, and kernels with host-side logic).
    """
    if torch.cuda.is_available():
        side = torch.cuda.Stream()
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):
            for f in fns:  # warm-up: lazy init, autotune, handles
                f()
        torch.cuda.current_stream().wait_stream(side)
        torch.cuda.synchronize()

        def run():
            for f in fns:
                f()

        how = "cuda_eager"
        if graph:
            cuda_graph = torch.cuda.CUDAGraph()
            with torch.cuda.graph(cuda_graph):
                for f in fns:
                    f()
            run, how = cuda_graph.replay, "cuda_graph"
        run()
        torch.cuda.synchronize()
        samples = []
        for _ in range(replays):
            start = torch.cuda.Event(enable_timing=True)
            end = torch.cuda.Event(enable_timing=True)
            start.record()
            run()
            end.record()
            end.synchronize()
            samples.append(start.elapsed_time(end) * 1e3 / len(fns))
        return how, _percentiles(samples)
    for f in fns:
        f()
    samples = []
    for _ in range(replays):
        t0 = time.perf_counter()
        for f in fns:
            f()
        samples.append((time.perf_counter() - t0) * 1e6 / len(fns))
    return "cpu_host", _percentiles(samples)


def time_host_roundtrip(m: int, replays: int, dev: str) -> tuple[str, tuple]:
    """Per-step host round trip: replay a 1-kernel graph, copy m sampled ids, sync.

    This is the part of vLLM's per-step host work that stays on the critical path with
    async scheduling (VLLM.md s5: the scheduler overlaps the GPU step).
    """
    tokens = torch.zeros(m, dtype=torch.int64, device=dev)
    if dev == "cuda":
        host = torch.empty(m, dtype=torch.int64, pin_memory=True)
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            tokens.add_(1)
        for _ in range(10):
            graph.replay()
        torch.cuda.synchronize()

        def step():
            graph.replay()
            host.copy_(tokens, non_blocking=True)
            torch.cuda.synchronize()

    else:

        def step():
            tokens.add_(1)
            tokens.cpu()

    samples = []
    for _ in range(replays):
        t0 = time.perf_counter()
        step()
        samples.append((time.perf_counter() - t0) * 1e6)
    return "host_clock", _percentiles(samples)


# ------------------------------------------------------------------------------ points
class Writer:
    """Appends rows to a CSV and flushes each one (a killed run keeps what it measured)."""

    def __init__(self, path: Path, columns: Iterable[str], append: bool = False) -> None:
        self.columns = tuple(columns)
        header = not (append and path.is_file() and path.stat().st_size > 0)
        self.fh = path.open("a" if not header else "w", newline="")
        self.csv = csv.DictWriter(self.fh, fieldnames=self.columns)
        if header:
            self.csv.writeheader()
        self.rows = 0

    def write(self, row: dict) -> None:
        self.csv.writerow({c: row.get(c, 0) for c in self.columns})
        self.fh.flush()
        self.rows += 1

    def close(self) -> None:
        self.fh.close()


def _row(op, key, how, pct, *, flops, bytes_, copies, impl="torch", **dims) -> dict:
    p20, p50, p80 = pct
    row = {"op": op, "key": key, "impl": impl, "timing": how, "copies": copies}
    row.update({"flops": f"{flops:.6g}", "bytes": f"{bytes_:.6g}"})
    row.update({"p20_us": f"{p20:.3f}", "p50_us": f"{p50:.3f}", "p80_us": f"{p80:.3f}"})
    row.update(dims)
    return row


def _free() -> None:
    if torch.cuda.is_available():
        torch.cuda.empty_cache()
