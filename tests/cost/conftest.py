"""Calibration tables built from the committed H200 measurements plus a GDN fixture.

The GDN verify fixture (``fixture_gdn_verify.csv``) is hand-made, not a measurement: it
lets the tests exercise the commit-mode mapping before (or without) the kernels CSV. Its
meta.json says ``checks_ok`` (the build refuses GDN timings without it) and ``fixture``.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from capsim.calibration.build import build

REPO = Path(__file__).resolve().parents[2]
RESULTS = REPO / "kernels" / "results" / "h200"
FIXTURE_GDN = REPO / "tests" / "calibration" / "fixture_gdn_verify.csv"


@pytest.fixture(scope="session")
def fixture_data_dir(tmp_path_factory) -> Path:
    res = tmp_path_factory.mktemp("results")
    for path in RESULTS.glob("model_step*"):
        shutil.copy(path, res / path.name)
    shutil.copy(FIXTURE_GDN, res / "gdn_verify.csv")
    (res / "meta.json").write_text(json.dumps({"checks_ok": True, "fixture": True}))
    data = tmp_path_factory.mktemp("data")
    build(res, data)
    return data
