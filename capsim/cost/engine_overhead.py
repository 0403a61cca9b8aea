"""The engine's own per-step cost by CUDA-graph mode (real vLLM 0.26 on the H200), a fit.

capsim's calibrated step model prices the GPU kernels of a step. The real engine also spends
host time launching them, and how much depends on how vLLM 0.26 dispatches the batch
(``v1/cudagraph_dispatcher.py``, mode FULL_AND_PIECEWISE for hybrids):

- **FULL**: a pure-decode (uniform) batch within the FULL capture sizes replays one graph.
- **PIECEWISE**: a batch with a prefill, at most the largest capture size (512 tokens on the
  H200): graph pieces between eager attention / GDN layers (their Triton launches from Python).
- **NONE**: above the largest capture size the whole forward runs eager.

Launches overlap the GPU work they queue, so a step costs ``max(kernel price, host_s(mode))
+ delta``, ``delta`` being the per-step engine work between steps (scheduling, input
preparation, output processing). Constants (``MEASURED_H200_VLLM026``) are a **fit**
(experiments/engine/PLAN.md, 2026-12-01, the addition stamped 23:35, written 23:10): delta from
the mean TPOT of one idle-engine run, the host terms from the first-step latency of three
concurrency-1 runs (vLLM's step log, ``t_done_s - t_sched_s``); ``capsim.live.engine_fit``
recomputes them from the committed files.
They describe one engine build (vLLM 0.26.0, torch 2.11, H200, Qwen3.5-35B-A3B, dummy
weights, Triton GDN prefill); another release, GPU, host CPU or model is not covered.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

from capsim.cost.base import BatchShape, StepTimeModel
from capsim.memory.cudagraph import CaptureDescs

FULL, PIECEWISE, NONE = "FULL", "PIECEWISE", "NONE"


@dataclass(frozen=True, slots=True)
class EngineOverheadFit:
    """Fitted host / engine seconds per step by CUDA-graph mode."""

    name: str
    delta_s: float  # every step: engine work between steps
    piecewise_host_s: float  # PIECEWISE batch (with a prefill, <= largest capture size)
    eager_host_s: float  # NONE batch: intercept ...
    eager_host_s_per_tok: float  # ... + this per token of the step
    fit_runs: tuple[str, ...]
    source: str
    covers: tuple[str, str, str, int]  # (model, GPU, vLLM release, tp) the fit was made on

    def __post_init__(self) -> None:
        for f in ("delta_s", "piecewise_host_s", "eager_host_s", "eager_host_s_per_tok"):
            v = getattr(self, f)
            if not isinstance(v, float) or v != v:
                raise ValueError(f"engine overhead {self.name}: {f}={v!r} must be a float")

    def check_covers(self, model: str, gpu: str, vllm_version: str, tp: int) -> None:
        """Refuse a deployment other than the one the constants were measured on."""
        want_model, want_gpu, want_release, want_tp = self.covers
        got = {"model": model, "gpu": gpu, "vllm_version": vllm_version, "tp": tp}
        ok = {
            "model": model == want_model,
            "gpu": gpu.upper() == want_gpu.upper(),
            "vllm_version": vllm_version.split(".")[:2] == want_release.split(".")[:2],
            "tp": tp == want_tp,
        }
        for name, good in ok.items():
            if not good:
                raise ValueError(
                    f"engine.engine_overhead={self.name!r}: a fit of {want_model} on "
                    f"{want_gpu}, vLLM {want_release}, tp {want_tp}; got {name}={got[name]!r}"
                )


# FIT (PLAN.md 2026-12-01, the addition stamped 23:35, written 23:10), recomputed by
# `capsim.live.engine_fit.fit_engine_overhead` (asserted equal in
# tests/experiments/test_engine_out_of_sample.py) with
#   PYTHONPATH=. python3 -m capsim.live.engine_fit experiments/engine/runs
# from experiments/engine/runs/{g090_k3_rand_c1_steps,g090_k3_in128_c1,g090_k3_in4096_c1}/
# (vLLM 0.26.0, H200, recorded 2026-12-01 22:44-22:53 UTC, device call 3); refitted on the
# round-6 rerun's step tables (2026-12-02 00:30 UTC, same runs, same command), and on the
# round-7 tables (2026-12-02 03:20 UTC, kernels call 8: same runs, same command), and on the
# round-8 tables (2026-12-02 06:45 UTC, kernels call 13: same runs, same command), and on the
# round-9 tables (ingested 2026-12-02 session 6, kernels call 17: same runs, same command).
MEASURED_H200_VLLM026 = EngineOverheadFit(
    name="measured-h200-vllm0.26",
    delta_s=0.001845473247086207,  # 1.85 ms: mean TPOT of g090_k3_rand_c1_steps
    piecewise_host_s=0.07582052675291383,  # 75.8 ms: g090_k3_in128_c1 (128-token first step)
    eager_host_s=0.14473936008624766,  # 144.7 ms + 4.54 us/tok: 1024 tok (g090_k3_rand_c1_steps)
    eager_host_s_per_tok=4.535807291666486e-06,  # and 4096 tok (g090_k3_in4096_c1)
    fit_runs=("g090_k3_rand_c1_steps", "g090_k3_in128_c1", "g090_k3_in4096_c1"),
    source="fit: experiments/engine/runs (device call 3), capsim.live.engine_fit",
    covers=("qwen3.5-35b-a3b", "H200", "0.26", 1),
)
ENGINE_OVERHEADS: dict[str, EngineOverheadFit] = {MEASURED_H200_VLLM026.name: MEASURED_H200_VLLM026}


def read_fit_file(path: str) -> dict:
    """A `capsim engine host-fit` JSON file as a dict; a one-line error naming it."""
    import json
    from pathlib import Path

    try:
        raw = json.loads(Path(path).read_text())
    except (OSError, ValueError) as e:
        raise ValueError(f"engine.engine_overhead={path!r}: cannot read the fit ({e})") from None
    if not isinstance(raw, dict):
        raise ValueError(f"engine.engine_overhead={path!r}: the fit is not a JSON object")
    return raw


def base_fit_name(name: str) -> str:
    """A registered name as given; a ``capsim engine host-fit`` JSON file: its ``base``."""
    if not name.endswith(".json"):
        return name
    raw = read_fit_file(name)
    if "base" not in raw:
        raise ValueError(f"engine.engine_overhead={name!r}: the fit lacks ['base']")
    return str(raw["base"])


def get_engine_overhead(name: str) -> EngineOverheadFit:
    name = base_fit_name(name)
    if name not in ENGINE_OVERHEADS:
        raise ValueError(
            f"engine.engine_overhead={name!r}: choose one of {sorted(ENGINE_OVERHEADS)}"
        )
    return ENGINE_OVERHEADS[name]


def graph_mode(shape: BatchShape, descs: CaptureDescs) -> str:
    """vLLM 0.26's dispatch of one batch: FULL, PIECEWISE or NONE (eager)."""
    n = shape.num_tok
    if n > descs.largest_tok:
        return NONE
    if shape.num_prefill_req == 0 and descs.full_tok and n <= descs.full_tok[0]:
        return FULL
    return PIECEWISE if descs.piecewise_tok else NONE


@dataclass(frozen=True)
class HostBoundStepTime:
    """``max(base step, host_s(mode)) + delta``: the kernel-priced step under the engine's
    host launch time of its CUDA-graph mode, plus the per-step engine work."""

    base: StepTimeModel
    fit: EngineOverheadFit
    descs: CaptureDescs

    def host_s(self, shape: BatchShape) -> float:
        mode = graph_mode(shape, self.descs)
        if mode == FULL:
            return 0.0
        if mode == PIECEWISE:
            return self.fit.piecewise_host_s
        return self.fit.eager_host_s + self.fit.eager_host_s_per_tok * shape.num_tok

    def step_time_s(self, shape: BatchShape) -> float:
        return max(self.base.step_time_s(shape), self.host_s(shape)) + self.fit.delta_s

    def describe(self) -> dict[str, object]:
        base = dict(self.base.describe())
        return {
            **base,
            "kind": f"{base.get('kind', '?')} + engine overhead {self.fit.name} (fit)",
            "engine_overhead": {**asdict(self.fit), "fit_runs": list(self.fit.fit_runs)},
            "cudagraph_largest_tok": self.descs.largest_tok,
        }
