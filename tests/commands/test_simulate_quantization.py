"""``capsim simulate -q fp8`` loads the model as FP8 (it was ignored: the simulator priced
and planned the checkpoint's bf16 weights whatever --quantization said)."""

from __future__ import annotations

import json

from click.testing import CliRunner

from capsim.commands.main import main

ARGS = ["simulate", "-m", "qwen3.5-35b-a3b", "-k", "0", "-n", "20", "-c", "4",
        "--step-time", "roofline", "--json"]  # fmt: skip


def _run(*extra: str) -> dict:
    res = CliRunner().invoke(main, [*ARGS, *extra])
    assert res.exit_code == 0, res.output
    return json.loads(res.output[res.output.index("{") :])


def test_fp8_weights_leave_more_blocks_than_bf16():
    bf16, fp8 = _run(), _run("-q", "fp8")
    # ~35 GB less weight on the GPU: the KV/state pool grows
    assert fp8["num_blocks"] > bf16["num_blocks"] * 1.3


def test_calibrated_fp8_prices_fp8_rows_or_refuses_naming_them():
    calibrated = [a for a in ARGS if a not in ("--step-time", "roofline")]
    res = CliRunner().invoke(main, [*calibrated, "-q", "fp8"])
    if res.exit_code != 0:  # until the FP8 rows are measured: the refusal names them
        assert "weights fp8" in res.output and "moe_fp8" in res.output
        return
    bf16 = CliRunner().invoke(main, calibrated)
    fp8, ref = (json.loads(r.output[r.output.index("{") :]) for r in (res, bf16))
    assert fp8["tpot_mean_s"] != ref["tpot_mean_s"]  # priced from other rows than bf16's
