"""scripts/engine_moe_ops.py on the CPU: argument checks and the shape plan of --dry-run
(no torch import); the GPU timing itself runs on the device only."""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
SCRIPT = REPO / "scripts/engine_moe_ops.py"
_spec = importlib.util.spec_from_file_location("engine_moe_ops", SCRIPT)
emo = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(emo)


def _dry(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, str(SCRIPT), "--dry-run", *args], capture_output=True, text=True
    )


def test_dry_run_plan_covers_step_table_tokens() -> None:
    out = _dry()
    assert out.returncode == 0, out.stderr
    rows = [json.loads(line) for line in out.stdout.splitlines()]
    assert {r["tokens"] for r in rows} == {1, 2, 4, 8, 16, 32, 64, 128, 256, 512}
    assert {r["op"] for r in rows} == set(emo.OPS)
    # every op has a vLLM and a stand-in row at every token count
    for op in emo.OPS:
        for n in emo.TOKENS:
            impls = {r["impl"] for r in rows if r["op"] == op and r["tokens"] == n}
            assert {"vllm", "standin"} <= impls, (op, n)
    by = {(r["op"], r["tokens"], r["impl"]): r for r in rows}
    assert by[("topk_softmax", 4, "vllm")]["shape"] == "logits[4,256]bf16 k=8"
    assert by[("silu_and_mul_experts", 2, "standin")]["shape"] == "x[16,1024]bf16"
    assert by[("moe_sum", 64, "vllm")]["shape"] == "x[64,8,2048]bf16"
    # vLLM skips moe_align_block_size while tokens * topk * 4 <= experts (256): N <= 8
    align = {n: by[("moe_align_block_size", n, "vllm")]["in_vllm_step"] for n in emo.TOKENS}
    assert [n for n, used in align.items() if not used] == [1, 2, 4, 8]


def test_dry_run_does_not_import_torch() -> None:
    code = (
        "import importlib.util as u, sys\n"
        f"s = u.spec_from_file_location('m', {str(SCRIPT)!r})\n"
        "m = u.module_from_spec(s); s.loader.exec_module(m)\n"
        "m.main(['--dry-run', '--tokens', '1'])\n"
        "print('torch' in sys.modules, file=sys.stderr)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    assert out.stderr.strip().splitlines()[-1] == "False"


def test_model_shape_is_the_preset() -> None:
    s = emo.model_shape("qwen3.5-35b-a3b")
    cfg = json.loads((REPO / "experiments/vllm_logs/models/qwen3.5-35b-a3b.json").read_text())
    tc = cfg["text_config"]
    assert s["experts"] == tc["num_experts"] and s["topk"] == tc["num_experts_per_tok"]
    assert s["hidden"] == tc["hidden_size"] and s["inter"] == tc["moe_intermediate_size"]
    assert s["moe_layers"] == tc["num_hidden_layers"]


@pytest.mark.parametrize(
    ("args", "needle"),
    [
        (["--tokens", "0"], "--tokens="),
        (["--tokens", "1,x"], "--tokens="),
        (["--ops", "topk_softmax,nope"], "--ops='nope'"),
        (["--calls", "0"], "--calls=0"),
        (["--budget-s", "0"], "--budget-s=0"),
        (["--model", "nope"], "--model='nope'"),
    ],
)
def test_bad_arguments_one_line_error(args: list[str], needle: str) -> None:
    out = _dry(*args)
    assert out.returncode == 2
    lines = out.stderr.strip().splitlines()
    assert len(lines) == 1 and needle in lines[0], out.stderr


def test_out_required_without_dry_run() -> None:
    out = subprocess.run([sys.executable, str(SCRIPT)], capture_output=True, text=True)
    assert out.returncode == 2 and "--out" in out.stderr


def test_default_block_matches_the_step_tables() -> None:
    """The fallback BLOCK_SIZE_M rule gives the BLOCK_M the committed MoE rows record."""
    import csv

    path = REPO / "capsim/calibration/data/h200_model_step.csv"
    seen = 0
    for row in csv.DictReader(path.open()):
        if row["op"] == "moe" and row["key"] == "e256_k8_i512_s512_h2048":
            m = int(row["m_tok"])
            got = int(row["impl"].rsplit("BLOCK_M=", 1)[1].rstrip("]"))
            assert emo.default_block(m) == got, m
            seen += 1
    assert seen >= 10
