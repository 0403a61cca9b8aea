"""The engine's step period under async scheduling (real vLLM 0.26 on the H200), a fit.

With ``--async-scheduling`` (vLLM 0.26's default on one GPU) the engine keeps two batches in
flight: step n+1 is scheduled and its inputs prepared and launched while step n runs on the
GPU (``v1/engine/core.py:step_with_batch_queue``). The sched-to-sched period of the real
engine's step log is therefore ``max(host launch, GPU)``, not their sum. This model prices
a step as

    period = max(host_s(mode, k), gpu_s),   gpu_s = max(kernel price - kernel_excess_s, 0)

- ``host_s`` by vLLM's CUDA-graph dispatch (``engine_overhead.graph_mode``): FULL graphs
  replay in one launch, so plain decode (k = 0) has no host floor the logs can see; with
  MTP the FULL step has one (drafter inputs, rejection sampler, proposer bookkeeping:
  periods of one request at k = 1 and 3 well above the kernel price), a line in k.
  PIECEWISE and eager (NONE) steps launch their attention / GDN layers from Python: a
  constant each (their loaded and idle periods agree; no dependence on the step's
  requests or new requests shows in the fit runs, stated in PLAN.md 2026-12-02 05:20).
- ``kernel_excess_s``: the calibrated tables price a one-request k = 0 FULL step above its
  real period by a fixed amount; the MoE rows carry Triton stand-ins for vLLM's C++
  ``topk_softmax`` and ``moe_align_block_size`` (timed alone at ~15 us each, 40 MoE layers:
  ~1.24 ms, rows ``moe_standin`` of calibration/data/h200_model_step.csv), the likely source.
  Taken off every step's kernel price.

There is no per-step delta here: the engine work between steps overlaps the GPU (under
``--no-async-scheduling`` the sync model ``HostBoundStepTime`` is used unchanged).
Constants (``MEASURED_H200_VLLM026_ASYNC``) are a **fit**, recomputed by
``capsim.live.engine_period_fit`` from the committed step logs of the runs named in
experiments/engine/PLAN.md (2026-12-02 05:20). One engine build (vLLM 0.26.0, torch 2.11,
H200, Qwen3.5-35B-A3B, dummy weights); ``EngineOverheadFit.check_covers`` guards the rest.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import ClassVar

from capsim.cost.base import BatchShape, StepTimeModel
from capsim.cost.engine_overhead import FULL, PIECEWISE, graph_mode, read_fit_file
from capsim.memory.cudagraph import CaptureDescs


@dataclass(frozen=True, slots=True)
class AsyncPeriodFit:
    """Fitted seconds of the async step-period model."""

    name: str
    kernel_excess_s: float  # off every step's kernel price
    full_spec_host_s: float  # FULL step host floor at k = 1 ...
    full_spec_host_s_per_k: float  # ... + this per draft token above 1 (k >= 1 only)
    piecewise_host_s: float  # PIECEWISE step (a prefill, <= largest capture size)
    eager_host_s: float  # NONE (eager) step
    fit_runs: tuple[str, ...]
    source: str

    def __post_init__(self) -> None:
        for f in (
            "kernel_excess_s",
            "full_spec_host_s",
            "full_spec_host_s_per_k",
            "piecewise_host_s",
            "eager_host_s",
        ):
            v = getattr(self, f)
            if not isinstance(v, float) or v != v or v < 0.0:
                raise ValueError(f"engine period {self.name}: {f}={v!r} must be a float >= 0")

    def full_host_s(self, num_spec_tok: int) -> float:
        """FULL-graph step host floor for k draft tokens (0 at k = 0: none measured)."""
        if num_spec_tok < 0:
            raise ValueError(f"engine period: num_spec_tok={num_spec_tok} must be >= 0")
        if num_spec_tok == 0:
            return 0.0
        return self.full_spec_host_s + self.full_spec_host_s_per_k * (num_spec_tok - 1)


# FIT (experiments/engine/PLAN.md 2026-12-02 05:20, session 4), recomputed by
#   PYTHONPATH=. python3 -m capsim.live.engine_period_fit experiments/engine/runs
# (asserted equal in tests/experiments/test_engine_period.py) from the sched-to-sched periods
# (means, PLAN.md 2026-12-02 05:45) of experiments/engine/runs/{g090_k0_rand_c1, g090_k1_rand_c1,
# g090_k3_rand_c1_steps, g090m16_k3_sg_c64}/steps.csv (vLLM 0.26.0, H200, device calls 3-7).
MEASURED_H200_VLLM026_ASYNC = AsyncPeriodFit(
    name="measured-h200-vllm0.26",
    kernel_excess_s=0.0011230587720466529,  # g090_k0_rand_c1 FULL: kernels - period, 1.12 ms
    full_spec_host_s=0.008023788374205268,  # g090_k1_rand_c1 FULL period, 1 request: 8.02 ms
    full_spec_host_s_per_k=0.001034248887478796,  # (g090_k3_rand_c1_steps 10.09 - 8.02) / 2
    piecewise_host_s=0.07047074380165294,  # g090m16_k3_sg_c64 PIECEWISE periods: 70.5 ms
    eager_host_s=0.1441939207317072,  # NONE periods of the four fit runs (164 steps): 144.2 ms
    fit_runs=("g090_k0_rand_c1", "g090_k1_rand_c1", "g090_k3_rand_c1_steps", "g090m16_k3_sg_c64"),
    source="fit: experiments/engine/runs steps.csv periods, capsim.live.engine_period_fit",
)
# FIT (experiments/engine/PLAN.md 2026-12-04 18:49, session 14): the client round trip of
# vLLM 0.26's API server + `vllm bench serve` on the H200 host (a finished request's output to
# the client, the next request back to the engine's input queue), the constant inside the most
# replacement intervals of g090_k2_sg_c64{,_r2,_r3,_r4}/steps.csv (1,792 replacements, 94-99%
# per run inside). Recomputed by
#   python3 -m capsim.live.client_roundtrip experiments/engine/runs/g090_k2_sg_c64{,_r2,_r3,_r4}
# (asserted equal in tests/live/test_client_roundtrip.py).
CLIENT_ROUND_TRIP_S = 0.0227
ASYNC_PERIODS: dict[str, AsyncPeriodFit] = {
    MEASURED_H200_VLLM026_ASYNC.name: MEASURED_H200_VLLM026_ASYNC
}


def load_async_period(path: str) -> AsyncPeriodFit:
    """A machine's own fit written by ``capsim engine host-fit`` (JSON: the fields of
    ``AsyncPeriodFit`` and ``base``, the registered fit it started from)."""
    raw = read_fit_file(path)
    want = set(AsyncPeriodFit.__dataclass_fields__)
    missing = sorted(want - set(raw))
    if missing:
        raise ValueError(f"engine.engine_overhead={path!r}: the fit lacks {missing}")
    vals = {k: raw[k] for k in want}
    vals["fit_runs"] = tuple(vals["fit_runs"])
    return AsyncPeriodFit(**vals)


def get_async_period(name: str) -> AsyncPeriodFit:
    if name.endswith(".json"):
        return load_async_period(name)
    if name not in ASYNC_PERIODS:
        raise ValueError(
            f"engine.engine_overhead={name!r}: no async step-period fit; choose one of "
            f"{sorted(ASYNC_PERIODS)} or --no-async-scheduling"
        )
    return ASYNC_PERIODS[name]


@dataclass(frozen=True)
class AsyncStepPeriod:
    """``max(host_s(mode, k), kernel price - kernel_excess_s)``: one step's period with the
    next step's host work overlapping this step's GPU work."""

    base: StepTimeModel
    fit: AsyncPeriodFit
    descs: CaptureDescs
    num_spec_tok: int
    # step n's output reaches the client at the end of step n+1 (capsim.engine): the real
    # logs' t_done_s - t_sched_s is the step's period plus the next one's (steps.csv of
    # every logged run, decode and prefill steps alike)
    output_deferred: ClassVar[bool] = True
    # a sent request reaches the scheduler this long after the client sends it (capsim.engine)
    client_round_trip_s: float = CLIENT_ROUND_TRIP_S
    # the API server's ingest queue (a study, off: experiments/engine/PLAN.md 2026-12-04 22:28,
    # ingest_queue_study.py): request i reaches the scheduler no earlier than the previous one
    # plus api_ingest_s + api_ingest_s_per_tok * its prompt tokens
    api_ingest_s: float = 0.0
    api_ingest_s_per_tok: float = 0.0

    def host_s(self, shape: BatchShape) -> float:
        mode = graph_mode(shape, self.descs)
        if mode == FULL:
            return self.fit.full_host_s(self.num_spec_tok)
        if mode == PIECEWISE:
            return self.fit.piecewise_host_s
        return self.fit.eager_host_s

    def gpu_s(self, shape: BatchShape) -> float:
        return max(self.base.step_time_s(shape) - self.fit.kernel_excess_s, 0.0)

    def step_time_s(self, shape: BatchShape) -> float:
        return max(self.host_s(shape), self.gpu_s(shape))

    def _ingest_desc(self) -> dict[str, float]:
        if not (self.api_ingest_s or self.api_ingest_s_per_tok):
            return {}
        return {
            "api_ingest_s": self.api_ingest_s,
            "api_ingest_s_per_tok": self.api_ingest_s_per_tok,
        }

    def describe(self) -> dict[str, object]:
        base = dict(self.base.describe())
        return {
            **base,
            "kind": f"{base.get('kind', '?')} + async step period {self.fit.name} (fit)",
            "engine_period": {**asdict(self.fit), "fit_runs": list(self.fit.fit_runs)},
            "num_spec_tok": self.num_spec_tok,
            "cudagraph_largest_tok": self.descs.largest_tok,
            "client_round_trip_s": self.client_round_trip_s,
            **(
                {
                    "api_ingest_s": self.api_ingest_s,
                    "api_ingest_s_per_tok": self.api_ingest_s_per_tok,
                }
                if self.api_ingest_s or self.api_ingest_s_per_tok
                else {}
            ),
        }
