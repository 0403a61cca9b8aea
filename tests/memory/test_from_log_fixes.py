"""`capsim memory --from-log` on real log lines (issue 25 item 5): one test per fix.

Each log line is the text vLLM prints (the file and release it comes from are named)."""

from __future__ import annotations

from pathlib import Path

import pytest
from click.testing import CliRunner

from capsim.commands.main import main
from capsim.memory.log_fixes import MAX_LINE_CHARS, preset_for, serve_command
from capsim.memory.vllm_log import parse_vllm_log, read_vllm_log
from capsim.models import model_from_hf_config, quant_ignore

EXCERPTS = Path(__file__).resolve().parents[2] / "experiments" / "vllm_logs" / "excerpts"


def test_profiling_override_is_not_a_user_pin() -> None:
    # 0.26.0 gpu_model_runner._init_minimal_kv_cache_for_profiling logs this with a budget of 0
    log = parse_vllm_log(
        "INFO [kv_cache_utils.py:829] Overriding num_gpu_blocks=0 with "
        "num_gpu_blocks_override=512\n"
    )
    assert log.num_gpu_blocks_override is None and log.num_gpu_blocks is None
    # a user's pin overrides a real block count
    pin = parse_vllm_log(
        "INFO [kv_cache_utils.py:829] Overriding num_gpu_blocks=2208 with "
        "num_gpu_blocks_override=300\n"
    )
    assert pin.num_gpu_blocks_override == 300


def test_every_llmd_excerpt_keeps_its_real_pool() -> None:
    # 21 excerpts carry the profiling line; none of them pinned the pool
    for path in EXCERPTS.glob("*llmdplanner.log"):
        assert read_vllm_log(path).num_gpu_blocks_override is None, path.name


def test_speculative_config_none_means_k0() -> None:
    line = (
        "Initializing a V1 LLM engine (v0.19.0) with config: model='m', "
        "speculative_config=None, tokenizer='m', tensor_parallel_size=1"
    )
    assert parse_vllm_log(line).num_speculative_tokens == 0


def test_vllm_serve_command_line_gives_tp_gmu_and_more() -> None:
    # vllm#26646's command line (the excerpt's first line)
    got = serve_command(
        "$ vllm serve /mnt/Qwen3-Next-80B-A3B-Instruct-int4-mixed-AutoRound/ "
        "--tensor-parallel-size 2 "
        "--max-model-len 215040 --gpu-memory-utilization 0.95 --max-num-seqs 2 "
        '--speculative-config \'{"method": "mtp", "num_speculative_tokens": 2}\' '
        "--no-enable-prefix-caching"
    )
    assert got["tp"] == 2 and got["gmu"] == 0.95 and got["max_num_seqs"] == 2
    assert got["num_speculative_tokens"] == 2 and got["enable_prefix_caching"] is False
    assert got["model"].endswith("AutoRound")
    log = read_vllm_log(EXCERPTS / "qwen3next-80b-ar4-tp2-vllm26646.log")
    assert (log.tp, log.gmu) == (2, 0.95)


def test_vllm_disabling_prefix_caching_line_wins() -> None:
    log = parse_vllm_log(
        "non-default args: {'enable_prefix_caching': True}\n"
        "WARNING [core.py:270] Disabling prefix caching: model has non-causal attention layers.\n"
    )
    assert log.enable_prefix_caching is False and log.prefix_caching_disabled_by_vllm


def test_chunked_prefill_line_gives_max_num_batched_tokens() -> None:
    log = parse_vllm_log(
        "INFO [scheduler.py:253] Chunked prefill is enabled with max_num_batched_tokens=8192.\n"
    )
    assert log.max_num_batched_tokens == 8192


def test_compressed_tensors_is_read_whole() -> None:
    line = "Initializing a V1 LLM engine (v0.24.0) with config: quantization=compressed-tensors, x"
    assert parse_vllm_log(line).quantization == "compressed-tensors"


def test_piecewise_only_fallback_is_read() -> None:
    # club-3090 #104: "Profiling CUDA graph memory: PIECEWISE=5 (largest=16)", no FULL
    log = read_vllm_log(EXCERPTS / "qwen36-27b-ar4-2x3090-c3090i104.log")
    assert log.full_graphs is False


def test_debug_graph_samples_are_read() -> None:
    log = read_vllm_log(EXCERPTS / "llama31-8b-h100-tp1-llmdplanner.log")
    assert log.cudagraph_samples_mib["FULL"] == (260.0, 51, 6.0)


def test_architecture_maps_an_hf_id_or_path_to_a_preset() -> None:
    assert preset_for("Qwen3_5MoeForConditionalGeneration", ["/models/my-35b-ft"], None) == (
        "qwen3.5-35b-a3b"
    )
    # no size tag: the logged weights decide (67.1 GiB is the 35B's bf16 checkpoint)
    assert preset_for("Qwen3_5MoeForConditionalGeneration", ["/models/ft"], 67.1) == (
        "qwen3.5-35b-a3b"
    )
    assert preset_for("LlamaForCausalLM", ["x"], 15.0) is None


def test_dev_build_is_refused_naming_the_field(tmp_path: Path) -> None:
    p = tmp_path / "dev.log"
    p.write_text(
        "INFO vLLM API server version 0.1.dev9999+g1234abcd\n"
        "INFO Free memory on device (139.29/139.8 GiB) on startup.\n"
        "INFO Available KV cache memory: 49.68 GiB\n"
    )
    res = CliRunner().invoke(main, ["memory", "--from-log", str(p), "-m", "qwen3.5-35b-a3b"])
    assert res.exit_code != 0 and "vllm_version='0.1.dev9999" in res.output


def test_no_total_memory_line_is_not_a_silent_b200(tmp_path: Path) -> None:
    p = tmp_path / "x.log"
    p.write_text("INFO [gpu_worker.py] Available KV cache memory: 10.00 GiB\n")
    res = CliRunner().invoke(main, ["memory", "--from-log", str(p), "-m", "qwen3.5-35b-a3b"])
    assert res.exit_code != 0 and "Free memory on device" in res.output


def test_missing_lines_are_named(tmp_path: Path) -> None:
    p = tmp_path / "x.log"
    p.write_text(
        "INFO Free memory on device (139.29/139.8 GiB) on startup.\n"
        "INFO Available KV cache memory: 49.68 GiB\n"
    )
    res = CliRunner().invoke(
        main, ["memory", "--from-log", str(p), "-m", "qwen3.5-35b-a3b", "--json"]
    )
    assert res.exit_code == 0, res.output
    assert "Model loading took X GiB" in res.output


def test_parsing_is_bounded() -> None:
    # a 10 MB line is cut before any pattern or literal_eval sees it
    huge = "non-default args: {'tensor_parallel_size': 2, 'x': '" + "a" * 10_000_000 + "'}"
    log = parse_vllm_log(huge + "\nINFO Available KV cache memory: 1.00 GiB\n")
    assert log.tp == 2 and log.available_kv_gib == 1.0
    assert MAX_LINE_CHARS < 10_000_000


def test_ignore_list_keeps_gdn_and_shared_expert_unquantized(tmp_path: Path) -> None:
    # llm-compressor's Qwen3.5 MoE FP8 example ignore list (examples/quantization_w8a8_fp8)
    q = {
        "quant_method": "compressed-tensors",
        "format": "float-quantized",
        "ignore": [
            "re:.*lm_head",
            "re:visual.*",
            "re:.*mlp.gate$",
            "re:.*linear_attn.*",
            "re:.*mlp\\.shared_expert$",
        ],
    }
    assert quant_ignore({"quantization_config": q}) == ("gdn", "shared_expert")


def test_dense_hf_config_has_no_output_gate(tmp_path: Path) -> None:
    import json

    p = tmp_path / "config.json"
    p.write_text(
        json.dumps(
            {
                "num_hidden_layers": 32,
                "hidden_size": 4096,
                "num_attention_heads": 32,
                "num_key_value_heads": 8,
                "vocab_size": 128256,
                "intermediate_size": 14336,
            }
        )
    )
    assert model_from_hf_config(p).attn_output_gate is False


@pytest.mark.parametrize("name", ["qwen35-35b-tp4-gh50722.log", "qwen3-8b-a5000-lmcache3430.log"])
def test_real_excerpts_parse(name: str) -> None:
    assert read_vllm_log(EXCERPTS / name).lines_read > 0


def test_memory_takes_vllms_kv_cache_dtype_and_quantization_flags() -> None:
    import json

    args = ["memory", "-m", "qwen3.5-35b-a3b", "-g", "h200", "--gmu", "0.9", "--json"]
    base = json.loads(CliRunner().invoke(main, args).output)
    fp8 = json.loads(
        CliRunner().invoke(main, [*args, "--kv-cache-dtype", "fp8", "--quantization", "fp8"]).output
    )
    assert fp8["attn_bytes_per_tok_per_layer"] * 2 == base["attn_bytes_per_tok_per_layer"]
    assert fp8["weights_bytes"] < 0.6 * base["weights_bytes"]
    res = CliRunner().invoke(main, [*args, "--kv-cache-dtype", "int4"])
    assert res.exit_code != 0 and "--kv-cache-dtype" in res.output


def test_custom_all_reduce_off_drops_the_tp_non_torch_term() -> None:
    # llm-d H100 rows (custom all-reduce on): 0.25 GiB at TP1, 2.07 at TP2; vllm#50722's TP4
    # start-up with 'disable_custom_all_reduce': True logs 0.13 GiB
    from capsim.config import EngineConfig, SpecDecodeConfig
    from capsim.gpus import get_gpu
    from capsim.memory.memory_plan import plan_memory
    from capsim.models import get_model

    m, g, s = get_model("qwen3.5-35b-a3b"), get_gpu("H100"), SpecDecodeConfig(num_spec_tok=0)
    on = plan_memory(m, g, EngineConfig(tp=2, gmu=0.9), s)
    off = plan_memory(m, g, EngineConfig(tp=2, gmu=0.9, disable_custom_all_reduce=True), s)
    assert on.non_torch_bytes - off.non_torch_bytes == round(1.82 * 1024**3)
    assert serve_command("vllm serve m --disable-custom-all-reduce")["disable_custom_all_reduce"]
    log = read_vllm_log(EXCERPTS / "qwen35-35b-tp4-gh50722.log")
    assert log.disable_custom_all_reduce is True
