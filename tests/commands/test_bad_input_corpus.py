"""The malformed inputs of issue 15, each ending in one line naming the field and value
(or, for a valid extreme, a sane result). Runs the real CLI through CliRunner."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from click.testing import CliRunner
from factories import one_line_error

from capsim.commands.main import main
from capsim.commands.options import dc_default
from capsim.config import EngineConfig
from capsim.gpus import get_gpu
from capsim.vllm_rules import rules_for


def run(args: list[str]):  # type: ignore[no-untyped-def]
    t0 = time.perf_counter()
    res = CliRunner().invoke(main, [str(a) for a in args])
    res.wall_s = time.perf_counter() - t0  # type: ignore[attr-defined]
    return res


@pytest.fixture
def files(tmp_path: Path) -> dict[str, Path]:
    out = {}
    p = tmp_path / "prompts_int64max.parquet"
    big = pa.array([2**63 - 1, 5], pa.int64())
    pq.write_table(pa.table({"prompt_tok": big, "output_tok": pa.array([5, 5], pa.int64())}), p)
    out["int64max"] = p
    out["dupcols"] = tmp_path / "dup.csv"
    out["dupcols"].write_text("prompt_tok,output_tok,prompt_tok\n5,5,6\n")
    out["dupkeys"] = tmp_path / "dup.jsonl"
    out["dupkeys"].write_text('{"prompt_tok": 5, "output_tok": 5, "prompt_tok": 7}\n')
    out["garbage_parquet"] = tmp_path / "garbage.parquet"
    out["garbage_parquet"].write_bytes(b"PAR1 not really")
    out["negative"] = tmp_path / "neg.csv"
    out["negative"].write_text("prompt_tok,output_tok\n-5,5\n")
    out["nan_arrival"] = tmp_path / "nan.csv"
    out["nan_arrival"].write_text("prompt_tok,output_tok,arrival_s\n5,5,nan\n")
    out["one_token_replay"] = tmp_path / "one.csv"
    out["one_token_replay"].write_text(
        "prompt_tok,output_tok,arrival_s\n" + "".join(f"{10 + i},1,{i * 0.01}\n" for i in range(8))
    )
    out["model_list"] = tmp_path / "model_list.json"
    out["model_list"].write_text("[1, 2]")
    out["model_garbage"] = tmp_path / "model.json"
    out["model_garbage"].write_text("{not json")
    out["model_bad_int"] = tmp_path / "model_int.json"
    out["model_bad_int"].write_text('{"num_hidden_layers": "abc"}')
    return out


@pytest.mark.parametrize(
    ("args", "needles"),
    [
        (["simulate", "-n", 20, "--json", "--rate", 10, "--burstiness", "inf"], ["--burstiness"]),
        (["simulate", "-c", 4, "--json", "-n", 2**63], ["--num-prompts", str(2**63)]),
        (
            ["simulate", "-c", 4, "-n", 20, "--max-num-batched-tokens", 1],
            ["max_num_batched_tokens (1) must be greater than or equal to max_num_seqs (1024)"],
        ),
        (
            ["memory", "--max-model-len", 300000],
            ["max_model_len=300000", "max_position_embeddings=262144"],
        ),
        (["whatif", "--ttft-p99-ms", 300, "--max-load", "nan"], ["--max-load", "nan"]),
        (["whatif", "--ttft-p99-ms", 300, "--jobs", 1000], ["--jobs", "1000"]),
        (["whatif"], ["--ttft-p99-ms"]),
        (["simulate", "-c", 2, "-n", 4, "--out", ""], ["--out"]),
        (["simulate", "-c", 2, "-n", 4, "--tree", "2x0"], ["--tree", "2x0"]),
        (["simulate", "-c", 2, "-n", 4, "--gmu", "nan"], ["--gmu", "nan"]),
        (["simulate", "-c", 2, "-n", 4, "--acceptance", "0.9,,0.8"], ["--acceptance"]),
        (["simulate", "-c", 2, "-n", 4, "-g", "A100"], ["--gpu", "A100"]),
        (["simulate", "-n", 4], ["--max-concurrency", "--request-rate", "--replay"]),
        (["sweep", "--scheduler", "tcp://127.0.0.1:1"], ["--scheduler", "--executor dask"]),
        (["sweep", "--gmu", "1.5"], ["--gmu", "1.5"]),
        (["sweep", "--modes", "storeall,bogus"], ["--modes", "bogus"]),
        (["sweep", "--grid", "/nonexistent.toml"], ["--grid"]),
    ],
)
def test_cli_cases(args, needles) -> None:  # type: ignore[no-untyped-def]
    res = run(args)
    one_line_error(res, *needles)
    assert res.wall_s < 10


@pytest.mark.parametrize(
    ("key", "args", "needles"),
    [
        ("int64max", ["simulate", "-c", 4, "-n", 20, "--json", "-w"], ["row 0", "max_model_len"]),
        ("dupcols", ["simulate", "-c", 2, "-n", 4, "-w"], ["duplicate column", "prompt_tok"]),
        ("dupkeys", ["simulate", "-c", 2, "-n", 4, "-w"], ["dup.jsonl:1", "duplicate key"]),
        ("garbage_parquet", ["simulate", "-c", 2, "-n", 4, "-w"], ["garbage.parquet"]),
        ("negative", ["simulate", "-c", 2, "-n", 4, "-w"], ["neg.csv:2", "prompt_tok"]),
        ("nan_arrival", ["simulate", "-c", 2, "-n", 4, "-w"], ["nan.csv:2", "arrival_s"]),
        ("model_list", ["memory", "--json", "-m"], ["model_list.json", "JSON object"]),
        ("model_garbage", ["memory", "-m"], ["model.json", "not valid JSON"]),
        ("model_bad_int", ["memory", "-m"], ["model_int.json"]),
    ],
)
def test_file_cases(files, key, args, needles) -> None:  # type: ignore[no-untyped-def]
    one_line_error(run([*args, files[key]]), *needles)


def test_valid_extremes_give_sane_results(files) -> None:  # type: ignore[no-untyped-def]
    # max_model_len 1: the capacity table stops at max_model_len (no row at 32768 tokens)
    res = run(["memory", "--max-model-len", 1])
    assert res.exit_code == 0, res.output
    assert "32768 tok" not in res.output and "1 tok:" in res.output
    # replay of 1-token outputs: strict JSON, undefined metrics are null (not NaN)
    res = run(["simulate", "--replay", "-n", 8, "--json", "-w", files["one_token_replay"]])
    assert res.exit_code == 0, res.output
    summary = json.loads(res.output, parse_constant=lambda c: pytest.fail(f"{c} in JSON"))
    assert summary["offered_load"] is None and summary["tpot_mean_s"] is None
    assert summary["num_requests"] == 8


def test_main_whatif_path_at_high_rate_prices_only_scheduled_tokens() -> None:
    """'tok: 16456 is above the measured grid' (issue 15): 1-token prompts of the bursty
    workload were priced as k+1 verify windows, past the 16,384-token budget."""
    res = run(
        [
            "simulate",
            "--commit",
            "reconstruct",
            "--gmu",
            0.9,
            "-w",
            "burstgpt-standin",
            "--rate",
            500,
            "-n",
            3000,
            "--json",
        ]
    )
    assert res.exit_code == 0, res.output
    assert json.loads(res.output)["num_requests"] == 3000


def test_bench_names_and_old_spellings_agree() -> None:
    new = run(
        [
            "simulate",
            "--max-concurrency",
            3,
            "--num-prompts",
            6,
            "--dataset-name",
            "spec-bench",
            "--seed",
            2,
            "--json",
        ]
    )
    old = run(["simulate", "-c", 3, "-n", 6, "-w", "spec-bench", "--seed", 2, "--json"])
    assert new.exit_code == 0 and new.output == old.output
    a = run(["memory", "--json", "--tree", "2x2x1"])
    b = run(["memory", "--json", "--tree-widths", "2,2,1"])
    assert a.exit_code == 0 and a.output == b.output


def test_help_defaults_come_from_the_config() -> None:
    res = run(["simulate", "--help"])
    text = " ".join(res.output.split())
    version = dc_default(EngineConfig, "vllm_version")
    assert "--vllm-version VERSION vLLM release whose memory accounting to follow " in text
    assert f"[default: {version}]" in text
    # gmu's default is the version's rule (capsim.vllm_rules), named in the help
    gmu = rules_for(version).default_gmu
    assert f"gpu_memory_utilization (default: the vLLM version's rule, {gmu} for {version})" in text
    res = run(["report", "--help"])
    assert "Figures 1-5" in res.output


def test_debug_shows_the_traceback_and_internal_errors_are_one_line(files, monkeypatch) -> None:
    res = CliRunner().invoke(main, ["--debug", "memory", "-m", str(files["model_list"])])
    assert isinstance(res.exception, ValueError)  # re-raised: click's runner keeps it

    import capsim.memory.memory_plan as mp

    def boom(*a, **k):  # type: ignore[no-untyped-def]
        raise RuntimeError("unexpected\nsecond line")

    monkeypatch.setattr(mp, "plan_memory", boom)
    one_line_error(run(["memory"]), "internal error RuntimeError", "--debug")


def test_vllm_limits_without_chunked_prefill() -> None:
    eng = EngineConfig(enable_chunked_prefill=False, max_num_batched_tokens=4096, max_num_seqs=8)
    with pytest.raises(
        ValueError,
        match=r"max_num_batched_tokens \(4096\) is smaller than "
        r"max_model_len \(262144\)",
    ):
        eng.check_vllm_limits(get_gpu("B200"), 262144)
    assert eng.check_vllm_limits(get_gpu("B200"), 4096) == 4096


def test_unreachable_dask_scheduler_is_one_line_and_fast() -> None:
    pytest.importorskip("distributed")
    from capsim.sweep.executors import DaskExecutor

    t0 = time.perf_counter()
    with pytest.raises(ValueError, match=r"--scheduler='tcp://127.0.0.1:1': cannot connect"):
        DaskExecutor("tcp://127.0.0.1:1", connect_timeout_s=1.0).connect()
    assert time.perf_counter() - t0 < 15


def test_save_result_uses_vllm_bench_metric_names(tmp_path) -> None:  # type: ignore[no-untyped-def]
    path = tmp_path / "bench.json"
    res = run(["simulate", "-c", 3, "-n", 6, "--json", "--save-result", "--result-filename", path])
    assert res.exit_code == 0, res.output
    summary, bench = json.loads(res.output), json.loads(path.read_text())
    assert bench["completed"] == summary["num_requests"] == bench["num_prompts"] == 6
    assert bench["max_concurrency"] == 3 and bench["request_rate"] is None
    for m in ("ttft", "tpot", "itl", "e2el"):
        for stat in ("mean", "median", "p99"):
            assert bench[f"{stat}_{m}_ms"] == pytest.approx(summary[f"{m}_{stat}_s"] * 1e3)
    assert bench["output_throughput"] == summary["output_throughput_tok_per_s"]


def test_simulate_out_files_are_world_readable(tmp_path) -> None:  # type: ignore[no-untyped-def]
    out = tmp_path / "pt"
    res = run(["simulate", "-g", "B200", "-c", 2, "-n", 4, "--out", out])
    assert res.exit_code == 0, res.output
    for name in ("summary.json", "requests.parquet", "steps.parquet"):
        assert (out / name).stat().st_mode & 0o777 == 0o644
    assert "PROJECTION H200->B200" in res.output  # the summary says B200 times are projected
