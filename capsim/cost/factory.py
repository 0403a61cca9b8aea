"""Pick the step-time model a SimConfig names."""

from __future__ import annotations

from capsim.config import SimConfig
from capsim.cost.base import StepTimeModel
from capsim.cost.roofline import RooflineStepTime
from capsim.gpus import GpuSpec
from capsim.models import ModelSpec

STEP_TIME_MODELS: tuple[str, ...] = ("roofline", "calibrated")


def build_step_time_model(cfg: SimConfig, model: ModelSpec, gpu: GpuSpec) -> StepTimeModel:
    if cfg.step_time == "roofline":
        return RooflineStepTime(
            model, gpu, cfg.engine.tp, cfg.spec, state_dtype=cfg.engine.ssm_state_dtype
        )
    if cfg.step_time == "calibrated":
        from capsim.cost.calibrated import CalibratedStepTime

        if cfg.spec.depth == 0 and model.is_hybrid:
            raise ValueError(
                "sim.step_time='calibrated': the measured GDN tables have no window of 1 "
                "token (spec.num_spec_tok=0); use step_time='roofline' (--step-time roofline)"
            )

        return CalibratedStepTime.from_config(model, gpu, cfg.engine.tp, cfg.spec)
    raise ValueError(f"sim.step_time={cfg.step_time!r}: choose one of {STEP_TIME_MODELS}")
