"""The committed call-16 measurement (kernels/results/h200/moe_ops_call16.csv, vLLM 0.26's MoE
routing ops against capsim's stand-ins on the engine's H200) and the step price built on it."""

from __future__ import annotations

import csv
import json
from pathlib import Path

import pytest

from capsim.config import SpecDecodeConfig
from capsim.cost.calibrated import CalibratedStepTime
from capsim.cost.moe_native import DATA_PATH, LAYER_OPS, VllmMoeOpsStepTime, load_moe_correction
from capsim.gpus import get_gpu
from capsim.models import get_model
from tests.factories import decode_shape

REPO = Path(__file__).resolve().parents[2]
RAW = REPO / "kernels/results/h200/moe_ops_call16.csv"
META = REPO / "kernels/results/h200/moe_ops_call16_meta.json"


def _rows() -> list[dict]:
    with RAW.open(newline="") as fh:
        return list(csv.DictReader(fh))


def test_packaged_copy_is_the_measured_file() -> None:
    assert DATA_PATH.read_bytes() == RAW.read_bytes()


def test_measured_on_the_engine_build() -> None:
    meta = json.loads(META.read_text())
    assert meta["versions"]["vllm"].startswith("0.26.0")
    assert meta["versions"]["torch"].startswith("2.11.0")
    assert "H200" in meta["gpu"]
    assert meta["shape"]["experts"] == 256 and meta["shape"]["topk"] == 8


def test_align_rows_follow_vllms_rule() -> None:
    c = load_moe_correction()
    for r in _rows():
        if r["op"] == "moe_align_block_size":
            assert (r["in_vllm_step"] == "1") == (int(r["tokens"]) >= c.align_from_tok), r


def test_every_layer_op_timed_and_checked() -> None:
    rows = _rows()
    for op, table_impl, engine_impl in LAYER_OPS:
        for impl in {table_impl, engine_impl}:
            got = [r for r in rows if r["op"] == op and r["impl"] == impl]
            assert len(got) == 10 and all(r["p50_us"] and not r["error"] for r in got), (op, impl)
    for r in rows:
        if r["impl"] != "standin":
            continue
        c = r["check"]
        if r["op"] == "topk_softmax":  # id sets may differ only at tied bf16 logits
            assert float(c.split("max_abs_w_diff=")[1]) < 1e-5, c
        elif r["op"] == "moe_align_block_size":
            assert c.endswith("expert_ids_equal=1 ids_equal=1"), c
        else:
            assert float(c.split("max_abs_diff=")[1]) < 0.1, c


@pytest.mark.parametrize(("k", "batch"), [(0, 1), (0, 64), (0, 256), (3, 1), (3, 64)])
def test_step_priced_with_vllm_ops(k: int, batch: int) -> None:
    model, gpu = get_model("qwen3.5-35b-a3b"), get_gpu("H200")
    spec = SpecDecodeConfig(num_spec_tok=k)
    base = CalibratedStepTime.from_config(model, gpu, 1, spec)
    fixed = VllmMoeOpsStepTime.from_config(model, gpu, 1, spec)
    c = load_moe_correction()
    m = batch * (1 + k)
    layers = 40 * c.at(m) + (c.at(m) + (k - 1) * c.at(batch) if k else 0.0)
    shape = decode_shape(batch, k)
    assert base.step_time_s(shape) - fixed.step_time_s(shape) == pytest.approx(layers, rel=1e-9)


def test_factory_switch_is_off_by_default() -> None:
    from capsim.config import EngineConfig, SimConfig
    from capsim.cost.engine_period import AsyncStepPeriod
    from capsim.cost.factory import build_step_time_model

    cfg = SimConfig(step_time="calibrated")
    model, gpu = get_model(cfg.model), get_gpu(cfg.gpu)
    assert type(build_step_time_model(cfg, model, gpu)) is CalibratedStepTime
    assert isinstance(build_step_time_model(cfg, model, gpu, vllm_moe_ops=True), VllmMoeOpsStepTime)
    eng = EngineConfig(
        vllm_version="0.26", engine_overhead="measured-h200-vllm0.26", async_scheduling=True
    )
    real = SimConfig(step_time="calibrated", engine=eng)
    cost = build_step_time_model(real, model, gpu, vllm_moe_ops=True)
    assert isinstance(cost, AsyncStepPeriod) and isinstance(cost.base, VllmMoeOpsStepTime)
    with pytest.raises(ValueError, match=r"sim\.step_time='roofline' must be 'calibrated'"):
        build_step_time_model(SimConfig(step_time="roofline"), model, gpu, vllm_moe_ops=True)
