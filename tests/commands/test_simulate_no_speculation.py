"""``capsim simulate -k 0`` prints no acceptance length (there are no drafts), not "nan"."""

from __future__ import annotations

from click.testing import CliRunner

from capsim.commands.main import main

ARGS = ["simulate", "-m", "qwen3.5-35b-a3b", "-n", "16", "-c", "4", "--step-time", "roofline"]


def _line(k: str) -> str:
    res = CliRunner().invoke(main, [*ARGS, "-k", k])
    assert res.exit_code == 0, res.output
    return next(ln for ln in res.output.splitlines() if "acceptance length" in ln)


def test_k0_says_no_speculation_and_k3_prints_the_mean():
    assert "none (no speculation, k=0)" in _line("0") and "nan" not in _line("0")
    assert _line("3").rstrip().endswith("tok/step")
