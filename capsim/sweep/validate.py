"""Fail-fast checks of a sweep before any simulation runs.

Every problem of the grid is collected and reported in one ``ValueError``: unknown
models, GPUs or workloads, and deployments whose memory plan vLLM would refuse to start
(e.g. a gmu below the weights). The output directory is checked separately by the store.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

from capsim.gpus import get_gpu
from capsim.models import get_model
from capsim.sweep.grid import Point, SweepSpec

PlanFn = Callable[..., Any]


def known_workloads() -> frozenset[str]:
    """Workload names capsim.traces can load."""
    from capsim.traces import WORKLOADS

    return frozenset(WORKLOADS)


def default_plan_fn() -> PlanFn:
    from capsim.core.memory_plan import plan_memory

    return plan_memory


def validate_points(
    spec: SweepSpec,
    points: Iterable[Point],
    *,
    workloads: Iterable[str] | None = None,
    plan_fn: PlanFn | None = None,
) -> None:
    """Raise one ValueError listing every invalid model / GPU / workload / memory plan."""
    errors: list[str] = []
    names = frozenset(workloads) if workloads is not None else known_workloads()
    plan = plan_fn or default_plan_fn()
    checked: set[tuple[Any, ...]] = set()
    from capsim.cost.factory import STEP_TIME_MODELS

    if spec.step_time not in STEP_TIME_MODELS:
        errors.append(f"step_time={spec.step_time!r} is unknown: choose one of {STEP_TIME_MODELS}")
    for p in points:
        c = p.cfg
        if c.workload.partition("+sys=")[0] not in names:
            msg = f"workload={c.workload!r} is unknown: choose one of {sorted(names)}"
            if msg not in errors:
                errors.append(msg)
        key = (c.model, c.gpu, c.engine.tp, c.engine.gmu, c.spec.tree_widths, c.spec.commit)
        if key in checked:
            continue
        checked.add(key)
        try:
            model = get_model(c.model)
            gpu = get_gpu(c.gpu)
            plan(model, gpu, c.engine, c.spec)
        except ValueError as exc:
            msg = str(exc)
            where = (
                f"[{c.model} {c.gpu} tp={c.engine.tp} gmu={c.engine.gmu} "
                f"tree={c.spec.tree_widths} {c.spec.commit}] "
            )
            if not any(msg in e for e in errors):
                errors.append(where + msg)
    if errors:
        shown = "\n  ".join(errors[:20])
        more = f"\n  ... and {len(errors) - 20} more" if len(errors) > 20 else ""
        raise ValueError(f"sweep: invalid grid ({len(errors)} problem(s)):\n  {shown}{more}")
