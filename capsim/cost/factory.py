"""Pick the step-time model a SimConfig names."""

from __future__ import annotations

from dataclasses import replace

from capsim.config import SimConfig
from capsim.cost.base import StepTimeModel
from capsim.cost.roofline import RooflineStepTime
from capsim.gpus import GpuSpec
from capsim.models import ModelSpec

STEP_TIME_MODELS: tuple[str, ...] = ("roofline", "calibrated")


def build_step_time_model(
    cfg: SimConfig,
    model: ModelSpec,
    gpu: GpuSpec,
    *,
    async_period: bool = True,
    vllm_moe_ops: bool = False,
) -> StepTimeModel:
    """``async_period=False``: the engine terms as main c4fa656 priced them under async
    scheduling too (max(kernels, host) + delta; the out-of-sample table's old column).
    ``vllm_moe_ops``: calibrated MoE layers priced with vLLM's compiled routing ops in place
    of the tables' stand-ins (``capsim.cost.moe_native``, measured on the engine's H200)."""
    base = _kernel_model(cfg, model, gpu, vllm_moe_ops)
    if cfg.engine.engine_overhead is None:
        return base
    from capsim.cost.engine_overhead import HostBoundStepTime, get_engine_overhead
    from capsim.memory.cudagraph import CaptureDescs, capture_descs

    eng = cfg.engine
    fit = get_engine_overhead(eng.engine_overhead)
    fit.check_covers(cfg.model, gpu.name, eng.vllm_version, eng.tp)
    seqs, tokens = eng.resolved_batch_defaults(gpu)
    descs = (
        CaptureDescs((), ())
        if eng.enforce_eager
        else capture_descs(
            vllm_version=eng.vllm_version,
            max_num_seqs=seqs,
            num_spec_tok=cfg.spec.num_draft_nodes,
            max_num_batched_tokens=tokens,
            sm100=gpu.is_sm100_family,
            full_graphs=eng.cudagraph_full_graphs,
            max_capture_tok=eng.max_cudagraph_capture_size,
        )
    )
    if eng.async_scheduling and async_period:
        # the next step's host work overlaps this one's GPU work (capsim.cost.engine_period)
        from capsim.cost.engine_period import AsyncStepPeriod, get_async_period

        period = get_async_period(eng.engine_overhead)
        cost = AsyncStepPeriod(base, period, descs, cfg.spec.num_draft_nodes)
        if eng.client_round_trip_ms is not None:
            cost = replace(cost, client_round_trip_s=eng.client_round_trip_ms / 1e3)
        return cost
    return HostBoundStepTime(base, fit, descs)


def _kernel_model(
    cfg: SimConfig, model: ModelSpec, gpu: GpuSpec, vllm_moe_ops: bool = False
) -> StepTimeModel:
    if vllm_moe_ops and cfg.step_time != "calibrated":
        raise ValueError(f"vllm_moe_ops: sim.step_time={cfg.step_time!r} must be 'calibrated'")
    if cfg.step_time == "roofline":
        return RooflineStepTime(
            model, gpu, cfg.engine.tp, cfg.spec, state_dtype=cfg.engine.ssm_state_dtype
        )
    if cfg.step_time == "calibrated":
        from capsim.cost.calibrated import CalibratedStepTime

        if vllm_moe_ops:
            from capsim.cost.moe_native import VllmMoeOpsStepTime

            return VllmMoeOpsStepTime.from_config(model, gpu, cfg.engine.tp, cfg.spec)
        # k = 0 prices vLLM's plain GDN decode (the T = 1 rows); the model refuses, naming
        # the field, where its tables lack a window or a (model, tp, weights) shape
        return CalibratedStepTime.from_config(model, gpu, cfg.engine.tp, cfg.spec)
    raise ValueError(f"sim.step_time={cfg.step_time!r}: choose one of {STEP_TIME_MODELS}")
