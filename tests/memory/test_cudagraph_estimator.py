"""vLLM's CUDA-graph estimator: capture sizes per release, two-graph extrapolation, refusals.

Each expected value is a line a real vLLM start-up printed (source named in the test).
"""

from __future__ import annotations

import pytest

from capsim.memory.cudagraph import (
    FULL,
    PER_GRAPH_FLOOR_BYTES,
    PIECEWISE,
    CaptureDescs,
    GraphSamples,
    capture_descs,
    estimate_bytes,
    first_full_capture_units,
)
from capsim.memory.refusals import mamba_blocks
from capsim.memory.release_rules import parse_release, rule

MiB = 1024**2


def test_h200_026_k3_captures_49_sizes_per_mode() -> None:
    # REAL_VLLM_H200.md (vLLM 0.26.0, H200, MTP k=3, max_num_seqs 1024, mnbt 8192):
    # "FULL_AND_PIECEWISE graphs at 49 capture sizes up to 512" (51 before rounding to 4s).
    d = capture_descs(
        vllm_version="0.26.0", max_num_seqs=1024, num_spec_tok=3, max_num_batched_tokens=8192
    )
    assert d.log_line() == (
        "Profiling CUDA graph memory: PIECEWISE=49 (largest=512), FULL=49 (largest=512)"
    )
    assert all(s % 4 == 0 for s in d.piecewise_tok)


def test_club3090_piecewise_only_five_graphs() -> None:
    # club-3090 #584 (vLLM 0.24.0, FlashInfer without FULL graphs for drafts, max_num_seqs 2,
    # MTP 3): "Profiling CUDA graph memory: PIECEWISE=5 (largest=16)".
    d = capture_descs(
        vllm_version="0.24.0",
        max_num_seqs=2,
        num_spec_tok=3,
        max_num_batched_tokens=8192,
        full_graphs=False,
    )
    assert d.log_line() == "Profiling CUDA graph memory: PIECEWISE=5 (largest=16)"


def test_mnbt_appended_only_from_0_20_1() -> None:
    # config/vllm.py:_set_cudagraph_sizes appends max_num_batched_tokens when it fits
    # (absent in the 0.20.0 wheel, present in 0.20.1).
    kw = {"max_num_seqs": 256, "num_spec_tok": 0, "max_num_batched_tokens": 300}
    assert 300 not in capture_descs(vllm_version="0.20.0", **kw).piecewise_tok
    assert 300 in capture_descs(vllm_version="0.20.1", **kw).piecewise_tok


def test_sm100_ceiling_from_0_28() -> None:
    kw = {"max_num_seqs": 1024, "num_spec_tok": 0, "max_num_batched_tokens": 16384, "sm100": True}
    assert capture_descs(vllm_version="0.27.0", **kw).largest_tok == 512
    assert capture_descs(vllm_version="0.28.0", **kw).largest_tok == 1024


def test_estimate_is_max_first_plus_extrapolated_seconds() -> None:
    # gpu_model_runner.py:profile_cudagraph_memory (0.20.0-0.33.0): FULL and PIECEWISE share
    # a pool (max of first captures) and each mode adds (n-1) * max(second, 1 MiB).
    d = CaptureDescs(piecewise_tok=(512, 496, 480), full_tok=(512, 508))
    s = {
        PIECEWISE: GraphSamples(100 * MiB, 0, "t"),
        FULL: GraphSamples(300 * MiB, 5 * MiB, "t"),
    }
    assert estimate_bytes(d, s) == 300 * MiB + 2 * PER_GRAPH_FLOOR_BYTES + 1 * 5 * MiB


def test_first_full_capture_units_follow_profile_seq_lens() -> None:
    # profile_seq_lens = min(max_model_len, mnbt // size) for the first FULL capture
    # (0.26.0 gpu_model_runner.py:profile_cudagraph_memory): 512 capture tokens x 16 at k=3
    # and at k=0 alike, so the #50780 transient does not depend on k (vLLM logged a smaller
    # estimate at k=0, 0.55 GiB, than at k=3, 0.74 GiB: experiments/vllm_logs rows
    # h200-35b-g090-k0-s2call4 / h200-35b-g090-k3-s2call3).
    for k in (0, 3):
        d = capture_descs(
            vllm_version="0.26.0", max_num_seqs=1024, num_spec_tok=k, max_num_batched_tokens=8192
        )
        assert d.full_tok[0] == 512
        assert first_full_capture_units(d, 8192, 262144) == 512 * 16
        assert first_full_capture_units(d, 16384, 262144) == 512 * 32
        assert first_full_capture_units(d, 8192, 8) == 512 * 8


def test_transient_does_not_scale_with_mnbt() -> None:
    # session 2's rule (capture tokens x profile_seq_lens) predicted 1.04 GiB for the k=3 mnbt
    # 16384 start-up; vLLM logged 0.74, as at mnbt 8192 (experiments/vllm_logs rows
    # h200-35b-g090-k3-s2call3 and h200-35b-g090-k3-m16k-s3call7): the transient is one size
    # per shape, scaled only by the GDN width per rank
    from capsim.config import EngineConfig, SpecDecodeConfig
    from capsim.gpus import get_gpu
    from capsim.memory.cudagraph import gdn_transient_bytes
    from capsim.memory.memory_plan import plan_memory
    from capsim.models import get_model

    assert 290 * MiB < gdn_transient_bytes(8192, 3) < 315 * MiB
    assert gdn_transient_bytes(2048, 3) * 4 == pytest.approx(gdn_transient_bytes(8192, 3), abs=4)
    m, g, spec = get_model("qwen3.5-35b-a3b"), get_gpu("H200"), SpecDecodeConfig()
    est = [
        plan_memory(
            m,
            g,
            EngineConfig(gmu=0.9, vllm_version="0.26.0", max_num_batched_tokens=t),
            spec,
        ).cudagraph_estimate_bytes
        for t in (8192, 16384)
    ]
    assert est[0] == est[1]
    assert abs(est[1] / 1024**3 - 0.74) <= 0.011  # the logged 0.74 GiB of both start-ups


def test_mamba_refusal_reproduces_the_h200_gmu_06_start_up() -> None:
    # REAL_VLLM_H200.md, gmu 0.6: "ValueError: max_num_seqs (1024) exceeds available Mamba
    # cache blocks (339)."
    r = mamba_blocks(max_num_seqs=1024, num_blocks=339, has_mamba=True, full_graphs=True)
    assert r is not None
    assert r.vllm_message.startswith(
        "ValueError: max_num_seqs (1024) exceeds available Mamba cache blocks (339)."
    )
    assert mamba_blocks(max_num_seqs=339, num_blocks=339, has_mamba=True, full_graphs=True) is None
    assert (
        mamba_blocks(max_num_seqs=1024, num_blocks=339, has_mamba=True, full_graphs=False) is None
    )


@pytest.mark.parametrize(
    ("text", "want"), [("0.26", (0, 26, 0)), ("v0.20.1", (0, 20, 1)), ("0.10.2rc1", (0, 10, 2))]
)
def test_parse_release(text: str, want: tuple[int, int, int]) -> None:
    assert parse_release(text) == want


def test_dev_build_is_refused_not_read_as_0_1() -> None:
    with pytest.raises(ValueError, match="development build"):
        parse_release("0.1.dev12345+g1234abc")


def test_release_rules_switch_at_the_wheel_they_were_read_in() -> None:
    assert rule("kv_size_line_concurrency", "0.20.0") is False
    assert rule("kv_size_line_concurrency", "0.20.1") is True
    assert rule("charge_cudagraph_estimate", "0.19.0") is False
    assert rule("charge_cudagraph_estimate", "0.20.0") is True
    assert rule("align_mode_checkpoint_lcm", "0.32.0") is False
    assert rule("align_mode_checkpoint_lcm", "0.33.0") is True


def test_gpu_totals_are_what_torch_reports_and_can_be_given() -> None:
    # REAL_VLLM_H200.md: "Free memory on device (139.29/139.8 GiB)" (nvidia-smi says 140.40);
    # llm-d-planner H100 logs: "(77.64/79.19 GiB)"
    import json

    from click.testing import CliRunner

    from capsim.commands.main import main
    from capsim.gpus import get_gpu

    gib = 1024**3
    assert round(get_gpu("H200").total_memory_bytes / gib, 2) == 139.80
    assert round(get_gpu("H100").total_memory_bytes / gib, 2) == 79.19
    args = ["memory", "-m", "qwen3.5-35b-a3b", "-g", "h200", "--gmu", "0.9", "--json"]
    a = json.loads(CliRunner().invoke(main, args).output)
    b = json.loads(CliRunner().invoke(main, [*args, "--gpu-total-gib", "140.40"]).output)
    assert abs(b["total_memory_bytes"] - a["total_memory_bytes"] - 0.6 * gib) < 2
    assert b["kv_budget_bytes"] > a["kv_budget_bytes"]


def test_old_size_line_formula_reproduces_vllm_40691() -> None:
    """vLLM 0.19.0 on an H20 (vllm#40691): "GPU KV cache size: 290,864 tokens" beside
    "Maximum concurrency for 32,768 tokens per request: 33.04x". Up to 0.20.0 the size line
    is num_blocks // len(groups) * block_size (v1/core/kv_cache_utils.py), since 0.20.1
    concurrency x max_model_len. 1487 blocks of 784 tokens, 4 groups, 45 blocks per request
    give both lines."""
    from pathlib import Path

    from capsim.config import EngineConfig, SpecDecodeConfig
    from capsim.gpus import get_gpu
    from capsim.memory.memory_plan import plan_memory
    from capsim.models import model_from_hf_config

    root = Path(__file__).resolve().parents[2] / "experiments" / "vllm_logs" / "models"
    model = model_from_hf_config(root / "qwen3.5-27b.json")
    kw = {"max_model_len": 32768, "num_gpu_blocks_override": 1487, "limit_mm_per_prompt": 0}
    old = plan_memory(
        model,
        get_gpu("H20"),
        EngineConfig(vllm_version="0.19.0", **kw),
        SpecDecodeConfig(num_spec_tok=0),
    )
    assert old.block_size_tok == 784
    assert old.vllm_kv_cache_tokens() == 290_864
    assert round(old.num_blocks / old.blocks_per_request(32768), 2) == 33.04
    new = plan_memory(
        model,
        get_gpu("H20"),
        EngineConfig(vllm_version="0.20.1", **kw),
        SpecDecodeConfig(num_spec_tok=0),
    )
    assert new.vllm_kv_cache_tokens() == int(1487 / 45 * 32768)


def test_hybrid_prefix_caching_default_by_release() -> None:
    # engine/arg_utils.py: hybrids unsupported (0.19-0.21), opt-in (0.26-0.27), default (0.28+)
    assert rule("hybrid_prefix_caching_default", "0.19.0") is False
    assert rule("hybrid_prefix_caching_default", "0.27.1") is False
    assert rule("hybrid_prefix_caching_default", "0.28.0") is True
