import json
import shutil

import pytest

from capsim.calibration.tables import (
    HOLDOUT_FRACTION,
    assign_splits,
    load_tables,
    op_series,
)


def _rows(n_series=6, n_points=15):
    return [
        {"op": "gemm", "key": "x", "n": s, "k": 1, "m_tok": 2**i, "p50_us": 1.0 + i}
        for s in range(n_series)
        for i in range(n_points)
    ]


def test_split_is_seeded_quarter_and_keeps_end_points():
    rows = _rows()
    split = assign_splits(rows, op_series, seed=3)
    assert split == assign_splits(rows, op_series, seed=3)
    assert split != assign_splits(rows, op_series, seed=4)
    assert split.count("holdout") == 6 * round(HOLDOUT_FRACTION * 15)
    for i, row in enumerate(rows):
        if row["m_tok"] in (1, 2**14):
            assert split[i] == "fit"


def test_split_rejects_bad_fraction():
    with pytest.raises(ValueError, match="fraction"):
        assign_splits(_rows(), op_series, fraction=1.0)


def test_packaged_tables_load_and_cover_the_presets():
    tables = load_tables("H200")
    assert tables.gpu == "H200"
    ops = {r["op"] for r in tables.ops}
    assert {"gemm", "moe", "attn_decode", "attn_prefill", "gdn_prefill", "host"} <= ops
    frac = sum(r["split"] == "holdout" for r in tables.ops) / len(tables.ops)
    assert 0.15 < frac < 0.3


def test_loader_detects_edited_table(fixture_data_dir, tmp_path):
    data = tmp_path / "data"
    shutil.copytree(fixture_data_dir, data)
    path = data / "h200_model_step.csv"
    path.write_text(path.read_text().replace("gemm", "gemn", 1))
    with pytest.raises(ValueError, match="sha256 differs"):
        load_tables("H200", data)


def test_loader_refuses_other_schema_and_missing_gpu(fixture_data_dir, tmp_path):
    data = tmp_path / "data"
    shutil.copytree(fixture_data_dir, data)
    manifest = json.loads((data / "h200_manifest.json").read_text())
    manifest["schema_version"] = 99
    (data / "h200_manifest.json").write_text(json.dumps(manifest))
    with pytest.raises(ValueError, match="schema_version=99"):
        load_tables("H200", data)
    with pytest.raises(ValueError, match="no manifest"):
        load_tables("A100", data)


def test_packaged_tables_match_kernels_results():
    """Fails when kernels/results/h200 changed without `capsim calibrate --build`."""
    from pathlib import Path

    from capsim.calibration.tables import sha256_file

    results = Path(__file__).resolve().parents[2] / "kernels" / "results" / "h200"
    sources = load_tables("H200").manifest["sources"]
    for name, digest in sources["model_step_sha256"].items():
        assert sha256_file(results / name) == digest, name
    if sources["gdn_verify"]:
        assert sha256_file(results / "gdn_verify.csv") == sources["gdn_verify_sha256"]
