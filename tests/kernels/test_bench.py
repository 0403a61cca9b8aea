"""Benchmark bookkeeping that runs without a GPU: byte counts, schema, rendering."""

from __future__ import annotations

import csv

import pytest
from capsim_kernels.bench.gdn.run import COLUMNS, render_markdown, summarize_targets, write_csv
from capsim_kernels.bench.gdn.shapes import KERNELS, MODEL_SHAPES, bytes_moved

QWEN35B = MODEL_SHAPES[0]
SPEC_COPY_GBPS = 4250.0  # SPEC.md 3.1: copy ceiling measured at 4.25 TB/s


@pytest.mark.parametrize(
    ("state_dtype", "num_nodes", "floor_us"),
    # SPEC.md 3.1, "TreeWY verify+commit floor B=256"
    [("float32", 4, 393), ("float32", 15, 431), ("float32", 40, 518), ("bfloat16", 4, 204)],
)
def test_verify_commit_floor_matches_spec(state_dtype, num_nodes, floor_us):
    nbytes = bytes_moved("treewy_verify_commit", QWEN35B, state_dtype, num_nodes, 256)
    assert nbytes / (SPEC_COPY_GBPS * 1e9) * 1e6 == pytest.approx(floor_us, rel=0.02)


def test_storeall_writes_one_state_per_node():
    one = bytes_moved("storeall", QWEN35B, "float32", 4, 1)
    state = QWEN35B.num_v_heads * QWEN35B.dv * QWEN35B.dk * 4
    assert bytes_moved("storeall", QWEN35B, "float32", 4, 2) == 2 * one
    assert one > 5 * state  # S_0 read plus 4 states written
    assert bytes_moved("storeall", QWEN35B, "bfloat16", 4, 1) < one


def test_bad_kernel_or_dtype_raises():
    with pytest.raises(ValueError, match="kernel must be one of"):
        bytes_moved("magic", QWEN35B, "float32", 4, 1)
    with pytest.raises(ValueError, match="state_dtype"):
        bytes_moved("storeall", QWEN35B, "float16", 4, 1)


def _row(kernel, p50_us, floor_us):
    return {
        "kernel": kernel, "model_shape": QWEN35B.name, "state_dtype": "float32", "T": 4,
        "tree": "chain", "B": 256, "Hv": 32, "Hk": 16, "dk": 128, "dv": 128,
        "p20_us": p50_us, "p50_us": p50_us, "p80_us": p50_us, "bytes_moved": 1,
        "achieved_gbps": 1.0, "floor_us": floor_us, "copy_gbps": 4250.0,
    }  # fmt: skip


def test_csv_schema_and_summaries(tmp_path):
    assert set(KERNELS) >= {"storeall", "deferred", "fla_chunk"}
    rows = [_row("storeall", 800.0, 600.0), _row("treewy_verify_commit", 400.0, 390.0)]
    path = tmp_path / "gdn_verify.csv"
    write_csv(path, rows, COLUMNS)
    with open(path) as f:
        back = list(csv.DictReader(f))
    assert tuple(back[0]) == COLUMNS
    assert [r["kernel"] for r in back] == ["storeall", "treewy_verify_commit"]
    table = render_markdown(back)
    assert "| 4 | chain | 256 | 800.0 (1.33x) | 400.0 (1.03x) |" in table
    assert "2.00x faster" in summarize_targets(back)
