"""Rules read from vLLM release sources in session 3 (issue 25), each with the log line or the
source it reproduces."""

from __future__ import annotations

from pathlib import Path

from capsim.config import EngineConfig, SpecDecodeConfig
from capsim.gpus import get_gpu
from capsim.memory.memory_plan import plan_memory
from capsim.memory.terms import Source
from capsim.memory.vllm_log import read_vllm_log
from capsim.models import get_model
from capsim.vllm_rules import v0_batch_defaults

LOGS = Path(__file__).resolve().parents[2] / "experiments" / "vllm_logs"


def _plan(version: str, **kw: object):  # type: ignore[no-untyped-def]
    return plan_memory(
        get_model("qwen3.5-35b-a3b"),
        get_gpu("H200"),
        EngineConfig(gmu=0.9, vllm_version=version, **kw),  # type: ignore[arg-type]
        SpecDecodeConfig(),
    )


def test_runner_buffers_charged_from_0_27_0() -> None:
    # 0.27.0 utils/mem_utils.py: total_consumed = init-snapshot free - free after the profile
    # (the runner is built after the snapshot); 0.26.0 summed weights + non-torch + peak
    old, new = _plan("0.26.0"), _plan("0.27.0")
    assert old.terms["runner_buffers"].source is Source.NOT_CHARGED
    assert old.runner_buffers_bytes == 0
    assert new.terms["runner_buffers"].source is Source.MODELLED
    assert new.runner_buffers_bytes > 0
    # everything else equal, the pool shrinks by exactly the buffers
    extra = new.runner_buffers_bytes
    assert old.kv_budget_bytes - new.kv_budget_bytes == extra


def test_0_27_peak_line_includes_the_graph_estimate() -> None:
    # "... 1.66 GiB for peak activation, and 0.14 GiB for CUDAGraph memory" with
    # "0.2 GiB (estimated)": 0.27.1 gpu_worker.py peak_activation_memory = transient
    # headroom + applied estimate, so the torch peak is 1.66 - 0.2
    log = read_vllm_log(LOGS / "excerpts" / "qwen38-27b-fp8-2x3090-c3090pr1139.log")
    assert log.cudagraph_estimate_gib == 0.2
    assert log.peak_activation_gib == 1.46


def test_validation_takes_the_excerpts_torch_peak() -> None:
    from capsim.memory.log_validate import validate_dir

    res = {r.row_id: r for r in validate_dir(LOGS)}
    row = res["qwen38-27b-fp8-2x3090-c3090pr1139"].comparison
    assert row is not None
    peak = next(t for t in row.rows if t.term.startswith("peak activation"))
    assert peak.log == 1.46


def test_v0_batch_defaults() -> None:
    # 0.6.4.post1 config.py SchedulerConfig + engine/arg_utils.py: chunked prefill on above
    # 32K (then 512 tokens), else max(max_model_len, 2048); 256 sequences
    assert v0_batch_defaults(20000) == (256, 20000)
    assert v0_batch_defaults(1024) == (256, 2048)
    assert v0_batch_defaults(35000) == (256, 512)
    eng = EngineConfig(vllm_version="0.6.4", max_model_len=20000)
    assert eng.resolved_batch_defaults(get_gpu("RTX3090")) == (256, 20000)
    # the V1 engine keeps its GPU tiers
    assert EngineConfig(vllm_version="0.26").resolved_batch_defaults(get_gpu("RTX3090")) == (
        256,
        2048,
    )


def test_consumed_line_is_compared_on_0_27_rows() -> None:
    # "15.25 GiB for consumed memory (weights + non-torch)" (c3090 PR #1139, 0.27.1): capsim's
    # weights + non-torch + runner buffers (charged inside it since 0.27.0) sit beside it
    from capsim.memory.log_validate import validate_dir

    res = {r.row_id: r for r in validate_dir(LOGS)}
    c = res["qwen38-27b-fp8-2x3090-c3090pr1139"].comparison
    assert c is not None and c.plan is not None
    row = next(t for t in c.rows if t.term.startswith("consumed"))
    assert row.log == 15.25
    want = c.plan.weights_bytes + c.plan.non_torch_bytes + c.plan.runner_buffers_bytes
    assert c.plan.runner_buffers_bytes > 0
    assert row.capsim == round(want / 1024**3, 2)


def test_v0_row_profiles_its_whole_prompt() -> None:
    # vllm#10517 (V0, RTX 3090, max_model_len 20000, no chunked prefill): the profile run
    # covers max(max_model_len, 2048) = 20000 tokens; peak_torch_memory 17.06 GiB minus the
    # 14.99 GiB of weights puts the logged peak near 2.07 GiB
    from capsim.memory.log_validate import validate_dir

    res = {r.row_id: r for r in validate_dir(LOGS)}
    c = res["llama31-8b-3090-vllm10517"].comparison
    assert c is not None and c.plan is not None
    assert c.plan.max_num_batched_tokens == 20000 and c.plan.max_num_seqs == 256
    assert abs(c.plan.activation_peak_bytes / 1024**3 - (17.06 - 14.99)) < 0.25
