"""The batch-at-once running loop gives exactly the sequential loop's results."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
from factories import synthetic_table

from capsim import simulate as simulate_mod
from capsim.config import EngineConfig, LoadConfig, SimConfig, SpecDecodeConfig
from capsim.core.scheduler import Scheduler


@pytest.mark.parametrize("commit", ["storeall", "reconstruct"])
@pytest.mark.parametrize("gmu", [0.6, 0.9])
def test_vectorized_equals_sequential(monkeypatch, commit, gmu) -> None:  # type: ignore[no-untyped-def]
    table = synthetic_table(250, seed=11, prompt=(200, 6000), output=(50, 900))
    cfg = SimConfig(
        gpu="B200",  # the published GPU these cases were sized on
        engine=EngineConfig(gmu=gmu, max_num_batched_tokens=4096),
        spec=SpecDecodeConfig(commit=commit),  # type: ignore[arg-type]
        load=LoadConfig(concurrency=200, num_requests=250),
        seed=5,
    )
    fast = simulate_mod.simulate(cfg, workload=table)
    original_init = Scheduler.__init__

    def sequential_init(self, *a, **kw):  # type: ignore[no-untyped-def]
        original_init(self, *a, **kw)
        self.vectorized = False

    monkeypatch.setattr(Scheduler, "__init__", sequential_init)
    slow = simulate_mod.simulate(cfg, workload=table)
    pd.testing.assert_frame_equal(fast.requests, slow.requests)
    pd.testing.assert_frame_equal(fast.steps, slow.steps)
    if gmu == 0.6 and commit == "storeall":
        assert fast.summary["num_preemptions"] > 0  # the scenario exercises preemption
    assert np.isfinite(fast.summary["ttft_p99_s"])
