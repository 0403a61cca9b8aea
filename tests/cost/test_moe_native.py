"""capsim.cost.moe_native: the per-layer excess of the stand-ins over vLLM's MoE ops, and the
calibrated step priced with it (logic on hand-made rows; the committed call-16 file has its
own test in tests/calibration/test_moe_ops_data.py)."""

from __future__ import annotations

from pathlib import Path

import pytest

from capsim.calibration.interp import Curve
from capsim.config import SpecDecodeConfig
from capsim.cost.calibrated import CalibratedStepTime
from capsim.cost.moe_native import MoeOpsCorrection, VllmMoeOpsStepTime, from_rows
from capsim.gpus import get_gpu
from capsim.models import get_model
from tests.factories import decode_shape

KEY = "e256_k8_i512_s512_h2048"
# per op: (stand-in us, engine-impl us); align runs only above 8 tokens
TIMES = {
    "topk_softmax": (6.0, 3.0),
    "moe_align_block_size": (9.0, 4.0),
    "silu_and_mul_experts": (5.0, 4.0),
    "silu_and_mul_shared": (5.0, 4.5),
    "moe_sum": (4.0, 3.5),
}


def _rows(tokens=(1, 8, 16, 512)) -> list[dict]:
    rows = []
    for n in tokens:
        for op, (st, eng) in TIMES.items():
            used = "0" if op == "moe_align_block_size" and n * 8 * 4 <= 256 else "1"
            scale = 2.0 if n > 8 else 1.0  # the stand-in is slower above 8 tokens
            impls = [("standin", st * scale)]
            if op == "silu_and_mul_shared":  # the engine runs torch's; vLLM's op is unused
                impls += [("torch", eng), ("vllm", 99.0)]
            else:
                impls += [("vllm", eng)]
            for impl, us in impls:
                rows.append({"op": op, "impl": impl, "tokens": str(n), "p50_us": str(us),
                             "in_vllm_step": used, "error": ""})  # fmt: skip
    return rows


def _corr() -> MoeOpsCorrection:
    return from_rows(_rows(), KEY, Path("hand.csv"), "hand-made rows")


def test_excess_sums_the_ops_the_engine_runs() -> None:
    c = _corr()
    # N = 1: no align; the shared expert's silu is not in the correction
    assert c.at(1) == pytest.approx((3.0 + 1.0 + 0.5) * 1e-6)
    assert dict(c.parts_us[0]).keys() == {"topk_softmax", "silu_and_mul_experts", "moe_sum"}
    # N = 16 (x2 stand-in times): align included
    assert c.at(16) == pytest.approx((9.0 + 14.0 + 6.0 + 4.5) * 1e-6)
    # align is a step at vLLM's rule (tokens * 8 * 4 > 256: from 9 tokens), not a ramp
    assert c.align_from_tok == 9
    assert c.at(9) - c.at(8) == pytest.approx(14.0e-6 + (c.at(16) - 14e-6 - c.at(8)) / 8)
    # linear between measured counts, clamped outside 1..512
    assert c.at(12) == pytest.approx((c.at(9) + c.at(15)) / 2)
    assert c.at(0.5) == c.at(1) and c.at(4096) == c.at(512)


def test_subtract_is_exact_on_both_grids() -> None:
    c = _corr()
    moe = Curve("moe", (1.0, 64.0, 1024.0), (60e-6, 400e-6, 600e-6))
    got = c.subtract(moe, 2.0)
    for x in (1, 8, 12, 16, 64, 512, 1024):
        assert got(x) == pytest.approx(moe(x) - 2 * c.at(x)), x
    assert set(got.xs) >= {1.0, 8.0, 16.0, 512.0, 1024.0}
    with pytest.raises(ValueError, match="not above"):
        c.subtract(moe, 1e4)


def test_missing_time_is_refused() -> None:
    rows = [r for r in _rows() if not (r["op"] == "moe_sum" and r["tokens"] == "16")]
    with pytest.raises(ValueError, match="op=moe_sum impl=standin tokens=16"):
        from_rows(rows, KEY, Path("hand.csv"), "x")
    rows = _rows()
    rows[0]["error"], rows[0]["p50_us"] = "RuntimeError: boom", ""
    with pytest.raises(ValueError, match="boom"):
        from_rows(rows, KEY, Path("hand.csv"), "x")


def _hand(k: int, tp: int = 1, gpu: str = "H200") -> VllmMoeOpsStepTime:
    model, target = get_model("qwen3.5-35b-a3b"), get_gpu(gpu)
    base = CalibratedStepTime.from_config(model, target, tp, SpecDecodeConfig(num_spec_tok=k))
    return VllmMoeOpsStepTime(
        shapes=base.shapes, spec=base.spec, tables=base.tables, gpu=target,
        projection=base.projection, correction=_corr(),
    )  # fmt: skip


def _pair(k: int) -> tuple[CalibratedStepTime, VllmMoeOpsStepTime]:
    model, gpu = get_model("qwen3.5-35b-a3b"), get_gpu("H200")
    return CalibratedStepTime.from_config(model, gpu, 1, SpecDecodeConfig(num_spec_tok=k)), _hand(k)


@pytest.mark.parametrize("batch", [1, 16, 64])
def test_k0_step_drops_40_layers_of_excess(batch: int) -> None:
    base, hand = _pair(0)
    shape = decode_shape(batch, 0)
    want = base.step_time_s(shape) - 40 * _corr().at(batch)
    assert hand.step_time_s(shape) == pytest.approx(want, rel=1e-12)
    assert hand.describe()["moe_ops"]["source"] == "hand-made rows"


def test_k3_step_includes_the_drafter_passes() -> None:
    base, hand = _pair(3)
    c, batch = _corr(), 16
    shape = decode_shape(batch, 3)
    # target 40 layers and MTP pass 1 at 4 x batch tokens; passes 2..3 at batch tokens
    want = base.step_time_s(shape) - 41 * c.at(4 * batch) - 2 * c.at(batch)
    assert hand.step_time_s(shape) == pytest.approx(want, rel=1e-12)


def test_other_moe_shapes_are_refused() -> None:
    with pytest.raises(ValueError, match="tensor_parallel_size=2 has MoE shape"):
        _hand(0, tp=2)
    with pytest.raises(ValueError, match="bf16 MoE on the H200 only"):
        _hand(0, gpu="B200")
