"""vLLM's own flag spellings: each parses to the config its capsim alias gives; command
lines written as in vLLM's docs run; no command declares a click option outside the
registry; library defaults follow the vLLM version as the CLI's do."""

from __future__ import annotations

import ast
import json
from pathlib import Path
from typing import Any

import click
import pytest
from click.testing import CliRunner

from capsim.commands.main import (
    ENGINE_OPTIONS,
    SPEC_OPTIONS,
    engine_config,
    main,
    spec_config,
)
from capsim.commands.options import options
from capsim.config import EngineConfig, SimConfig
from capsim.gpus import measured_gpu
from capsim.models import HF_IDS, get_model
from capsim.vllm_rules import resolve_gmu, rules_for

COMMANDS = Path(__file__).resolve().parents[2] / "capsim" / "commands"
MTP2 = json.dumps({"method": "mtp", "num_speculative_tokens": 2})


def _parse(args: list[str]) -> tuple[Any, Any, dict[str, Any]]:
    seen: dict[str, Any] = {}

    @click.command()
    @options(*ENGINE_OPTIONS, *SPEC_OPTIONS)
    def cmd(**params: Any) -> None:
        seen.update(params)
        seen["_engine"], seen["_spec"] = engine_config(params), spec_config(params)

    res = CliRunner().invoke(cmd, args)
    assert res.exit_code == 0, res.output
    return seen["_engine"], seen["_spec"], seen


@pytest.mark.parametrize(
    ("vllm", "old"),
    [
        (["--gpu-memory-utilization", "0.8"], ["--gmu", "0.8"]),
        (["--gpu-memory-utilization=0.75"], ["--gmu=0.75"]),
        (["--tensor-parallel-size", "2"], ["--tp", "2"]),
        (["-tp", "4"], ["--tp", "4"]),
        (["--speculative-config", MTP2], ["-k", "2"]),
        (["--speculative-config", MTP2], ["--spec-tokens", "2"]),
        (
            ["--speculative-config", '{"method": "qwen3_next_mtp", "num_speculative_tokens": 1}'],
            ["--num-speculative-tokens", "1"],
        ),
        (["--model", "Qwen/Qwen3.5-397B-A17B"], ["--model", "qwen3.5-397b-a17b"]),
        (["--kv-cache-dtype", "auto"], []),
    ],
)
def test_vllm_spelling_gives_the_old_config(vllm: list[str], old: list[str]) -> None:
    eng_v, spec_v, p_v = _parse(vllm)
    eng_o, spec_o, p_o = _parse(old)
    assert eng_v == eng_o and spec_v == spec_o and p_v["model"] == p_o["model"]


def test_engine_flags_reach_the_config() -> None:
    eng, _, _ = _parse(
        ["--kv-cache-dtype", "fp8", "--quantization", "fp8", "--max-cudagraph-capture-size", "64"]
    )
    assert (eng.kv_cache_dtype, eng.quantization, eng.max_cudagraph_capture_size) == (
        "fp8",
        "fp8",
        64,
    )
    assert eng.model_for(get_model("qwen3.5-35b-a3b")).quantization == "fp8"
    assert _parse([])[0].model_for(get_model("qwen3.5-35b-a3b")).quantization == "none"


@pytest.mark.parametrize(
    ("value", "needle"),
    [
        ('{"method": "eagle3", "num_speculative_tokens": 2}', "method='eagle3' is not modelled"),
        ('{"method": "ngram", "num_speculative_tokens": 2}', "method='ngram' is not modelled"),
        ('{"method": "mtp"}', "num_speculative_tokens=None"),
        ('{"method": "mtp", "num_speculative_tokens": 2, "model": "x"}', "key 'model'"),
        ("{mtp", "is not JSON"),
    ],
)
def test_bad_speculative_config_is_one_line(value: str, needle: str) -> None:
    res = CliRunner().invoke(main, ["memory", "--speculative-config", value])
    assert res.exit_code == 2
    err = [ln for ln in res.output.splitlines() if ln.startswith("Error")]
    assert len(err) == 1 and needle in err[0] and "--speculative-config" in err[0], res.output


def test_speculative_config_and_a_different_k_are_refused() -> None:
    res = CliRunner().invoke(main, ["memory", "--speculative-config", MTP2, "-k", "1"])
    assert res.exit_code != 0 and "disagrees" in res.output


# command lines as vLLM's docs write them (vllm serve's engine arguments), capsim's command
# in front; the recipe pages for Qwen3.5 / Qwen3-Next use these flags.
VLLM_DOC_LINES = [
    "memory --model Qwen/Qwen3.5-35B-A3B --tensor-parallel-size 1 --gpu-memory-utilization 0.9"
    " --max-model-len 32768 --speculative-config "
    '\'{"method": "mtp", "num_speculative_tokens": 3}\' --no-enable-prefix-caching',
    "memory --model Qwen/Qwen3-Next-80B-A3B-Instruct -tp 4 --max-num-seqs 256"
    " --max-num-batched-tokens 8192 --speculative-config "
    '\'{"method": "qwen3_next_mtp", "num_speculative_tokens": 2}\' --enforce-eager',
    "memory --model Qwen/Qwen3.5-397B-A17B --tensor-parallel-size 8 --enable-prefix-caching"
    " --kv-cache-dtype fp8 --max-cudagraph-capture-size 512",
    "simulate --model Qwen/Qwen3.5-35B-A3B --gpu-memory-utilization 0.9 --max-num-seqs 64"
    ' --speculative-config \'{"method": "mtp", "num_speculative_tokens": 1}\''
    " --dataset-name sharegpt --num-prompts 8 --max-concurrency 4 --step-time roofline",
]


@pytest.mark.parametrize("line", VLLM_DOC_LINES)
def test_vllm_doc_command_lines_run(line: str) -> None:
    import shlex

    res = CliRunner().invoke(main, shlex.split(line))
    assert res.exit_code == 0, res.output


def test_vllm_doc_line_plans_what_the_capsim_line_plans() -> None:
    vllm = CliRunner().invoke(main, ["memory", "--json", *map(str, _doc_args())])
    capsim = CliRunner().invoke(
        main,
        ["memory", "--json", "-m", "qwen3.5-35b-a3b", "--tp", "1", "--gmu", "0.9", "-k", "3"],
    )
    assert vllm.exit_code == capsim.exit_code == 0
    assert json.loads(vllm.output) == json.loads(capsim.output)


def _doc_args() -> list[str]:
    return [
        "--model",
        "Qwen/Qwen3.5-35B-A3B",
        "--tensor-parallel-size",
        "1",
        "--gpu-memory-utilization",
        "0.9",
        "--speculative-config",
        json.dumps({"method": "mtp", "num_speculative_tokens": 3}),
    ]


def _raw_click_options(paths: list[Path]) -> list[str]:
    """``file:line`` of every ``click.option(...)`` / ``click.Option(...)`` call."""
    found = []
    for path in paths:
        for node in ast.walk(ast.parse(path.read_text())):
            if (
                isinstance(node, ast.Call)
                and isinstance(node.func, ast.Attribute)
                and node.func.attr in ("option", "Option")
                and isinstance(node.func.value, ast.Name)
                and node.func.value.id == "click"
            ):
                found.append(f"{path.name}:{node.lineno}")
    return found


def test_no_raw_click_option_outside_the_registry() -> None:
    """Every flag comes from ``capsim.commands.options.OPTIONS``: no module under
    capsim/commands/ but the registry's own (opt.py) calls ``click.option``."""
    paths = [p for p in sorted(COMMANDS.glob("*.py")) if p.name != "opt.py"]
    assert len(paths) > 5
    assert not _raw_click_options(paths)


def test_the_scan_sees_a_raw_option(tmp_path: Path) -> None:
    (tmp_path / "cmd.py").write_text("import click\n\n@click.option('--x')\ndef f(x):\n    pass\n")
    assert _raw_click_options([tmp_path / "cmd.py"]) == ["cmd.py:3"]
    assert _raw_click_options([COMMANDS / "opt.py"])  # the registry's own call is seen


def test_library_defaults_follow_the_vllm_version() -> None:
    for version in ("0.16", "0.19", "0.20", "0.33"):
        assert EngineConfig(vllm_version=version).gmu == resolve_gmu(None, version)
        assert EngineConfig(vllm_version=version).gmu == rules_for(version).default_gmu
    assert EngineConfig(vllm_version="0.16").gmu == 0.9
    assert EngineConfig(gmu=0.6, vllm_version="0.16").gmu == 0.6
    cli, _, _ = _parse(["--vllm-version", "0.16"])
    assert cli == EngineConfig(vllm_version="0.16")


def test_default_gpu_is_the_measured_one_and_the_published_grid_names_b200() -> None:
    from capsim.sweep.grid import PUBLISHED_GRID
    from capsim.sweep.grid_toml import load_spec

    assert SimConfig().gpu == measured_gpu().name == "H200"
    spec = load_spec(PUBLISHED_GRID)
    assert {d.gpu for b in spec.blocks for d in b.deployments} == {"B200"}


def test_new_engine_fields_stay_out_of_point_ids_at_their_defaults() -> None:
    d = SimConfig().to_dict()["engine"]
    assert "quantization" not in d and "max_cudagraph_capture_size" not in d
    given = SimConfig(engine=EngineConfig(quantization="fp8")).to_dict()["engine"]
    assert given["quantization"] == "fp8"


def test_every_hf_id_names_a_preset() -> None:
    for hf_id, preset in HF_IDS.items():
        assert get_model(hf_id) is get_model(preset) is get_model(hf_id.lower())


def test_max_cudagraph_capture_size_reaches_the_memory_plan() -> None:
    base = ["memory", "--json", "-g", "H200", "--gmu", "0.9", "-k", "3"]
    default = json.loads(CliRunner().invoke(main, base).output)
    capped = json.loads(
        CliRunner().invoke(main, [*base, "--max-cudagraph-capture-size", "64"]).output
    )
    assert capped["cudagraph_capture_max"] == 64 < default["cudagraph_capture_max"]
    assert capped["cudagraph_bytes"] < default["cudagraph_bytes"]
