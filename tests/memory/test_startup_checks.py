"""vLLM 0.26's Mamba-blocks start-up refusal, reproduced by capsim (issue 21)."""

from __future__ import annotations

import pytest

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
