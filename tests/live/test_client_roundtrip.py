"""The client round-trip fit (capsim.live.client_roundtrip) and its use by the engine."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from capsim.cost.engine_period import CLIENT_ROUND_TRIP_S
from capsim.live.client_roundtrip import (
    FIT_RUNS,
    fit_round_trip_s,
    replacement_intervals,
    run_intervals,
)

RUNS = Path(__file__).resolve().parents[2] / "experiments" / "engine" / "runs"


def _log(rows: list[tuple[float, float, int, int]]) -> pd.DataFrame:
    return pd.DataFrame(rows, columns=["t_sched_s", "t_done_s", "running", "num_new_req"]).assign(
        num_preempted=0
    )


def test_intervals_of_a_hand_made_closed_loop() -> None:
    # C = 1: step 0 admits r0; update(0) at 0.015 finishes it (seen by schedule 2: running 0
    # + 0 new); its replacement reaches schedule 3 (t 0.03): r in (0.02 - 0.015, 0.03 - 0.015]
    log = _log(
        [(0.000, 0.015, 1, 1), (0.010, 0.025, 1, 0), (0.020, 0.035, 0, 0), (0.030, 0.045, 1, 1)]
    )
    iv = replacement_intervals(log, 1)
    assert iv.step_gap.tolist() == [3]
    assert iv.lower_s == pytest.approx([0.005])
    assert iv.upper_s == pytest.approx([0.015])
    assert fit_round_trip_s([iv]) == pytest.approx(0.01, abs=2e-4)


def test_bad_logs_are_refused() -> None:
    log = _log([(0.0, 0.01, 1, 1), (0.01, 0.02, 1, 0)])
    with pytest.raises(ValueError, match="concurrency=0"):
        replacement_intervals(log, 0)
    with pytest.raises(ValueError, match="preemptions"):
        replacement_intervals(log.assign(num_preempted=1), 1)
    with pytest.raises(ValueError, match="'running' missing"):
        replacement_intervals(log.drop(columns="running"), 1)
    with pytest.raises(ValueError, match="no closed-loop replacement"):
        fit_round_trip_s([replacement_intervals(log, 1)])


def test_registered_constant_is_the_fit_of_the_named_runs() -> None:
    ivs = [run_intervals(RUNS / name) for name in FIT_RUNS]
    assert fit_round_trip_s(ivs) == CLIENT_ROUND_TRIP_S
    # the real engine admits a replacement three schedules after its predecessor's step or
    # later, never two (vLLM schedules step n+2 right after update(n))
    gaps = np.concatenate([iv.step_gap for iv in ivs])
    assert gaps.min() == 3
    r = CLIENT_ROUND_TRIP_S
    inside = np.concatenate([(iv.lower_s < r) & (r <= iv.upper_s) for iv in ivs])
    assert inside.mean() > 0.9


def test_the_round_trip_is_a_flag_and_host_fit_prints_it(tmp_path: Path) -> None:
    """--client-round-trip-ms prices a deployment whose client sits elsewhere; it needs the
    async period model; `capsim engine host-fit` prints the value of the runs it is given."""
    from dataclasses import replace as dc_replace

    from click.testing import CliRunner

    from capsim.commands.main import main as cli
    from capsim.config import EngineConfig, SimConfig
    from capsim.cost.factory import build_step_time_model
    from capsim.gpus import get_gpu
    from capsim.models import get_model

    eng = EngineConfig(vllm_version="0.26", engine_overhead="measured-h200-vllm0.26")
    cfg = SimConfig(engine=dc_replace(eng, client_round_trip_ms=40.0))
    cost = build_step_time_model(cfg, get_model(cfg.model), get_gpu(cfg.gpu))
    assert cost.client_round_trip_s == pytest.approx(0.040)
    plain = SimConfig(engine=eng)
    assert "client_round_trip_ms" not in plain.to_dict()["engine"]  # sweep point ids unchanged
    default = build_step_time_model(plain, get_model(plain.model), get_gpu(plain.gpu))
    assert default.client_round_trip_s == CLIENT_ROUND_TRIP_S
    with pytest.raises(ValueError, match=r"client_round_trip_ms=5: needs engine_overhead"):
        EngineConfig(client_round_trip_ms=5)
    with pytest.raises(ValueError, match=r"client_round_trip_ms=-1: must be a number"):
        dc_replace(eng, client_round_trip_ms=-1)
    runner = CliRunner()
    r = runner.invoke(cli, ["simulate", "-c", "4", "-n", "8", "--client-round-trip-ms", "5"])
    assert r.exit_code != 0 and "needs engine_overhead" in r.output
    out = tmp_path / "m.json"
    r = runner.invoke(cli, ["engine", "host-fit", str(RUNS / "g090_k0_sg_c32"), "--out", str(out)])
    assert r.exit_code == 0, r.output
    assert "client round trip: 11.8 ms over 480 replacements" in r.output
    r = runner.invoke(cli, ["engine", "host-fit", str(RUNS / "g090_k0_sg_r10"), "--out", str(out)])
    assert "client round trip: no closed-loop run" in r.output
