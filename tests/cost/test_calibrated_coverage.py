"""The calibrated step model for k = 0..8, TP > 1 and FP8 weights, on fixture tables.

The fixture is synthetic (not a measurement; CI has no GPU): the committed H200 operator
rows of the 35B TP1 are re-keyed to the per-GPU shapes of TP2 (times halved), MoE and
linear rows are copied into the FP8 classes (times x0.7), and the fixture GDN rows are
re-labelled to T = 1 (vLLM's plain decode) and T = 2..9 and to the TP2 heads. What the
tests check is the mechanism: each deployment prices from its own rows, the all-reduce
is added for TP > 1, and a deployment without rows is refused in one line naming the
field and value.
"""

from __future__ import annotations

import csv
import json
import shutil
from pathlib import Path

import numpy as np
import pytest

from capsim.calibration.build import build
from capsim.calibration.shapes import step_shapes
from capsim.config import SpecDecodeConfig
from capsim.cost.base import BatchShape
from capsim.cost.calibrated import CalibratedStepTime
from capsim.gpus import GPUS
from capsim.models import PRESETS

REPO = Path(__file__).resolve().parents[2]
RESULTS = REPO / "kernels" / "results" / "h200"
FIXTURE_GDN = REPO / "tests" / "calibration" / "fixture_gdn_verify.csv"
M35 = PRESETS["qwen3.5-35b-a3b"]


def _read(path: Path) -> tuple[list[str], list[dict]]:
    with path.open() as f:
        reader = csv.DictReader(f)
        return list(reader.fieldnames or []), list(reader)


def _write(path: Path, cols: list[str], rows: list[dict]) -> None:
    with path.open("w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=cols, extrasaction="ignore")
        w.writeheader()
        w.writerows(rows)


def _scaled(row: dict, factor: float, **changes) -> dict:
    out = {**row, **{k: str(v) for k, v in changes.items()}}
    for col in ("p20_us", "p50_us", "p80_us"):
        out[col] = f"{float(row[col]) * factor:.4f}"
    return out


def _tp2_ops(rows: list[dict]) -> list[dict]:
    """TP1 rows of the 35B re-keyed to its TP2 shapes (synthetic, times halved)."""
    s1, s2 = step_shapes(M35, 1), step_shapes(M35, 2)
    keys = {
        ("moe", s1.moe_key): s2.moe_key, ("conv", f"c{s1.conv_dim}"): f"c{s2.conv_dim}",
        ("sample", f"v{s1.vocab_local}"): f"v{s2.vocab_local}",
        ("attn_decode", s1.attn_key): s2.attn_key, ("attn_prefill", s1.attn_key): s2.attn_key,
        ("gdn_prefill", s1.gdn_key): s2.gdn_key,
        ("rmsnorm", f"d{s1.gdn_hv * s1.gdn_dv}"): f"d{s2.gdn_hv * s2.gdn_dv}",
    }  # fmt: skip
    targets = {(b.n, b.k): (a.n, a.k) for a, b in zip(s1.linears, s2.linears, strict=True)}
    out = []
    for (n2, k2), (n1, k1) in targets.items():
        out += [_scaled(r, 0.5, n=n2, k=k2) for r in rows
                if r["op"] == "gemm" and (int(r["n"]), int(r["k"])) == (n1, k1)]  # fmt: skip
    for r in rows:
        if (r["op"], r["key"]) in keys:
            out.append(_scaled(r, 0.5, key=keys[r["op"], r["key"]]))
    return out


def _fp8_ops(rows: list[dict]) -> list[dict]:
    """FP8 classes at the 35B TP1 (synthetic: the bf16 rows x0.7)."""
    s1 = step_shapes(M35, 1)
    fp8_lin = {(a.n, a.k) for a in s1.linears if a.name != "lm_head" and a.n % 128 == 0}
    out = []
    for r in rows:
        if r["op"] == "moe" and r["key"] == s1.moe_key:
            out.append(_scaled(r, 0.7, op="moe_fp8"))
        elif r["op"] == "gemm" and (int(r["n"]), int(r["k"])) in fp8_lin:
            out.append(_scaled(r, 0.7, op="gemm_fp8"))
    return out


def _gdn_rows(rows: list[dict]) -> list[dict]:
    """The fixture's T = 4 chain rows re-labelled to T = 1 (vllm_decode) and T = 2..9, and
    copies at the TP2 heads (synthetic)."""
    t4 = [r for r in rows if r["T"] == "4" and r["tree"] == "chain"]
    out = list(rows)
    for r in t4:
        if r["kernel"] == "storeall":
            out.append(_scaled(r, 0.6, kernel="vllm_decode", T=1))
        for t in (2, 3, 5, 6, 7, 8, 9):
            out.append(_scaled(r, t / 4, T=t))
    out += [_scaled(r, 0.5, Hv=int(r["Hv"]) // 2, Hk=int(r["Hk"]) // 2,
                    model_shape="qwen3.5-35b-a3b-tp2") for r in list(out)]  # fmt: skip
    return out


def _fixture_tables(tmp_path_factory, skip: tuple[str, ...] = ()) -> Path:
    res = tmp_path_factory.mktemp("results_cov")
    for path in RESULTS.glob("model_step*"):
        if path.name not in skip:
            shutil.copy(path, res / path.name)
    cols, _ = _read(RESULTS / "model_step_run1.csv")
    _, base = _read(REPO / "capsim" / "calibration" / "data" / "h200_model_step.csv")  # merged
    _write(res / "model_step_run98_fixture_tp2.csv", cols, _tp2_ops(base))
    _write(res / "model_step_run99_fixture_fp8.csv", cols, _fp8_ops(base))
    gcols, grows = _read(FIXTURE_GDN)
    _write(res / "gdn_verify.csv", gcols, _gdn_rows(grows))
    (res / "meta.json").write_text(json.dumps({"checks_ok": True, "fixture": True}))
    data = tmp_path_factory.mktemp("data_cov")
    build(res, data)
    return data


@pytest.fixture(scope="module")
def coverage_dir(tmp_path_factory) -> Path:
    return _fixture_tables(tmp_path_factory)


@pytest.fixture(scope="module")
def no_fp8_tp2_dir(tmp_path_factory) -> Path:
    """The fixture without round 7's operator run (its FP8 rows at the 35B TP2 shard)."""
    return _fixture_tables(tmp_path_factory, skip=("model_step_run11_round7.csv",))


def decode(r: int, w: int, ctx: int = 2048) -> BatchShape:
    return BatchShape(
        num_decode_req=r, query_tok_per_decode=w,
        decode_context_tok=np.full(r, ctx, dtype=np.int64),
        prefill_new_tok=np.zeros(0, dtype=np.int64),
        prefill_computed_tok=np.zeros(0, dtype=np.int64),
    )  # fmt: skip


def _model(data: Path, k: int, tp: int = 1, quant: str = "none", commit: str = "storeall"):
    from dataclasses import replace

    model = replace(M35, quantization=quant)
    spec = SpecDecodeConfig(num_spec_tok=k, commit=commit)
    return CalibratedStepTime.from_config(model, GPUS["H200"], tp, spec, data_dir=data)


def test_every_chain_depth_prices_with_its_window(coverage_dir):
    times = []
    for k in range(9):
        m = _model(coverage_dir, k)
        t = m.step_time_s(decode(64, k + 1))
        assert np.isfinite(t) and t > 0
        times.append(t)
        want = ("vllm_decode",) if k == 0 else ("storeall",)  # the fixture has no vLLM rows
        assert tuple(m.describe()["gdn_kernels"]) == want
        assert m.describe()["gdn_window_interpolation"] is None  # T = k + 1 was measured
    assert times[0] < times[1] < times[8]  # longer windows and more drafts cost more


def test_no_speculation_has_no_drafts(coverage_dir):
    parts = _model(coverage_dir, 0).breakdown_s(decode(32, 1))
    assert parts["drafts"] == 0.0 and parts["gdn"] > 0.0


def test_tp2_prices_from_its_rows_and_adds_the_allreduce(coverage_dir):
    m1, m2 = _model(coverage_dir, 3, tp=1), _model(coverage_dir, 3, tp=2)
    p1, p2 = m1.breakdown_s(decode(64, 4)), m2.breakdown_s(decode(64, 4))
    assert "tp_allreduce" in p2 and p2["tp_allreduce"] > 0 and "tp_allreduce" not in p1
    assert p2["dense"] < p1["dense"]  # the fixture halves every TP2 row
    assert "450 GB/s" in m2.describe()["tp_allreduce"]
    assert "NVLink" in m2.describe()["tp_allreduce"]


def test_unmeasured_tp_is_refused_naming_the_field(coverage_dir):
    with pytest.raises(ValueError, match=r"tensor_parallel_size=4") as err:
        _model(coverage_dir, 3, tp=4)
    assert "\n" not in str(err.value)


def test_fp8_uses_its_moe_and_linear_rows(coverage_dir):
    bf16, fp8 = _model(coverage_dir, 3), _model(coverage_dir, 3, quant="fp8")
    shape = decode(64, 4)
    assert fp8.breakdown_s(shape)["dense"] < bf16.breakdown_s(shape)["dense"]
    d = fp8.describe()
    assert d["weights"] == "fp8" and "lm_head" not in d["fp8_linears"]
    assert "gdn_in_qkvz" in d["fp8_linears"] and "gdn_in_ba" not in d["fp8_linears"]


def test_fp8_refusals_name_field_and_value(coverage_dir, no_fp8_tp2_dir):
    with pytest.raises(ValueError, match=r"moe_intermediate_size/tp=64"):
        _model(coverage_dir, 3, tp=8, quant="fp8")
    with pytest.raises(ValueError, match=r"tensor_parallel_size=2 \(weights fp8\)"):
        _model(no_fp8_tp2_dir, 3, tp=2, quant="fp8")  # no FP8 rows at TP2 without round 7
    # round 7 measured them (kernels/results/h200/model_step_run11_round7.csv)
    assert _model(coverage_dir, 3, tp=2, quant="fp8").describe()["weights"] == "fp8"
    with pytest.raises(ValueError, match=r"quantization='awq'"):
        _model(coverage_dir, 3, quant="awq")


def test_window_outside_the_measured_hull_is_refused(coverage_dir):
    with pytest.raises(ValueError, match=r"q_tok=41"):
        _model(coverage_dir, 40)
