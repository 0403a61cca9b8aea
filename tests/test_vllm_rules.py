"""The vLLM version rules table: each rule flips at its release, and the plan follows it."""

from __future__ import annotations

import pytest

from capsim.config import EngineConfig, SpecDecodeConfig
from capsim.gpus import get_gpu
from capsim.memory.memory_plan import plan_memory
from capsim.models import get_model
from capsim.vllm_rules import RULES, parse_version, rules_for, rules_table


@pytest.mark.parametrize(
    ("key", "before", "since"),
    [
        ("default_gmu", "0.19", "0.20"),
        ("charge_cudagraph_memory", "0.19", "0.20"),
        ("gdn_capture_transient", "0.25", "0.26"),
        ("large_gpu_batch_tier", "0.27", "0.28"),
        ("sm100_capture_ceiling", "0.27", "0.28"),
    ],
)
def test_rule_flips_at_its_release(key: str, before: str, since: str) -> None:
    rule = next(r for r in RULES if r.key == key)
    assert getattr(rules_for(before), key) == rule.before
    assert getattr(rules_for(since), key) == rule.since_value
    assert rule.before != rule.since_value
    assert rule.source  # every rule cites where it comes from
    assert key in rules_table()


def test_batch_tiers_follow_version_and_gpu() -> None:
    b200, h200, a100 = get_gpu("B200"), get_gpu("H200"), get_gpu("A100-80GB")
    assert rules_for("0.27").batch_defaults(b200) == (1024, 8192)
    assert rules_for("0.28").batch_defaults(b200) == (1024, 16384)
    assert rules_for("0.33").batch_defaults(h200) == (1024, 8192)
    # vLLM keeps A100s on the small tier despite 80 GB (get_batch_defaults, PR #17885)
    assert rules_for("0.33").batch_defaults(a100) == (256, 2048)
    assert rules_for("0.33").capture_ceiling(b200) == 1024
    assert rules_for("0.26").capture_ceiling(b200) == 512
    assert rules_for("0.33").capture_ceiling(h200) == 512


def test_parse_version_accepts_release_spellings_and_names_bad_ones() -> None:
    assert parse_version("v0.10.2") == (0, 10)
    assert parse_version("0.26.0rc1") == (0, 26)
    assert parse_version("0.33") == (0, 33)
    with pytest.raises(ValueError, match="vllm_version='latest'"):
        parse_version("latest")
    with pytest.raises(ValueError, match="vllm_version"):
        EngineConfig(vllm_version="x.y")


def test_graph_memory_is_charged_from_0_20_0() -> None:
    # the 0.20.0 wheel's envs.py defaults VLLM_MEMORY_PROFILER_ESTIMATE_CUDAGRAPHS to 1
    # (0.19.0: 0), although the log line says "default since v0.21.0"
    from capsim.memory.terms import Source

    model, gpu, spec = get_model("qwen3.5-35b-a3b"), get_gpu("B200"), SpecDecodeConfig()
    old = plan_memory(model, gpu, EngineConfig(gmu=0.9, vllm_version="0.19"), spec)
    new = plan_memory(model, gpu, EngineConfig(gmu=0.9, vllm_version="0.20.0"), spec)
    assert old.cudagraph_bytes == 0 and new.cudagraph_bytes > 0
    assert old.terms["cudagraph"].source is Source.NOT_CHARGED
    assert old.cudagraph_estimate_bytes > 0  # estimated and logged, just not charged


def test_b200_tier_changes_the_pool_at_0_28() -> None:
    model, gpu, spec = get_model("qwen3.5-35b-a3b"), get_gpu("B200"), SpecDecodeConfig()
    p27 = plan_memory(model, gpu, EngineConfig(gmu=0.9, vllm_version="0.27"), spec)
    p28 = plan_memory(model, gpu, EngineConfig(gmu=0.9, vllm_version="0.28"), spec)
    assert (p27.max_num_batched_tokens, p28.max_num_batched_tokens) == (8192, 16384)
    # the runner's mnbt-sized buffers double too; since 0.27.0 vLLM charges them inside
    # "consumed memory" (utils/mem_utils.py total_consumed = init-snapshot free - free after)
    assert p28.runner_buffers_bytes == 2 * p27.runner_buffers_bytes > 0
    assert "0.13 GiB" in p28.terms["runner_buffers"].detail
    assert "0.06 GiB" in p27.terms["runner_buffers"].detail


def test_v0_engine_before_0_8() -> None:
    assert rules_for("0.7").v1_engine is False and rules_for("0.8").v1_engine is True


def test_prefix_caching_defaults_from_the_release_as_vllm_does_for_hybrids() -> None:
    from capsim.memory.release_rules import rule

    for version, on in (("0.19", False), ("0.27", False), ("0.28", True), ("0.33", True)):
        assert EngineConfig(vllm_version=version).enable_prefix_caching is on
        assert rules_for(version).hybrid_prefix_caching_default is on
        assert rule("hybrid_prefix_caching_default", f"{version}.0") is on  # one fact
    assert EngineConfig(enable_prefix_caching=False).enable_prefix_caching is False
    assert EngineConfig(vllm_version="0.19", enable_prefix_caching=True).enable_prefix_caching
    with pytest.raises(ValueError, match=r"engine\.enable_prefix_caching='yes'"):
        EngineConfig(enable_prefix_caching="yes")  # type: ignore[arg-type]
