"""Bad configs fail with a message naming the field and value; the CLI exits non-zero."""

from __future__ import annotations

import pytest
from click.testing import CliRunner

from capsim.commands.main import main
from capsim.config import EngineConfig, LoadConfig, SpecDecodeConfig
from capsim.gpus import get_gpu
from capsim.models import get_model


@pytest.mark.parametrize(
    ("factory", "pattern"),
    [
        (lambda: EngineConfig(gmu=1.5), r"engine\.gmu=1\.5"),
        (lambda: EngineConfig(tp=0), r"engine\.tp=0"),
        (lambda: SpecDecodeConfig(num_spec_tok=-1), r"spec\.num_spec_tok=-1"),
        (lambda: SpecDecodeConfig(tree_widths=(2, 0, 1)), r"spec\.tree_widths=\(2, 0, 1\)"),
        (lambda: SpecDecodeConfig(tree_widths=()), r"spec\.tree_widths=\(\)"),
        (lambda: SpecDecodeConfig(commit="bogus"), r"spec\.commit='bogus'"),  # type: ignore[arg-type]
        (lambda: LoadConfig(mode="rate", rate_req_per_s=-2.0), r"load\.rate_req_per_s=-2\.0"),
        (lambda: LoadConfig(concurrency=0), r"load\.concurrency=0"),
        (lambda: get_model("llama-9000"), r"model='llama-9000' is unknown"),
        (lambda: get_gpu("TPUv9"), r"gpu=.TPUv9. is unknown"),
    ],
)
def test_bad_values_name_the_field(factory, pattern) -> None:  # type: ignore[no-untyped-def]
    with pytest.raises(ValueError, match=pattern):
        factory()


@pytest.mark.parametrize(
    ("args", "pattern"),
    [
        (["memory", "--gmu", "0.3"], "engine.gmu=0.3"),
        (["memory", "--model", "nope"], "'nope' is neither a model preset"),
        (["memory", "--tree-widths", "2,0"], "every width must be in [1, 64]"),
        (["memory", "-k", "-1"], "'--num-speculative-tokens' / '--spec-tokens' / '-k'"),
        (["simulate", "--rate", "-1", "-n", "5"], "'--request-rate' / '--rate'"),
    ],
)
def test_cli_exits_nonzero_with_message(args, pattern) -> None:  # type: ignore[no-untyped-def]
    result = CliRunner().invoke(main, args)
    assert result.exit_code != 0
    assert pattern in result.output


def test_every_command_has_help() -> None:
    runner = CliRunner()
    for name in main.commands:
        result = runner.invoke(main, [name, "--help"])
        assert result.exit_code == 0, name
        assert "Usage" in result.output


def test_calibrated_without_speculation_prices_vllms_plain_decode() -> None:
    """k = 0 runs calibrated: the GDN term is vLLM's plain decode kernel (T = 1 rows)."""
    result = CliRunner().invoke(main, ["simulate", "-k", "0", "-c", "4", "-n", "8"])
    assert result.exit_code == 0, result.output


def test_calibrated_unmeasured_deployment_fails_fast_naming_the_field() -> None:
    # 35B TP8 is priced since round 8 (2026-12-02) at k <= 8; its per-GPU heads have GDN
    # windows T = 1, 2, 4, 9 only, so k = 9 (T = 10) lies outside the measured hull
    result = CliRunner().invoke(main, ["simulate", "-k", "9", "--tp", "8", "-c", "4", "-n", "8"])
    assert result.exit_code != 0
    assert "T=10" in result.output and "--step-time roofline" in result.output


def test_calibrated_35b_tp8_is_priced_since_round_8() -> None:
    result = CliRunner().invoke(main, ["simulate", "-k", "3", "--tp", "8", "-c", "4", "-n", "8"])
    assert result.exit_code == 0, result.output
