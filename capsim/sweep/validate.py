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
    from capsim.memory.memory_plan import plan_memory

    return plan_memory


def validate_points(
    spec: SweepSpec,
    points: Iterable[Point],
    *,
    workloads: Iterable[str] | None = None,
    plan_fn: PlanFn | None = None,
    check_pricing: bool | None = None,
) -> None:
    """Raise one ValueError listing every invalid model / GPU / workload / memory plan, and
    every point the step-time model cannot price (e.g. no calibration for tp=2 or k=1).

    ``check_pricing`` defaults to True with the real memory plan (tests that stub the plan
    pass their own ``plan_fn`` and skip it)."""
    from capsim.cost.factory import build_step_time_model

    if check_pricing is None:
        check_pricing = plan_fn is None
    errors: list[str] = []
    names = frozenset(workloads) if workloads is not None else known_workloads()
    plan = plan_fn or default_plan_fn()
    checked: set[tuple[Any, ...]] = set()
    from capsim.cost.factory import STEP_TIME_MODELS
    from capsim.treeshape import format_tree

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
        where = (
            f"[{c.model} {c.gpu} tp={c.engine.tp} gmu={c.engine.gmu} "
            f"tree={format_tree(c.spec.tree_widths)} k={c.spec.num_spec_tok} {c.spec.commit}] "
        )
        try:
            model = c.engine.model_for(get_model(c.model))
            gpu = get_gpu(c.gpu)
            plan(model, gpu, c.engine, c.spec)
        except ValueError as exc:
            msg = str(exc)
            if not any(msg in e for e in errors):
                errors.append(where + msg)
            continue
        if check_pricing and spec.step_time in STEP_TIME_MODELS:
            # the step-time model is built (tables looked up) before any simulation runs
            try:
                build_step_time_model(c, model, gpu)
            except ValueError as exc:
                msg = str(exc)
                if not any(msg in e for e in errors):
                    errors.append(
                        f"{where}{msg}; fix: price it with step_time = 'roofline' (labelled "
                        "analytical estimate, --step-time roofline) or use a measured "
                        "configuration (docs/calibration.md lists them)"
                    )
    if errors:
        shown = "; ".join(errors[:5])
        more = f"; ... and {len(errors) - 5} more" if len(errors) > 5 else ""
        raise ValueError(f"sweep: invalid grid ({len(errors)} problem(s)): {shown}{more}")
