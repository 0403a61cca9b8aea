"""vLLM's --kv-cache-memory and --num-gpu-blocks-override pin the pool."""

from __future__ import annotations

import json

import pytest
from click.testing import CliRunner

from capsim.commands.main import main
from capsim.config import EngineConfig, SpecDecodeConfig
from capsim.gpus import get_gpu
from capsim.memory.memory_plan import plan_memory
from capsim.memory.terms import Source
from capsim.models import get_model
from capsim.units import GiB


def test_kv_cache_memory_replaces_the_budget_and_ignores_gmu() -> None:
    model, gpu, spec = get_model("qwen3.5-35b-a3b"), get_gpu("B200"), SpecDecodeConfig()
    pinned = 30 * GiB
    a = plan_memory(model, gpu, EngineConfig(gmu=0.6, kv_cache_memory_bytes=pinned), spec)
    b = plan_memory(model, gpu, EngineConfig(gmu=0.9, kv_cache_memory_bytes=pinned), spec)
    assert a.kv_budget_bytes == b.kv_budget_bytes == pinned
    assert a.num_blocks == b.num_blocks == pinned // a.bytes_per_block
    assert a.kv_cache_memory_pinned and a.terms["kv_cache_memory"].source is Source.PINNED


def test_num_gpu_blocks_override_fixes_the_block_count() -> None:
    model, gpu, spec = get_model("qwen3.5-35b-a3b"), get_gpu("B200"), SpecDecodeConfig()
    plan = plan_memory(model, gpu, EngineConfig(gmu=0.9, num_gpu_blocks_override=777), spec)
    assert (plan.num_blocks, plan.usable_blocks) == (777, 776)


def test_bad_pin_values_are_refused_naming_the_field() -> None:
    with pytest.raises(ValueError, match="kv_cache_memory_bytes=0"):
        EngineConfig(kv_cache_memory_bytes=0)


def test_memory_cli_pins() -> None:
    r = CliRunner()
    # 20 GiB hold fewer blocks than the default 1024 sequences: vLLM would refuse
    # ("max_num_seqs (1024) exceeds available Mamba cache blocks"), so give 256
    refused = r.invoke(main, ["memory", "--kv-cache-memory", str(20 * GiB)])
    assert refused.exit_code != 0 and "exceeds available Mamba cache blocks" in refused.output
    out = r.invoke(
        main, ["memory", "--kv-cache-memory", str(20 * GiB), "--max-num-seqs", "256", "--json"]
    )
    assert out.exit_code == 0, out.output
    d = json.loads(out.output)
    assert d["kv_budget_bytes"] == 20 * GiB and d["kv_cache_memory_pinned"] is True
    out = r.invoke(main, ["memory", "--num-gpu-blocks-override", "500", "--json"])
    assert json.loads(out.output)["num_blocks"] == 500
    out = r.invoke(main, ["memory", "--num-gpu-blocks-override", "1"])
    assert out.exit_code != 0 and "--num-gpu-blocks-override" in out.output


def test_simulate_takes_the_pin() -> None:
    out = CliRunner().invoke(
        main,
        [
            "simulate",
            "-c",
            "4",
            "-n",
            "8",
            "--num-gpu-blocks-override",
            "300",
            "--json",
        ],
    )
    assert out.exit_code == 0, out.output
    assert json.loads(out.output)["num_blocks"] == 300


def test_default_gmu_follows_the_version() -> None:
    r = CliRunner()
    new = json.loads(r.invoke(main, ["memory", "--json"]).output)
    old = json.loads(r.invoke(main, ["memory", "--json", "--vllm-version", "0.16"]).output)
    assert (new["gmu"], old["gmu"]) == (0.92, 0.9)


def _grid(**dep_extra):  # type: ignore[no-untyped-def]
    from capsim.sweep.grid_toml import spec_from_dict

    dep = {"model": "qwen3.5-35b-a3b", "gpu": "B200", "gmu": [0.9], **dep_extra}
    return spec_from_dict(
        {
            "sweep": {"commit_modes": ["storeall"]},
            "block": [
                {"name": "b", "deployment": [dep], "workload": [{"name": "sharegpt", "loads": [4]}]}
            ],
        }
    )


def test_grid_toml_pins_the_pool_and_cli_overrides_it() -> None:
    from capsim.sweep.grid import expand, with_pool

    spec = _grid(kv_cache_memory_bytes=20 * GiB, vllm_version="0.26")
    (point,) = expand(spec)
    assert point.cfg.engine.kv_cache_memory_bytes == 20 * GiB
    assert point.cfg.engine.vllm_version == "0.26"
    (over,) = expand(with_pool(spec, {"num_gpu_blocks_override": 400, "vllm_version": "0.33"}))
    assert over.cfg.engine.num_gpu_blocks_override == 400
    assert over.cfg.engine.vllm_version == "0.33"
    assert over.point_id != point.point_id
    with pytest.raises(ValueError, match="kv_cache_memory_bytes='x': must be an integer"):
        _grid(kv_cache_memory_bytes="x")


def test_whatif_candidate_carries_the_pin() -> None:
    from capsim.sweep.whatif import Candidate

    c = Candidate(
        model="qwen3.5-35b-a3b",
        gpu="B200",
        tp=1,
        gmu=0.9,
        tree=None,
        commit="storeall",
        workload="sharegpt",
        load_mode="concurrency",
        pool=(("num_gpu_blocks_override", 321),),
    )
    assert c.config(8).engine.num_gpu_blocks_override == 321
