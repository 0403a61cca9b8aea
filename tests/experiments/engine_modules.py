"""Load one of experiments/engine/*.py as a module (they import each other by file name)."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType

ENGINE = Path(__file__).resolve().parents[2] / "experiments" / "engine"


def load_engine_experiment(name: str) -> ModuleType:
    """experiments/engine/<name>.py, with that folder on sys.path for its sibling imports."""
    if str(ENGINE) not in sys.path:
        sys.path.insert(0, str(ENGINE))
    spec = importlib.util.spec_from_file_location(name, ENGINE / f"{name}.py")
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod
