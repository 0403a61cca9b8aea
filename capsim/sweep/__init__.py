"""Sweeps over the experiment grid: expansion, resumable storage, executors, knees, what-if."""

from capsim.sweep.grid import PUBLISHED_GRID, SweepSpec, expand, restrict
from capsim.sweep.grid_toml import load_spec
from capsim.sweep.runner import run_sweep

__all__ = ["PUBLISHED_GRID", "SweepSpec", "expand", "load_spec", "restrict", "run_sweep"]
