"""Timing and output helpers shared by the kernel benchmarks (run.py, side_by_side.py,
drift.py): CUDA-graph timing with the L2 flushed, the copy-bandwidth floor, atomic CSV and
text writes."""

from __future__ import annotations

import csv
import io
import os
import tempfile
from collections.abc import Callable, Sequence
from pathlib import Path


def atomic_write(path: Path, text: str) -> None:
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=path.name, suffix=".tmp")
    with os.fdopen(fd, "w") as f:
        f.write(text)
    os.replace(tmp, path)


def write_csv(path: Path, rows: list[dict], columns: Sequence[str]) -> None:
    buf = io.StringIO()
    writer = csv.DictWriter(buf, fieldnames=columns, lineterminator="\n")
    writer.writeheader()
    writer.writerows(rows)
    atomic_write(path, buf.getvalue())


def measure_copy_gbps() -> float:
    """Device-to-device copy of 2 GiB, counting bytes read plus bytes written."""
    import torch
    import triton

    n = 1 << 29  # fp32 elements = 2 GiB
    src = torch.randn(n, device="cuda")
    dst = torch.empty_like(src)
    ms = triton.testing.do_bench(lambda: dst.copy_(src), warmup=20, rep=200, return_mode="median")
    return 2 * n * 4 / (ms * 1e-3) / 1e9


def time_graph_us(fn: Callable[[], object], rep_ms: float = 25.0) -> tuple[float, float, float]:
    """p20/p50/p80 in µs of CUDA-graph replays of ``fn`` (compiled and warmed first), over
    ``rep_ms`` of replays (each after an L2 flush)."""
    import torch
    import triton

    fn()
    torch.cuda.synchronize()
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        fn()
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        fn()
    torch.cuda.synchronize()
    q = triton.testing.do_bench(graph.replay, warmup=5, rep=rep_ms, quantiles=[0.2, 0.5, 0.8])
    del graph
    return tuple(1e3 * x for x in q)
