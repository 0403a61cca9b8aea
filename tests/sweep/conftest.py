"""Fixtures of the sweep tests (helpers live in sweep_fakes.py)."""

from __future__ import annotations

import pytest
from sweep_fakes import small_spec

from capsim.sweep.grid import SweepSpec


@pytest.fixture
def spec() -> SweepSpec:
    return small_spec()
