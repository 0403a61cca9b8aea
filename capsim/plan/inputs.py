"""What a plan is asked: model, traffic, SLOs, search space and search settings.

Every config is a frozen dataclass that validates in ``__post_init__`` and raises one
``ValueError`` naming the field and the value (``plan.<field>=<value>: why``).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

from capsim.commit_modes import COMMIT_MODES
from capsim.gpus import get_gpu

STEP_TIMES: tuple[str, ...] = ("calibrated", "roofline")
FALLBACKS: tuple[str, ...] = ("roofline", "skip")


def _fail(owner: str, name: str, value: object, why: str) -> None:
    raise ValueError(f"{owner}.{name}={value!r}: {why}")


def _pos(value: object) -> bool:
    return (
        isinstance(value, int | float)
        and not isinstance(value, bool)
        and math.isfinite(value)
        and value > 0
    )


@dataclass(frozen=True, slots=True, kw_only=True)
class PlanSlo:
    """Latency targets (seconds; None = no target) and a goodput fraction.

    A replica meets the SLO at a load when every given statistic is at or below its
    target. ``goodput_frac``: the fraction of requests whose own TTFT is within
    ``ttft_p99_s`` (else ``ttft_p50_s``) and own TPOT within ``tpot_mean_s`` (else
    ``tpot_p99_s``) must be at least this (DistServe's goodput definition).
    """

    ttft_p50_s: float | None = field(default=None, metadata={"help": "median TTFT target"})
    ttft_p99_s: float | None = field(default=None, metadata={"help": "p99 TTFT target"})
    tpot_mean_s: float | None = field(default=None, metadata={"help": "mean TPOT target"})
    tpot_p99_s: float | None = field(default=None, metadata={"help": "p99 TPOT target"})
    e2el_p99_s: float | None = field(default=None, metadata={"help": "p99 end-to-end target"})
    goodput_frac: float | None = field(
        default=None, metadata={"help": "least fraction of requests meeting TTFT and TPOT"}
    )

    TARGETS = ("ttft_p50_s", "ttft_p99_s", "tpot_mean_s", "tpot_p99_s", "e2el_p99_s")

    def __post_init__(self) -> None:
        given = [n for n in self.TARGETS if getattr(self, n) is not None]
        if not given:
            _fail("slo", "targets", None, "give at least one of " + ", ".join(self.TARGETS))
        for n in given:
            if not _pos(getattr(self, n)):
                _fail("slo", n, getattr(self, n), "must be a finite time > 0")
        if self.goodput_frac is not None:
            g = self.goodput_frac
            if not (_pos(g) and g <= 1.0):
                _fail("slo", "goodput_frac", g, "must be in (0, 1]")
            if self.ttft_limit_s is None and self.tpot_limit_s is None:
                _fail("slo", "goodput_frac", g, "needs a TTFT or TPOT target")

    @property
    def ttft_limit_s(self) -> float | None:
        return self.ttft_p99_s if self.ttft_p99_s is not None else self.ttft_p50_s

    @property
    def tpot_limit_s(self) -> float | None:
        return self.tpot_mean_s if self.tpot_mean_s is not None else self.tpot_p99_s

    def misses(self, stats: dict[str, Any]) -> list[str]:
        """Names of the targets a run's stats miss (empty: the SLO is met)."""
        out = [
            n
            for n in self.TARGETS
            if getattr(self, n) is not None and not float(stats[n]) <= getattr(self, n)
        ]
        if self.goodput_frac is not None and not stats["goodput_frac"] >= self.goodput_frac:
            out.append("goodput_frac")
        return out

    def describe(self) -> str:
        parts = [
            f"{n[:-2]}<={getattr(self, n) * 1e3:g}ms" for n in self.TARGETS if getattr(self, n)
        ]
        if self.goodput_frac is not None:
            parts.append(f"goodput>={self.goodput_frac:g}")
        return ", ".join(parts)


@dataclass(frozen=True, slots=True, kw_only=True)
class Traffic:
    """Offered traffic: an open-loop rate on a named workload (lengths), or a trace.

    With ``trace=True`` the workload's own timestamps set the rate (its mean) and the
    burstiness (gamma shape fitted by moments to its gaps: 1/CV^2), unless given.
    """

    workload: str = field(default="sharegpt", metadata={"help": "capsim workload name"})
    rate_req_per_s: float | None = field(default=None, metadata={"help": "fleet arrival rate"})
    burstiness: float | None = field(default=None, metadata={"help": "gamma shape (1=Poisson)"})
    trace: bool = field(default=False, metadata={"help": "take rate/burstiness from the trace"})

    def __post_init__(self) -> None:
        if not isinstance(self.workload, str) or not self.workload:
            _fail("traffic", "workload", self.workload, "must be a workload name")
        if self.rate_req_per_s is not None and not _pos(self.rate_req_per_s):
            _fail("traffic", "rate_req_per_s", self.rate_req_per_s, "must be a finite rate > 0")
        if self.rate_req_per_s is None and not self.trace:
            _fail("traffic", "rate_req_per_s", None, "give a rate (req/s) or a trace")
        if self.burstiness is not None and not _pos(self.burstiness):
            _fail("traffic", "burstiness", self.burstiness, "must be a finite number > 0")


def _tuple_of(owner: str, name: str, values: Any, ok: Any, why: str) -> tuple[Any, ...]:
    vals = tuple(values)
    if not vals:
        _fail(owner, name, vals, "is empty: give at least one value")
    for v in vals:
        if not ok(v):
            _fail(owner, name, v, why)
    return tuple(dict.fromkeys(vals))


@dataclass(frozen=True, slots=True, kw_only=True)
class SearchSpace:
    """Every deployment knob the plan may turn (the cross product is the candidate set)."""

    gpus: tuple[str, ...] = ("H100", "H200", "B200")
    tps: tuple[int, ...] = (1, 2, 4, 8)
    gmus: tuple[float, ...] = (0.92,)
    max_num_seqs: tuple[int | None, ...] = (None,)
    max_num_batched_tokens: tuple[int | None, ...] = (None,)
    ks: tuple[int, ...] = (0, 1, 2, 3, 4)
    trees: tuple[tuple[int, ...] | None, ...] = (None,)
    commit_modes: tuple[str, ...] = COMMIT_MODES
    prefix_caching: tuple[bool, ...] = (False,)
    kv_cache_dtypes: tuple[str, ...] = ("bfloat16",)
    max_model_len: int | None = None
    max_replicas: int = 64
    step_time: str = "calibrated"
    fallback: str = "roofline"
    pool: tuple[tuple[str, Any], ...] = ()
    """vLLM pool flags for every candidate, as (EngineConfig field, value) pairs."""

    def __post_init__(self) -> None:
        o = "space"
        gpus = _tuple_of(o, "gpus", self.gpus, lambda g: isinstance(g, str), "must be a name")
        object.__setattr__(self, "gpus", tuple(dict.fromkeys(get_gpu(g).name for g in gpus)))
        is_int = lambda v: isinstance(v, int) and not isinstance(v, bool)  # noqa: E731
        object.__setattr__(
            self,
            "tps",
            _tuple_of(o, "tps", self.tps, lambda v: is_int(v) and v >= 1, "must be >= 1"),
        )
        object.__setattr__(
            self,
            "gmus",
            _tuple_of(o, "gmus", self.gmus, lambda v: _pos(v) and v <= 1, "must be in (0, 1]"),
        )
        for name in ("max_num_seqs", "max_num_batched_tokens"):
            ok = lambda v: v is None or (is_int(v) and v >= 1)  # noqa: E731
            object.__setattr__(
                self, name, _tuple_of(o, name, getattr(self, name), ok, "must be >= 1")
            )
        object.__setattr__(
            self, "ks", _tuple_of(o, "ks", self.ks, lambda v: is_int(v) and 0 <= v <= 64, "0..64")
        )
        ok_tree = lambda t: t is None or (len(t) > 0 and all(is_int(w) and w >= 1 for w in t))  # noqa: E731
        object.__setattr__(
            self,
            "trees",
            _tuple_of(
                o,
                "trees",
                [None if t is None else tuple(t) for t in self.trees],
                ok_tree,
                "bad widths",
            ),
        )
        object.__setattr__(
            self,
            "commit_modes",
            _tuple_of(
                o,
                "commit_modes",
                self.commit_modes,
                lambda m: m in COMMIT_MODES,
                f"one of {COMMIT_MODES}",
            ),
        )
        object.__setattr__(
            self,
            "prefix_caching",
            _tuple_of(
                o, "prefix_caching", self.prefix_caching, lambda v: isinstance(v, bool), "bool"
            ),
        )
        object.__setattr__(
            self,
            "kv_cache_dtypes",
            _tuple_of(
                o, "kv_cache_dtypes", self.kv_cache_dtypes, lambda v: isinstance(v, str), "dtype"
            ),
        )
        if self.max_model_len is not None and not (
            is_int(self.max_model_len) and self.max_model_len >= 16
        ):
            _fail(o, "max_model_len", self.max_model_len, "must be None or an int >= 16")
        if not (is_int(self.max_replicas) and 1 <= self.max_replicas <= 100_000):
            _fail(o, "max_replicas", self.max_replicas, "must be an int in [1, 100000]")
        if self.step_time not in STEP_TIMES:
            _fail(o, "step_time", self.step_time, f"choose one of {STEP_TIMES}")
        if self.fallback not in FALLBACKS:
            _fail(o, "fallback", self.fallback, f"choose one of {FALLBACKS}")


@dataclass(frozen=True, slots=True, kw_only=True)
class SearchSettings:
    """How hard to look: probe lengths, tolerances, headroom, pruning slack, seed."""

    headroom_frac: float = field(
        default=0.2, metadata={"help": "a fleet must meet the SLO at (1 + this) x the rate"}
    )
    probe_min_requests: int = field(default=400, metadata={"help": "requests per probe, at least"})
    probe_duration_s: float = field(
        default=30.0, metadata={"help": "seconds of arrivals per probe"}
    )
    rel_tol: float = field(default=0.05, metadata={"help": "capacity bracket, relative"})
    steady_tol: float = field(
        default=0.10, metadata={"help": "doubling the run may move p99 TTFT by less than this"}
    )
    max_doublings: int = field(
        default=3, metadata={"help": "probe-length doublings to reach steady"}
    )
    frontier_slack: float = field(
        default=1.0,
        metadata={"help": "simulate candidates whose cost bound is within (1+this) x cheapest"},
    )
    wave_size: int = field(default=8, metadata={"help": "candidates per pruning wave"})
    seed: int = field(default=0, metadata={"help": "root seed of every simulation"})
    prune: bool = field(default=True, metadata={"help": "use the analytic bounds"})

    def __post_init__(self) -> None:
        o = "settings"
        if not (isinstance(self.headroom_frac, int | float) and 0 <= self.headroom_frac < 10):
            _fail(o, "headroom_frac", self.headroom_frac, "must be in [0, 10)")
        if not (isinstance(self.probe_min_requests, int) and self.probe_min_requests >= 20):
            _fail(o, "probe_min_requests", self.probe_min_requests, "must be an int >= 20")
        if not _pos(self.probe_duration_s):
            _fail(o, "probe_duration_s", self.probe_duration_s, "must be > 0")
        if not (_pos(self.rel_tol) and self.rel_tol < 1):
            _fail(o, "rel_tol", self.rel_tol, "must be in (0, 1)")
        if not (_pos(self.steady_tol) and self.steady_tol < 1):
            _fail(o, "steady_tol", self.steady_tol, "must be in (0, 1)")
        if not (isinstance(self.max_doublings, int) and 0 <= self.max_doublings <= 6):
            _fail(o, "max_doublings", self.max_doublings, "must be an int in [0, 6]")
        if not (isinstance(self.frontier_slack, int | float) and self.frontier_slack >= 0):
            _fail(o, "frontier_slack", self.frontier_slack, "must be >= 0")
        if not (isinstance(self.wave_size, int) and self.wave_size >= 1):
            _fail(o, "wave_size", self.wave_size, "must be an int >= 1")
        if not (isinstance(self.seed, int) and 0 <= self.seed < 2**63):
            _fail(o, "seed", self.seed, "must be an int in [0, 2**63)")


@dataclass(frozen=True, slots=True, kw_only=True)
class PlanInputs:
    model: str = "qwen3.5-35b-a3b"
    traffic: Traffic
    slo: PlanSlo
    space: SearchSpace = field(default_factory=SearchSpace)
    settings: SearchSettings = field(default_factory=SearchSettings)
    prices_path: str | None = None
