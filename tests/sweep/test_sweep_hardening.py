"""Grid TOML schema, pricing checked up front, and a sweep store that survives corrupt
files, concurrent writers and kill -9 (issue 15)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest
from click.testing import CliRunner
from factories import one_line_error

from capsim.commands.main import main
from capsim.sweep.grid_toml import load_spec
from capsim.sweep.store import SweepStore

GRID = """
[sweep]
name = "hardening"
num_requests = 30

[[block]]
name = "main"
  [[block.deployment]]
  model = "qwen3.5-35b-a3b"
  gpu = "B200"
  tp = 1
  gmu = [0.9]
  [[block.workload]]
  name = "sharegpt"
  loads = [8, 64]
"""


def _grid(tmp_path: Path, text: str = GRID) -> Path:
    p = tmp_path / "grid.toml"
    p.write_text(text)
    return p


@pytest.mark.parametrize(
    ("old", "new", "needle"),
    [
        ("gmu = [0.9]", "gmu = 0.9", "block[0].deployment[0].gmu=0.9: must be a list"),
        ("gmu = [0.9]", "gmu = [0.9]\n  gmuu = [0.6]", "block[0].deployment[0].gmuu: unknown key"),
        ("loads = [8, 64]", "load = [8, 64]", "block[0].workload[0].load: unknown key"),
        ('name = "main"', 'name = "main"\ndeployments = 1', "block[0].deployments: unknown key"),
        ("[sweep]", "[sweeep]", "sweeep: unknown key"),
        ("num_requests = 30", "num_request = 30", "sweep.num_request: unknown key"),
        ("tp = 1", "tp = true", "tp=True: must be an integer (not a bool)"),
        ("loads = [8, 64]", "loads = [true, 64]", "loads=[True, 64]: must be a list of finite"),
        ("num_requests = 30", "num_requests = 30.5", "num_requests=30.5: must be an integer"),
        ('name = "main"', 'name = "main"\ntrees = ["0x2"]', "block[0].trees[0]='0x2'"),
        ("num_requests = 30", "num_requests = 100000000000", "num_requests"),
        # memplan's pool pins and prefix's per-block prefix caching are schema keys too
        ("tp = 1", 'tp = 1\n  kv_cache_memory_bytes = "20G"', "kv_cache_memory_bytes='20G': must"),
        ("tp = 1", "tp = 1\n  num_gpu_blocks_override = 1.5", "num_gpu_blocks_override=1.5"),
        ("tp = 1", "tp = 1\n  num_gpu_blocks_override = 1", "num_gpu_blocks_override=1: must"),
        ("tp = 1", "tp = 1\n  limit_mm_per_prompt = true", "limit_mm_per_prompt=True: must"),
        ("tp = 1", 'tp = 1\n  enforce_eager = "yes"', "enforce_eager='yes': must be true or"),
        ("tp = 1", "tp = 1\n  vllm_version = 0.26", "vllm_version=0.26: must be a string"),
        ("tp = 1", 'tp = 1\n  vllm_version = "new"', "vllm_version='new'"),
        ("tp = 1", "tp = 1\n  kv_cache_memory = 1", "deployment[0].kv_cache_memory: unknown"),
        ('name = "main"', 'name = "main"\nprefix_caching = "on"', "block[0].prefix_caching='on'"),
        ('name = "main"', 'name = "main"\nprefix_caching = [1]', "prefix_caching=[1]: must"),
        ('name = "main"', 'name = "main"\nprefix_caching = []', "prefix_caching"),
        # spec's acceptance keys (issue 13): [sweep] tree_model / temperature
        ("num_requests = 30", "num_requests = 30\ntree_model = 1", "sweep.tree_model=1: must be a"),
        ("num_requests = 30", 'num_requests = 30\ntree_model = "oracle"', "tree_model='oracle'"),
        ("num_requests = 30", 'num_requests = 30\ntree_models = "rank"', "tree_models: unknown"),
        ("num_requests = 30", 'num_requests = 30\ntemperature = "0.7"', "temperature='0.7': must"),
        ("num_requests = 30", "num_requests = 30\ntemperature = true", "temperature=True: must"),
        ("num_requests = 30", "num_requests = 30\ntemperature = nan", "temperature=nan: must"),
        ("num_requests = 30", "num_requests = 30\ntemperature = [0.7]", "temperature=[0.7]"),
        ("num_requests = 30", "num_requests = 30\ntemperature = 2.5", "sweep.temperature=2.5"),
        ("num_requests = 30", "num_requests = 30\ntemperature = -0.1", "sweep.temperature=-0.1"),
    ],
)
def test_grid_schema_names_the_key_path(tmp_path, old, new, needle) -> None:  # type: ignore[no-untyped-def]
    assert old in GRID
    res = CliRunner().invoke(
        main,
        [
            "sweep",
            "--grid",
            str(_grid(tmp_path, GRID.replace(old, new, 1))),
            "--out",
            str(tmp_path / "o"),
            "--no-progress",
        ],
    )
    one_line_error(res, needle)
    assert not (tmp_path / "o" / "points").exists()


def test_pool_pins_and_prefix_caching_in_toml(tmp_path) -> None:  # type: ignore[no-untyped-def]
    text = GRID.replace('name = "main"', 'name = "main"\nprefix_caching = [false, true]').replace(
        "tp = 1",
        'tp = 1\n  vllm_version = "0.26"\n  num_gpu_blocks_override = 400\n  enforce_eager = true',
    )
    spec = load_spec(_grid(tmp_path, text))
    (dep,) = spec.blocks[0].deployments
    assert (dep.vllm_version, dep.num_gpu_blocks_override, dep.enforce_eager) == ("0.26", 400, True)
    assert spec.blocks[0].prefix_caching == (False, True)
    one = load_spec(
        _grid(tmp_path, GRID.replace('name = "main"', 'name = "main"\nprefix_caching = true'))
    )
    assert one.blocks[0].prefix_caching == (True,)


def test_tree_model_and_temperature_in_toml(tmp_path) -> None:  # type: ignore[no-untyped-def]
    text = GRID.replace("num_requests = 30", 'num_requests = 30\ntree_model = "independent"')
    spec = load_spec(_grid(tmp_path, text.replace("[[block]]", "temperature = 1\n\n[[block]]")))
    assert (spec.tree_model, spec.temperature) == ("independent", 1)
    default = load_spec(_grid(tmp_path))
    assert (default.tree_model, default.temperature) == ("rank", 0.0)


def test_both_tree_spellings_in_toml(tmp_path) -> None:  # type: ignore[no-untyped-def]
    text = GRID.replace('name = "main"', 'name = "main"\ntrees = ["chain", "2x2x1", [3, 1]]')
    spec = load_spec(_grid(tmp_path, text))
    assert spec.blocks[0].trees == (None, (2, 2, 1), (3, 1))


@pytest.mark.parametrize(
    ("old", "new", "needle"),
    [
        # 35B TP8 at k = 9: its per-GPU heads have GDN windows T = 1, 2, 4, 9 only (round 8,
        # 2026-12-02), so T = 10 cannot be interpolated (TP8 itself is priced since round 8)
        ("num_requests = 30\n\n[[block]]\nname = \"main\"\n  [[block.deployment]]\n"
         "  model = \"qwen3.5-35b-a3b\"\n  gpu = \"B200\"\n  tp = 1",
         "num_requests = 30\nnum_spec_tok = 9\n\n[[block]]\nname = \"main\"\n"
         "  [[block.deployment]]\n  model = \"qwen3.5-35b-a3b\"\n  gpu = \"B200\"\n  tp = 8",
         "no window T=10"),
        ("num_requests = 30", "num_requests = 30\nnum_spec_tok = 45", "q_tok=46"),
    ],
)
def test_unpriceable_points_refused_before_any_simulation(
    tmp_path, fake_sim, old, new, needle
) -> None:  # type: ignore[no-untyped-def]
    def sweep(*extra: str):  # type: ignore[no-untyped-def]
        grid = str(_grid(tmp_path, GRID.replace(old, new)))
        args = ["sweep", "--grid", grid, "--out", str(tmp_path / "o"), "--no-progress"]
        return CliRunner().invoke(main, [*args, *extra])

    res = sweep()
    one_line_error(res, needle, "--step-time roofline")
    assert not (tmp_path / "o" / "points").exists()
    # the fix it names works: the roofline prices it
    ok = sweep("--executor", "serial", "--step-time", "roofline")
    assert ok.exit_code == 0, ok.output


def _sweep(tmp_path: Path, out: Path):  # type: ignore[no-untyped-def]
    return CliRunner().invoke(
        main,
        [
            "sweep",
            "--grid",
            str(_grid(tmp_path)),
            "--out",
            str(out),
            "--no-progress",
            "--executor",
            "serial",
        ],
    )


@pytest.mark.parametrize(
    "damage",
    [
        "truncate",
        "garbage",
        "negative_ttft",
        "nan_throughput",
        "wrong_point",
        "steps_garbage",
        "steps_missing",
    ],
)
def test_bad_reused_files_are_recomputed_with_a_warning(tmp_path, fake_sim, damage) -> None:  # type: ignore[no-untyped-def]
    out = tmp_path / "res"
    first = _sweep(tmp_path, out)
    assert first.exit_code == 0, first.output
    before = (out / "points.parquet").read_bytes()
    points = sorted((out / "points").glob("*.json"))
    victim = points[0]
    steps = out / "steps" / f"{victim.stem}.parquet"
    rec = json.loads(victim.read_text())
    if damage == "truncate":
        victim.write_text(victim.read_text()[:40])
    elif damage == "garbage":
        victim.write_bytes(b"\x00\xff garbage")
    elif damage == "negative_ttft":
        rec["row"]["ttft_p99_s"] = -1.0
        victim.write_text(json.dumps(rec))
    elif damage == "nan_throughput":
        rec["row"]["output_throughput_tok_per_s"] = float("nan")
        victim.write_text(json.dumps(rec))
    elif damage == "wrong_point":
        rec["row"]["load"] = 12345.0
        victim.write_text(json.dumps(rec))
    elif damage == "steps_garbage":
        steps.write_bytes(b"not parquet")
    elif damage == "steps_missing":
        steps.unlink()
    again = _sweep(tmp_path, out)
    assert again.exit_code == 0, again.output
    assert f"warning: {victim}" in again.output and "recomputing" in again.output
    assert f"{len(points)} points (1 simulated, {len(points) - 1} reused)" in again.output
    assert (out / "points.parquet").read_bytes() == before  # same results as the first run
    third = _sweep(tmp_path, out)
    assert "warning" not in third.output and "(0 simulated" in third.output
    assert "nothing left to simulate" in third.output  # not 'nan s per point'


def test_second_writer_gets_the_holders_pid_and_runs_are_recorded(tmp_path, fake_sim) -> None:  # type: ignore[no-untyped-def]
    out = tmp_path / "res"
    spec = load_spec(_grid(tmp_path))
    with SweepStore.open(out, spec) as held:
        held.manifest["runs"].append({"status": "running", "pid": 999999})
        held.write_manifest()
        res = _sweep(tmp_path, out)
        assert res.exit_code != 0
        assert f"another capsim sweep (pid {os.getpid()})" in res.output
    res = _sweep(tmp_path, out)
    assert res.exit_code == 0, res.output
    runs = json.loads((out / "manifest.json").read_text())["runs"]
    assert [r["status"] for r in runs] == ["killed", "finished"]
    assert (out / "points" / next(iter(os.listdir(out / "points")))).stat().st_mode & 0o777 == 0o644


def test_pool_workers_die_with_their_parent(tmp_path) -> None:  # type: ignore[no-untyped-def]
    script = tmp_path / "parent.py"
    script.write_text(
        textwrap.dedent(f"""
        import os, sys, time
        sys.path[:0] = {sys.path!r}
        from capsim.sweep.executors import LocalExecutor

        def task(i):
            open(os.path.join({str(tmp_path)!r}, f"w{{os.getpid()}}"), "w").close()
            time.sleep(60)

        if __name__ == "__main__":
            for _ in LocalExecutor(2).map_unordered(task, range(4)):
                pass
    """)
    )
    parent = subprocess.Popen([sys.executable, str(script)])
    try:
        deadline = time.time() + 30
        while len(list(tmp_path.glob("w*"))) < 2 and time.time() < deadline:
            time.sleep(0.1)
        pids = [int(p.name[1:]) for p in tmp_path.glob("w*")]
        assert len(pids) == 2
    finally:
        parent.send_signal(signal.SIGKILL)
        parent.wait()

    def alive(pid: int) -> bool:
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return False
        # a zombie waiting for init is dead for our purposes
        stat = Path(f"/proc/{pid}/stat")
        return stat.exists() and stat.read_text().split()[2] != "Z"

    deadline = time.time() + 10
    while any(alive(p) for p in pids) and time.time() < deadline:
        time.sleep(0.1)
    assert not any(alive(p) for p in pids)


def test_requested_gmu_missing_from_a_deployment_is_said(tmp_path, fake_sim) -> None:  # type: ignore[no-untyped-def]
    res = CliRunner().invoke(
        main,
        ["sweep", "--grid", str(_grid(tmp_path)), "--out", str(tmp_path / "o"), "--no-progress",
         "--executor", "serial", "--gmu", "0.6,0.9"],
    )  # fmt: skip
    assert res.exit_code == 0, res.output
    assert "qwen3.5-35b-a3b on B200 tp=1 has no gmu 0.6 in the grid (its list: 0.9)" in res.output
