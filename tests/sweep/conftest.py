"""Fixtures of the sweep tests (helpers live in sweep_fakes.py)."""

from __future__ import annotations

import pytest
from sweep_fakes import fake_simulate, small_spec

import capsim.sweep.runner as runner_mod
from capsim.sweep.grid import SweepSpec


@pytest.fixture
def spec() -> SweepSpec:
    return small_spec()


@pytest.fixture
def fake_sim(monkeypatch: pytest.MonkeyPatch) -> None:
    """Sweeps price points with the fake point function instead of the simulator."""
    monkeypatch.setattr(runner_mod, "default_point_fn", lambda: fake_simulate)
