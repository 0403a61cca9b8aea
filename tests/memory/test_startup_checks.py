"""vLLM 0.26's Mamba-blocks start-up refusal, reproduced by capsim (issue 21)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from click.testing import CliRunner

from capsim.commands.main import main
from capsim.config import EngineConfig, SpecDecodeConfig
from capsim.gpus import get_gpu
from capsim.memory.memory_plan import plan_memory
from capsim.memory.startup_checks import mamba_blocks_refusal
from capsim.models import get_model

VLLM_WORDING = (
    "max_num_seqs (1024) exceeds available Mamba cache blocks (339). Each decode "
    "sequence requires one Mamba cache block, so CUDA graph capture cannot "
    "proceed. Please lower max_num_seqs to at most 339 or increase "
    "gpu_memory_utilization."
)


def test_message_is_vllms_wording_for_the_h200_refusal():
    # the numbers vLLM printed on the H200 (gmu 0.6, k=3; shared/REAL_VLLM_H200.md)
    assert mamba_blocks_refusal(1024, 339, True, True, (0, 26)) == VLLM_WORDING


@pytest.mark.parametrize(
    "args",
    [
        (339, 339, True, True, (0, 26)),  # equal is allowed (vLLM: >)
        (1024, 339, False, True, (0, 26)),  # no Mamba/GDN layers
        (1024, 339, True, False, (0, 26)),  # no FULL graphs (enforce_eager)
        (1024, 339, True, True, (0, 25)),  # releases whose source was not read
        (1024, 339, True, True, (0, 33)),
    ],
)
def test_no_refusal_outside_the_rule(args):
    assert mamba_blocks_refusal(*args) is None


def _plan(max_num_seqs: int | None, eager: bool = False):
    engine = EngineConfig(
        gmu=0.6, max_num_seqs=max_num_seqs, enforce_eager=eager, vllm_version="0.26"
    )
    return plan_memory(
        get_model("qwen3.5-35b-a3b"), get_gpu("h200"), engine, SpecDecodeConfig(num_spec_tok=3)
    )


def test_plan_memory_refuses_when_max_num_seqs_exceeds_blocks():
    plan = _plan(256)
    assert plan.num_blocks >= 256
    with pytest.raises(ValueError, match=r"exceeds available Mamba cache blocks \(\d+\)"):
        _plan(plan.num_blocks + 1)
    assert _plan(plan.num_blocks + 1, eager=True).max_num_seqs == plan.num_blocks + 1


# The two refusals vLLM 0.26.0 printed on the lent H200 (gmu 0.6, max_num_seqs 1024 default):
# k=3 prefix caching off (shared/REAL_VLLM_H200.md, 339 blocks) and k=0 prefix caching on
# (engine call 10, experiments/engine/startups/s_g060_k0_pc_kv.log, 660 blocks). capsim's count
# is its own pool's (as wrong as the plan: experiments/memory_plan/h200/comparison_s4.md), so it
# is held to issue 25's 3% pool target, not to vLLM's digit (main c4fa656: 347 vs 339, +2.4%;
# 662 vs 660, +0.3%).
H200_REFUSALS = [(3, False, 339), (0, True, 660)]
_FIRST = re.compile(
    r"ValueError: max_num_seqs \(1024\) exceeds available Mamba cache blocks \((\d+)\)\."
)
CALL10_LOG = Path(__file__).parents[2] / "experiments/engine/startups/s_g060_k0_pc_kv.log"


@pytest.mark.parametrize(("k", "prefix_caching", "vllm_blocks"), H200_REFUSALS)
def test_h200_refusals_in_vllms_wording(k: int, prefix_caching: bool, vllm_blocks: int) -> None:
    engine = EngineConfig(
        gmu=0.6, vllm_version="0.26.0", max_model_len=262144, enable_prefix_caching=prefix_caching
    )
    with pytest.raises(ValueError) as exc:
        plan_memory(
            get_model("qwen3.5-35b-a3b"), get_gpu("h200"), engine, SpecDecodeConfig(num_spec_tok=k)
        )
    m = _FIRST.search(str(exc.value))
    assert m, str(exc.value)
    assert abs(int(m.group(1)) - vllm_blocks) <= 0.03 * vllm_blocks, (m.group(1), vllm_blocks)


def test_cli_refuses_the_call10_start_up_as_vllm_logged_it() -> None:
    # vLLM's line in the committed log, with capsim's block count in place of vLLM's 660
    logged = _FIRST.search(CALL10_LOG.read_text())
    assert logged and logged.group(1) == "660"
    args = ["memory", "-m", "qwen3.5-35b-a3b", "-g", "h200", "--vllm-version", "0.26.0"]
    args += ["--max-model-len", "262144", "--gmu", "0.6", "-k", "0", "--enable-prefix-caching"]
    refused = CliRunner().invoke(main, args)
    assert refused.exit_code != 0
    ours = _FIRST.search(refused.output)
    assert ours, refused.output
    assert ours.group(0).replace(ours.group(1), "660") == logged.group(0)
    # call 12's s_g060_k0_pc_mns256_kv passed the check: 256 sequences start
    ok = CliRunner().invoke(main, [*args, "--max-num-seqs", "256"])
    assert ok.exit_code == 0, ok.output
    assert "Mamba cache blocks" not in ok.output
