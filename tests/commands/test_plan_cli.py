"""``capsim plan``: bad inputs are one-line errors naming the field; --json is the answer."""

from __future__ import annotations

import json

import pytest
from click.testing import CliRunner

from capsim.commands.main import main

BASE = [
    "plan",
    "--request-rate",
    "10",
    "--gpus",
    "H200",
    "--tp",
    "1",
    "-k",
    "3",
    "--modes",
    "storeall",
    "--no-progress",
    "--max-model-len",
    "8192",
]


@pytest.mark.parametrize(
    ("extra", "needle"),
    [
        (["--ttft-p99-ms", "0.001"], "slo.ttft_p99_s=1e-06: no candidate in the space meets it"),
        (["--tpot-ms", "0.01"], "slo.tpot_mean_s=1e-05"),
        ([], "slo.targets=None"),
        (["--ttft-p99-ms", "2000", "--gpus", "H999"], "'--gpus'"),
        (["--ttft-p99-ms", "2000", "--tp", "3"], "engine.tp=3"),
        (["--ttft-p99-ms", "2000", "--gpus", "H20"], "gpu='H20': no price"),
        (["--ttft-p99-ms", "2000", "-k", ""], "-k"),
    ],
)
def test_bad_input_one_line(tmp_path, extra, needle):
    r = CliRunner().invoke(main, [*BASE, "--out", str(tmp_path), *extra])
    assert r.exit_code == 2, r.output
    err = [ln for ln in r.output.splitlines() if ln.startswith("Error:")]
    assert len(err) == 1 and needle in err[0], r.output


def test_json_answer(tmp_path):
    args = [
        *BASE,
        "--ttft-p99-ms",
        "1000",
        "--step-time",
        "roofline",
        "--probe-requests",
        "30",
        "--probe-duration-s",
        "1.5",
        "--max-replicas",
        "4",
        "--json",
        "--no-report",
        "--out",
        str(tmp_path),
    ]
    r = CliRunner().invoke(main, args)
    assert r.exit_code == 0, r.output
    ans = json.loads(r.output)
    assert ans["cheapest"]["gpu"] == "H200" and ans["counts"]["total"] == 1
    assert (tmp_path / "candidates.parquet").exists() and "list" in ans["prices_are"].lower()
