"""Shared test set-up: ``factories`` importable as a plain module, and the calibration
tables built once per session from the committed H200 measurements plus a GDN fixture.

The GDN verify fixture (``tests/calibration/fixture_gdn_verify.csv``) is hand-made, not a
measurement: it lets the tests exercise the commit-mode mapping before (or without) the
kernels CSV. Its meta.json says ``checks_ok`` (the build refuses GDN timings without passing
float64 checks) and ``fixture``.
"""

import json
import shutil
import sys
from pathlib import Path

import pytest

# tests import their shared factories as a plain module
sys.path.insert(0, str(Path(__file__).parent))

REPO = Path(__file__).resolve().parents[1]
RESULTS = REPO / "kernels" / "results" / "h200"
FIXTURE_GDN = REPO / "tests" / "calibration" / "fixture_gdn_verify.csv"


@pytest.fixture(scope="session")
def fixture_data_dir(tmp_path_factory) -> Path:  # type: ignore[no-untyped-def]
    """tests/cost and tests/calibration: the tables ``capsim.calibration.build`` writes."""
    from capsim.calibration.build import build

    res = tmp_path_factory.mktemp("results")
    for path in RESULTS.glob("model_step*"):
        shutil.copy(path, res / path.name)
    shutil.copy(FIXTURE_GDN, res / "gdn_verify.csv")
    (res / "meta.json").write_text(json.dumps({"checks_ok": True, "fixture": True}))
    data = tmp_path_factory.mktemp("data")
    build(res, data)
    return data
