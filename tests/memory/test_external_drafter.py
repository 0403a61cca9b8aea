"""An external draft model in the memory plan (issue 25, session 13): each rule with its source.

The drafter is the one two public start-ups run (club-3090 #1085/#1086: Qwen3.8-27B FP8 on
2x RTX 5090, DFlash2 n=7, syvai/Qwen3.8-27B-DFlash2-W4A16 through club-3090's vendored
backport of vLLM PR #52816 on 0.27.1); its file cites a public source for every value.
"""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import pytest

from capsim.config import EngineConfig, SimConfig, SpecDecodeConfig
from capsim.drafter import DrafterSpec, drafter_from_json, drafters_in
from capsim.memory import drafter_memory as dm
from capsim.memory.log_validate import validate_dir
from capsim.memory.memory_plan import group_layout, plan_memory
from capsim.units import GiB, cdiv

ROOT = Path(__file__).resolve().parents[2]
LOGS = ROOT / "experiments" / "vllm_logs"
DRAFTER_FILE = LOGS / "drafters" / "syvai-qwen3.8-27b-dflash2-w4a16.json"
ROWS = ("qwen38-27b-fp8-2x5090-c3090i1085", "qwen38-27b-fp8-2x5090-c3090i1086")


@pytest.fixture(scope="module")
def drafter() -> DrafterSpec:
    return drafter_from_json(DRAFTER_FILE)


@pytest.fixture(scope="module")
def results() -> dict[str, object]:
    return {r.row_id: r for r in validate_dir(LOGS) if r.row_id in ROWS}


def test_every_drafter_file_loads_and_cites_every_value() -> None:
    files = drafters_in(LOGS / "drafters")
    assert files, "no drafter files"
    for path in files.values():
        raw = json.loads(path.read_text())
        for name, entry in raw["fields"].items():
            assert entry.get("source"), f"{path.name}: {name} has no source"
        drafter_from_json(path)


def test_a_value_without_a_source_is_refused(tmp_path: Path) -> None:
    raw = json.loads(DRAFTER_FILE.read_text())
    raw["fields"]["num_layers"] = {"value": 5}
    bad = tmp_path / "d.json"
    bad.write_text(json.dumps(raw))
    with pytest.raises(ValueError, match=r"fields\.num_layers=.* needs a source"):
        drafter_from_json(bad)


def test_bad_values_are_one_line_errors_naming_the_field(drafter: DrafterSpec) -> None:
    with pytest.raises(ValueError, match=r"^drafter\.num_layers=0: must be an int >= 1$"):
        replace(drafter, num_layers=0)
    with pytest.raises(ValueError, match=r"^drafter\.linear_format='int3'"):
        replace(drafter, linear_format="int3")
    with pytest.raises(ValueError, match=r"^drafter\.model_runner='v3'"):
        replace(drafter, model_runner="v3")


def test_shapes_reproduce_the_published_checkpoint_size(drafter: DrafterSpec) -> None:
    # syv-ai/qwen38-27b-rtx3090 docs/optimizations.md: the W4A16 drafter is 1.19 GB (its
    # drafter/quant_dflash2.py prints bytes / 2**30); from the cited shapes and formats:
    assert drafter.checkpoint_bytes is not None
    assert dm.checkpoint_bytes(drafter) == pytest.approx(drafter.checkpoint_bytes, rel=0.01)


def test_bf16_parameter_count_is_the_published_1_924_g(drafter: DrafterSpec) -> None:
    # find_string id 71641068593 (z-lab/Qwen3.8-27B-DFlash2 config.json and safetensors
    # header): 1.924 G parameters in bf16; 2 B each with every linear unquantized.
    bf16 = replace(drafter, linear_format="none", fc_quantized=False)
    params = dm.checkpoint_bytes(bf16) / 2
    assert params == pytest.approx(1.924e9, rel=0.001)


def test_tp_shards_the_layers_and_replicates_fc_convs_selector(drafter: DrafterSpec) -> None:
    # vLLM 0.27.1 qwen3_dflash.py: QKVParallelLinear / RowParallelLinear / Qwen2MLP shard,
    # fc is a ReplicatedLinear; the backport's convs and selector are replicated.
    one, two = dm.drafter_weight_parts(drafter, 1), dm.drafter_weight_parts(drafter, 2)
    assert two["layers.linears"] == pytest.approx(one["layers.linears"] / 2, rel=1e-6)
    for part in ("fc", "convs", "selector", "rotary_cache"):
        assert two[part] == one[part]
    assert two["fused_context_kv"] * 2 == one["fused_context_kv"]  # 8 KV heads -> 4 per rank


def test_groups_follow_the_smallest_bucket_the_drafters_five_layers() -> None:
    # syv-ai docs/optimizations.md: with the drafter "vLLM sizes a hybrid model's KV groups by
    # the smallest bucket ... its 5 sliding-window layers, so the target's 16 attention
    # layers were padded to 20 and its 48 GDN layers to 50" (kv_cache_utils.py
    # _get_kv_cache_groups_uniform_page_size).
    group_size, attn_groups, gdn_groups, gdn_padding = group_layout(16, 48, 5)
    assert (group_size, attn_groups * group_size, gdn_groups * group_size) == (5, 20, 50)
    assert gdn_padding == 2
    assert group_layout(16, 48) == (16, 1, 3, 0)  # without the drafter


def test_sliding_window_cap_reproduces_the_published_385_blocks(drafter: DrafterSpec) -> None:
    # syv-ai docs/gotchas.md item 32: the drafter's layers at 16-token blocks "took
    # cdiv(2047 + 4096, 16) + 1 = 385 blocks" (SlidingWindowSpec.max_admission_blocks_per_request)
    got = dm.admission_blocks(drafter, block_tok=16, in_flight_tok=4096, max_model_len=65536)
    assert got == 385


def test_async_scheduling_doubles_the_in_flight_tokens() -> None:
    # vLLM 0.27.1 config/vllm.py max_concurrent_batches: V2 runner pp + 1, V1 2 at pp 1.
    assert dm.max_concurrent_batches(async_scheduling=True, v2_runner=True) == 2
    assert dm.max_concurrent_batches(async_scheduling=True, v2_runner=False) == 2
    assert dm.max_concurrent_batches(async_scheduling=False, v2_runner=True) == 1


def test_drafter_pages_equal_the_targets_at_bf16_and_fp8(drafter: DrafterSpec) -> None:
    # syv-ai docs/gotchas.md item 32: the target's 4 KV heads x 256 and the drafter's 8 x 128
    # both come to 4096 B per token per layer at bf16 (TP1), so blocks stay the target's.
    for kv in ("bfloat16", "fp8"):
        per_tok = dm.drafter_attn_bytes_per_tok(drafter, 2, kv)
        assert dm.drafter_block_tok(drafter, 2, kv, 1648 * per_tok) == 1648


def _plan(drafter: DrafterSpec | None):  # type: ignore[no-untyped-def]
    from capsim.gpus import get_gpu
    from capsim.models import model_from_hf_config

    model = replace(model_from_hf_config(LOGS / "models" / "qwen3.8-27b.json"), quantization="fp8")
    engine = EngineConfig(
        tp=2,
        vllm_version="0.27.1",
        max_num_seqs=1,
        max_num_batched_tokens=8192,
        max_model_len=65536,
        kv_cache_dtype="bfloat16",
        enable_prefix_caching=True,
    )
    spec = SpecDecodeConfig(num_spec_tok=7, drafter=drafter)
    return plan_memory(model, get_gpu("RTX5090"), engine, spec, refuse=False)


def test_an_external_drafter_replaces_mtp_and_is_charged(drafter: DrafterSpec) -> None:
    with_d, mtp = _plan(drafter), _plan(None)
    assert with_d.weights_breakdown_bytes["mtp"] == 0 and mtp.weights_breakdown_bytes["mtp"] > 0
    assert with_d.weights_breakdown_bytes["drafter"] == sum(
        dm.drafter_weight_parts(drafter, 2).values()
    )
    # the V2 runner charges no CUDA-graph estimate (v1/worker/gpu/model_runner.py returns 0)
    assert with_d.cudagraph_bytes == 0 and mtp.cudagraph_bytes > 0
    assert with_d.model_runner == "v2"
    assert with_d.num_draft_groups == 1 and with_d.group_size == 5
    # a request past the window holds the cap, not its whole context, in the drafter group
    assert (
        with_d.draft_blocks_for(60000)
        == with_d.draft_admission_blocks
        == (cdiv(2047 + 2 * 8192, with_d.draft_block_size_tok) + 1)
    )


def test_the_rows_size_lines_match_only_with_the_drafters_groups(results) -> None:  # type: ignore[no-untyped-def]
    # Logged: 451,603 tokens (3.06x @147,456) and 214,135 (3.27x @65,536) with 11.15 GiB.
    for rid in ROWS:
        c = results[rid].comparison
        assert c is not None and c.pinned is not None
        assert c.errors["kv_cache_tokens_pinned"] == pytest.approx(0.0, abs=0.001), rid
        assert c.settings.spec.drafter is not None
        no_drafter = replace(c.settings.spec, drafter=None)
        pin = replace(c.settings.engine, kv_cache_memory_bytes=round(11.15 * GiB))
        plain = plan_memory(c.settings.model, c.settings.gpu, pin, no_drafter, refuse=False)
        tokens = {ROWS[0]: 451_603, ROWS[1]: 214_135}[rid]
        assert abs(plain.vllm_kv_cache_tokens() / tokens - 1) > 0.10, rid


def test_the_rows_available_kv_is_within_the_issue_target(results) -> None:  # type: ignore[no-untyped-def]
    for rid in ROWS:
        r = results[rid]
        assert r.role == "prediction"
        assert abs(r.comparison.errors["available_kv"]) <= 0.10, rid


def test_to_dict_omits_an_absent_drafter_so_point_ids_stay() -> None:
    d = SimConfig(model="qwen3.5-35b-a3b").to_dict()
    assert "drafter" not in d["spec"]


def test_the_log_parser_reads_the_speculative_model() -> None:
    from capsim.memory.vllm_log import parse_vllm_log

    line = (
        "INFO 08-21 23:19:41 [api_utils.py:273] non-default args: {'model': 'x', "
        "'speculative_config': {'method': 'dflash', 'model': '/m/dflash2', "
        "'num_speculative_tokens': 7}}"
    )
    log = parse_vllm_log(line)
    assert (log.speculative_method, log.speculative_model, log.num_speculative_tokens) == (
        "dflash",
        "/m/dflash2",
        7,
    )


def test_capsim_memory_takes_a_drafter_file() -> None:
    from click.testing import CliRunner

    from capsim.commands.main import main

    args = [
        "memory",
        "-m",
        str(LOGS / "models" / "qwen3.8-27b.json"),
        "-g",
        "rtx5090",
        "--tp",
        "2",
        "--vllm-version",
        "0.27.1",
        "-q",
        "fp8",
        "--max-num-seqs",
        "1",
        "--max-num-batched-tokens",
        "8192",
        "--max-model-len",
        "65536",
        "--kv-cache-dtype",
        "bfloat16",
        "--enable-prefix-caching",
        "-k",
        "7",
        "--drafter",
        str(DRAFTER_FILE),
        "--json",
    ]
    out = CliRunner().invoke(main, args)
    assert out.exit_code == 0, out.output
    plan = json.loads(out.output)
    assert (plan["num_draft_groups"], plan["group_size"], plan["model_runner"]) == (1, 5, "v2")
    assert plan["weights_breakdown_bytes"]["mtp"] == 0
