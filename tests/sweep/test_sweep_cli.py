"""The click commands, run through CliRunner with the fake point function."""

from __future__ import annotations

import pytest
from click.testing import CliRunner

from capsim.commands.sweep import knee_cmd, report_cmd, sweep_cmd, whatif_cmd

GRID = """
[sweep]
name = "cli-test"
num_requests = 30

[[block]]
name = "main"
  [[block.deployment]]
  model = "qwen3.5-35b-a3b"
  gpu = "B200"
  tp = 1
  gmu = [0.6, 0.9]
  [[block.workload]]
  name = "sharegpt"
  loads = [8, 256]
"""


@pytest.fixture
def grid(tmp_path):
    path = tmp_path / "grid.toml"
    path.write_text(GRID)
    return path


def test_every_command_has_help():
    for cmd in (sweep_cmd, knee_cmd, report_cmd, whatif_cmd):
        res = CliRunner().invoke(cmd, ["--help"])
        assert res.exit_code == 0 and cmd.help and len(res.output) > 100


def test_sweep_knee_report(fake_sim, grid, tmp_path):
    out = tmp_path / "res"
    args = ["--grid", str(grid), "--out", str(out), "--executor", "serial", "--no-progress"]
    res = CliRunner().invoke(sweep_cmd, args)
    assert res.exit_code == 0, res.output
    assert "8 points (8 simulated, 0 reused)" in res.output
    # the summary: one block per deployment, one row per workload and mode, ratio columns
    assert " on B200 TP1, gmu " in res.output and "p99TTFT" in res.output
    again = CliRunner().invoke(sweep_cmd, args)
    assert "8 points (0 simulated, 8 reused)" in again.output
    changed = CliRunner().invoke(sweep_cmd, [*args, "--num-requests", "31"])
    assert changed.exit_code != 0 and "num_requests: 30 -> 31" in changed.output
    res = CliRunner().invoke(knee_cmd, [str(out), "--csv"])
    assert res.exit_code == 0, res.output
    assert "knee SA" in res.output and "memory-bound" in res.output
    assert (out / "knee.csv").exists() and (out / "memory_bound.csv").exists()
    res = CliRunner().invoke(report_cmd, [str(out)])
    assert res.exit_code == 0, res.output
    assert (out / "report" / "report.html").exists()


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        (["--gmu", "0.5"], "empty grid"),
        (["--workload", "nope"], "empty grid"),
        (["--gmu", "abc"], "'--gmu'"),
        (["--executor", "dask"], "--scheduler"),
        (["--modes", "storeall,bogus"], "bogus"),
        (["--step-time", "guess"], "'guess' is not one of"),
    ],
)
def test_sweep_bad_input_fails_fast(fake_sim, grid, tmp_path, extra, message):
    out = tmp_path / "res"
    res = CliRunner().invoke(
        sweep_cmd, ["--grid", str(grid), "--out", str(out), "--no-progress", *extra]
    )
    assert res.exit_code != 0
    assert message in res.output
    assert not (out / "points").exists()


def test_sweep_unknown_model_and_unwritable(fake_sim, tmp_path):
    grid = tmp_path / "g.toml"
    grid.write_text(GRID.replace("qwen3.5-35b-a3b", "llama-1t"))
    res = CliRunner().invoke(sweep_cmd, ["--grid", str(grid), "--out", str(tmp_path / "o")])
    assert res.exit_code != 0 and "llama-1t" in res.output
    blocker = tmp_path / "f"
    blocker.write_text("")
    good = tmp_path / "good.toml"
    good.write_text(GRID)
    res = CliRunner().invoke(sweep_cmd, ["--grid", str(good), "--out", str(blocker / "x")])
    assert res.exit_code != 0 and "not writable" in res.output


def test_whatif_command(fake_sim):
    res = CliRunner().invoke(
        whatif_cmd,
        [
            "--model",
            "qwen3.5-35b-a3b",
            "--gpu",
            "B200",  # the published GPU (on the H200 default, gmu 0.6 is refused: Mamba blocks)
            "--workload",
            "sharegpt",
            "--ttft-p99-ms",
            "500",
            "--gmu",
            "0.6,0.9",
            "--num-requests",
            "20",
            "--jobs",
            "1",
            "--max-load",
            "400",
        ],
    )
    assert res.exit_code == 0, res.output
    assert "Best per commit mode" in res.output and "reconstruct" in res.output
    bad = CliRunner().invoke(whatif_cmd, ["--model", "qwen3.5-35b-a3b", "--workload", "sharegpt"])
    assert bad.exit_code != 0 and "give --ttft-p99-ms, --tpot-ms or both" in bad.output
    bad = CliRunner().invoke(
        whatif_cmd,
        ["--model", "qwen3.5-35b-a3b", "--workload", "nope", "--tpot-ms", "20"],
    )
    assert bad.exit_code != 0 and "nope" in bad.output
