"""Host memory a simulation will need, estimated before it runs, and the refusal when it
cannot fit.

The estimate adds what the run must hold, from the sizes of its arrays (not fitted):

- per request, with the requests table or not streaming: the workload table (prompt,
  output: 2 x int64, a source-id pointer), release times, the engine's per-request stamps
  and final counters (send, first scheduled, first token, last token, finish,
  preemptions, cached tokens, draws used: 8 x 8 bytes) and the acceptance bookkeeping
  (offsets, step counts, used: 3 x 8);
- per request, streaming without the requests table (compact): the finished requests'
  four latencies and steady flag (``RequestResults``, 33 bytes) and the prompt/output
  counts as int16 (4 bytes); the workload table (24 bytes) is held while it loads, so
  the larger of the two counts;
- exact path only: every request's pre-drawn acceptance values (int64 per verify step,
  plus the float32 uniforms they are drawn from while drawing) and every inter-token
  latency (8 bytes per verify step);
- with the requests table kept: 14 columns x 8 bytes plus a request id string;
- per engine step: 128 bytes with the step table kept (twice that while the table is
  built), 32 bytes otherwise (``StepColumns``; 16 when compact), 16 bytes of ITL runs
  when streaming.

The step count is taken as the fewest steps the run could take (every step a full batch
of ``min(max_num_seqs, pool capacity)`` requests), so the estimate is a LOWER bound: a
refusal means the run surely does not fit. ``BASE_BYTES`` is the interpreter with numpy,
pandas, simpy and capsim imported and a small run done (measured, docs/reliability.md).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

BASE_BYTES = 180 * 2**20
"""RSS of ``capsim simulate -n 5000`` (sharegpt, B200, rate 20): 180,804 KiB measured with
``/usr/bin/time -v`` on 2026-12-01 (docs/reliability.md)."""
PER_REQUEST_BYTES = 16 + 8 + 8 + 8 * 8 + 3 * 8
"""Workload table, release time, engine stamps and counters, acceptance bookkeeping."""
COMPACT_PER_REQUEST_BYTES = max(4 * 8 + 1 + 2 * 2, 16 + 8)
"""Compact: ``RequestResults`` (4 float64 + a bool) and int16 prompt/output, or the
workload table while it loads (2 x int64 + a pointer), whichever is larger."""
REQUEST_ROW_BYTES = 14 * 8 + 64
"""The requests table: 14 eight-byte columns and a ``r<i>`` id string (~56 B + pointer)."""
STEP_ROW_BYTES = 16 * 8
STEP_COLUMNS_BYTES = 4 * 8
COMPACT_STEP_COLUMNS_BYTES = 2 * 8
ITL_RUN_BYTES = 16


@dataclass(frozen=True, slots=True, kw_only=True)
class Footprint:
    """A lower bound on a run's host memory, by part (bytes)."""

    base_bytes: int
    requests_bytes: int
    acceptance_bytes: int
    itl_bytes: int
    steps_bytes: int
    table_bytes: int

    @property
    def total_bytes(self) -> int:
        return (
            self.base_bytes
            + self.requests_bytes
            + self.acceptance_bytes
            + self.itl_bytes
            + self.steps_bytes
            + self.table_bytes
        )

    def describe(self) -> str:
        gib = 2**30
        parts = (
            ("base", self.base_bytes),
            ("per-request", self.requests_bytes),
            ("acceptance draws", self.acceptance_bytes),
            ("inter-token latencies", self.itl_bytes),
            ("steps", self.steps_bytes),
            ("requests table", self.table_bytes),
        )
        return ", ".join(f"{name} {b / gib:.2f}" for name, b in parts if b)


def estimate_footprint(
    *,
    num_requests: int,
    mean_output_tok: float,
    tokens_per_step: float,
    depth: int,
    max_batch: int,
    streaming: bool,
    keep_requests: bool,
    keep_steps: bool,
    compact: bool = False,
) -> Footprint:
    """Lower bound on the host memory of one run (see the module docstring)."""
    n = int(num_requests)
    verify_steps = n * (1.25 * mean_output_tok / max(tokens_per_step, 1.0) + 8)
    emissions = n * mean_output_tok / max(tokens_per_step, 1.0)
    num_steps = emissions / max(max_batch, 1)
    if streaming:
        acceptance = 0  # a window of chunks: bounded
        itl = num_steps * ITL_RUN_BYTES
    else:
        acceptance = verify_steps * (8 + 4 * max(depth, 0) + 1) if depth else 8 * n
        itl = emissions * 8
    if keep_steps:
        per_step = 2 * STEP_ROW_BYTES
    else:
        per_step = COMPACT_STEP_COLUMNS_BYTES if compact else STEP_COLUMNS_BYTES
    steps = num_steps * per_step
    return Footprint(
        base_bytes=BASE_BYTES,
        requests_bytes=n * (COMPACT_PER_REQUEST_BYTES if compact else PER_REQUEST_BYTES),
        acceptance_bytes=int(acceptance),
        itl_bytes=int(itl),
        steps_bytes=int(steps),
        table_bytes=n * REQUEST_ROW_BYTES if keep_requests else 0,
    )


def check_fits(footprint: Footprint, available_bytes: int | None, what: str) -> None:
    """ValueError naming the numbers when the run cannot fit in ``available_bytes``."""
    if available_bytes is None or footprint.total_bytes <= available_bytes:
        return
    gib = 2**30
    raise ValueError(
        f"{what} needs at least {footprint.total_bytes / gib:.2f} GiB of host memory "
        f"({footprint.describe()} GiB) but {available_bytes / gib:.2f} GiB is available; "
        "use fewer requests, or stream it (--streaming: no per-request or per-step table "
        "kept, the default above 200000 requests)"
    )


def available_memory_bytes(meminfo: Path = Path("/proc/meminfo")) -> int | None:
    """``MemAvailable`` (and the cgroup limit, when lower), or None where unknown."""
    avail: int | None = None
    try:
        for line in meminfo.read_text().splitlines():
            if line.startswith("MemAvailable:"):
                avail = int(line.split()[1]) * 1024
                break
    except (OSError, ValueError, IndexError):
        avail = None
    try:
        raw = Path("/sys/fs/cgroup/memory.max").read_text().strip()
        used = int(Path("/sys/fs/cgroup/memory.current").read_text().strip())
        if raw != "max":
            left = int(raw) - used
            avail = left if avail is None else min(avail, left)
    except (OSError, ValueError):
        pass
    return avail if avail is None or avail > 0 else 0
