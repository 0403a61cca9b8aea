"""``--quantization`` reaches every run, not only ``capsim memory``: simulate's memory plan
and step prices, the sweep's rows and its pre-flight validation see the engine's format."""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import pytest

from capsim.config import EngineConfig, LoadConfig, SimConfig
from capsim.cost.base import BatchShape
from capsim.simulate import prepare


def _cfg(quantization: str | None, tp: int = 1, step_time: str = "roofline") -> SimConfig:
    return SimConfig(
        model="qwen3.5-35b-a3b",
        gpu="H200",
        engine=EngineConfig(tp=tp, gmu=0.9, quantization=quantization),
        load=LoadConfig(concurrency=4, num_requests=8),
        step_time=step_time,
    )


def _decode(r: int, ctx: int = 2048) -> BatchShape:
    return BatchShape(
        num_decode_req=r,
        query_tok_per_decode=1,
        decode_context_tok=np.full(r, ctx, dtype=np.int64),
        prefill_new_tok=np.zeros(0, dtype=np.int64),
        prefill_computed_tok=np.zeros(0, dtype=np.int64),
    )


def test_sim_config_resolves_the_engine_quantization() -> None:
    assert _cfg(None).model_spec().quantization == "none"
    assert _cfg("fp8").model_spec().quantization == "fp8"


def test_simulate_plans_and_prices_fp8_weights() -> None:
    bf16, fp8 = prepare(_cfg(None)), prepare(_cfg("fp8"))
    assert fp8.plan.weights_bytes < 0.7 * bf16.plan.weights_bytes
    assert fp8.plan.num_blocks > bf16.plan.num_blocks
    assert fp8.plan.bytes_per_block == bf16.plan.bytes_per_block  # KV stays bf16
    shape = _decode(64)
    # fewer weight bytes to stream per decode step
    assert fp8.step_model.step_time_s(shape) < bf16.step_model.step_time_s(shape)


def test_the_calibrated_pricer_sees_fp8_too() -> None:
    # vLLM cannot load block-FP8 experts split 512 / 8 = 64 wide (block 128): the pricer
    # refuses, which it can only do if the fp8 format reached it (it used to price bf16)
    with pytest.raises(ValueError, match="not divisible by the FP8 weight block"):
        prepare(_cfg("fp8", tp=8, step_time="calibrated"))


def test_sweep_rows_use_the_quantized_plan() -> None:
    from capsim.sweep.grid import Point
    from capsim.sweep.runner import default_plan_fn, result_row

    seen: list[str] = []

    def spy(model, gpu, engine, spec):
        seen.append(model.quantization)
        return default_plan_fn()(model, gpu, engine, spec)

    point = Point(point_id="p", match_id="m", block="b", cfg=_cfg("fp8"))
    result = SimpleNamespace(requests={}, summary={})
    row = result_row(point, result, plan_fn=spy)
    assert seen == ["fp8"] and row["bytes_per_block"] > 0


def _grid(quantization: str | None, tp: int):
    from capsim.sweep.grid_toml import spec_from_dict

    dep = {"model": "qwen3.5-35b-a3b", "gpu": "H200", "tp": tp, "gmu": [0.9]}
    if quantization is not None:
        dep["quantization"] = quantization
    return spec_from_dict(
        {
            "sweep": {"commit_modes": ["storeall"]},
            "block": [{"deployment": [dep], "workload": [{"name": "sharegpt", "loads": [4]}]}],
        }
    )


def test_a_grid_deployment_carries_the_quantization() -> None:
    from capsim.sweep.grid import expand, point_id_of, with_pool

    (bf16,) = expand(_grid(None, 1))
    (fp8,) = expand(_grid("fp8", 1))
    assert fp8.cfg.model_spec().quantization == "fp8"
    assert point_id_of(fp8.cfg) != point_id_of(bf16.cfg)
    # the id of a grid without the key is the one it had before the key existed
    assert "quantization" not in bf16.cfg.to_dict()["engine"]
    (pinned,) = expand(with_pool(_grid(None, 1), {"quantization": "fp8"}))
    assert point_id_of(pinned.cfg) == point_id_of(fp8.cfg)
    # the sweep's fingerprint (resume key) of a grid without it is unchanged too
    assert "quantization" not in _grid(None, 1).to_dict()["blocks"][0]["deployments"][0]
    assert _grid("fp8", 1).fingerprint() != _grid(None, 1).fingerprint()


def test_sweep_validation_plans_the_quantized_model() -> None:
    from capsim.sweep.grid import expand
    from capsim.sweep.validate import validate_points

    seen: list[str] = []

    def spy(model, gpu, engine, spec):
        seen.append(model.quantization)

    spec = _grid("fp8", 1)
    validate_points(spec, expand(spec), plan_fn=spy)
    assert seen == ["fp8"]
