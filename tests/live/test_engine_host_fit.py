"""`capsim engine host-fit`: a machine's own PIECEWISE / eager host costs from its step logs,
used as `--engine-overhead FILE.json` (capsim.live.engine_period_fit.fit_machine_host)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from capsim.commands.main import main as cli
from capsim.config import EngineConfig
from capsim.cost.engine_period import MEASURED_H200_VLLM026_ASYNC, get_async_period
from capsim.live.engine_oos import ENGINE_OVERHEAD, load_run, simulate_run
from capsim.live.engine_period_fit import fit_machine_host

RUNS = Path(__file__).resolve().parents[2] / "experiments" / "engine" / "runs"


def test_the_registered_fit_run_gives_the_registered_piecewise_cost() -> None:
    """Same run, same period rule: g090m16_k3_sg_c64 set the registered PIECEWISE cost."""
    fit = fit_machine_host([RUNS / "g090m16_k3_sg_c64"], MEASURED_H200_VLLM026_ASYNC)
    assert fit.piecewise_host_s == pytest.approx(MEASURED_H200_VLLM026_ASYNC.piecewise_host_s)
    # FULL terms and the kernel excess are the base's
    for f in ("kernel_excess_s", "full_spec_host_s", "full_spec_host_s_per_k"):
        assert getattr(fit, f) == getattr(MEASURED_H200_VLLM026_ASYNC, f)


def test_host_fit_file_prices_a_fast_machine(tmp_path: Path) -> None:
    out = tmp_path / "mine.json"
    r = CliRunner().invoke(
        cli, ["engine", "host-fit", str(RUNS / "g090_k0_pc_sp_c64"), "--out", str(out)]
    )
    assert r.exit_code == 0, r.output
    assert "PIECEWISE 57.7 ms, eager 124.5 ms" in r.output
    doc = json.loads(out.read_text())
    assert doc["base"] == ENGINE_OVERHEAD and doc["fit_runs"] == ["g090_k0_pc_sp_c64"]
    assert EngineConfig(engine_overhead=str(out)).engine_overhead == str(out)
    fit = get_async_period(str(out))
    assert fit.eager_host_s == pytest.approx(0.1244934, rel=1e-6)
    # the same machine's 16-client run (session 12): TPOT +13.3% on the registered fit before
    # session 14's step model (the client round trip: +6.5%; with the pipeline recurrence:
    # +0.4%); the machine's own fit, faster, now runs it 8.1% fast
    run = load_run(RUNS / "g090_k0_pc_sp_c16")
    data = RUNS.parent / "data"
    reg = simulate_run(run, engine_overhead=ENGINE_OVERHEAD, data_root=data)
    own = simulate_run(run, engine_overhead=str(out), data_root=data)
    real = run.metrics["tpot_mean_ms"]
    assert abs(reg["tpot_mean_ms"] / real - 1) < 0.01
    assert 0.9 < own["tpot_mean_ms"] / real < 0.93


def test_host_fit_refuses_with_one_line(tmp_path: Path) -> None:
    runner = CliRunner()
    out = str(tmp_path / "x.json")
    r = runner.invoke(cli, ["engine", "host-fit", str(RUNS / "g090_k3_rand_c1"), "--out", out])
    assert r.exit_code == 1 and "steps.csv is missing (no step log)" in r.output
    r = runner.invoke(
        cli, ["engine", "host-fit", str(RUNS / "g090_k3_rand_c1_steps"), "--out", out]
    )
    assert r.exit_code == 1 and "0 PIECEWISE steps" in r.output and "need >= 20" in r.output
    assert not Path(out).exists()
    with pytest.raises(ValueError, match=r"^engine.engine_overhead='nope.json': no such file$"):
        EngineConfig(engine_overhead="nope.json")
    bad = tmp_path / "bad.json"
    bad.write_text('{"name": "x"}')
    with pytest.raises(ValueError, match=r"the fit lacks \['eager_host_s'"):
        get_async_period(str(bad))


def test_compare_prices_the_async_column_with_a_host_fit(tmp_path: Path) -> None:
    """`capsim engine compare --engine-overhead mine.json`: the async column (and its two
    diagnostic ones) use the machine's fit; the main c4fa656 column keeps the registered."""
    import shutil

    dest = tmp_path / "engine"
    for run in ("g090_k0_pc_sp_c64", "g090_k6_sg_c64"):
        shutil.copytree(RUNS / run, dest / "runs" / run)
    shutil.copytree(RUNS.parent / "data", dest / "data")
    out = tmp_path / "mine.json"
    runner = CliRunner()
    assert (
        runner.invoke(
            cli, ["engine", "host-fit", str(dest / "runs" / "g090_k0_pc_sp_c64"), "--out", str(out)]
        ).exit_code
        == 0
    )
    from capsim.live.engine_oos import table

    reg, _ = table(dest / "runs")
    own, _ = table(dest / "runs", engine_overhead=str(out))
    pd_reg = reg.set_index(["run", "metric"])
    pd_own = own.set_index(["run", "metric"])
    k6 = ("g090_k6_sg_c64", "tpot_mean_ms")
    assert pd_own.loc[k6, "capsim_engine"] < pd_reg.loc[k6, "capsim_engine"]
    assert pd_own.loc[k6, "capsim_main"] == pd_reg.loc[k6, "capsim_main"]
    r = runner.invoke(
        cli, ["engine", "compare", "--dest", str(dest), "--engine-overhead", str(out)]
    )
    assert r.exit_code == 0, r.output
    assert "g090_k6_sg_c64" in r.output
