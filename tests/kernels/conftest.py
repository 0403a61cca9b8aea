"""Kernel tests run on the CPU through Triton's interpreter unless a GPU is present.

TRITON_INTERPRET must be set before triton decorates the kernels, so it is set here,
before ``capsim_kernels`` is imported. If the package is not installed (``pip install -e``
maps it to kernels/), it is loaded from the checkout under its package name.
"""

from __future__ import annotations

import importlib.util
import os
import pathlib
import sys

import pytest

torch = pytest.importorskip("torch")

# NOTE: before triton is first imported: triton.language's own jit helpers (tl.sum, ...)
# are built for the interpreter only when the variable is set at their import.
if not torch.cuda.is_available():
    os.environ.setdefault("TRITON_INTERPRET", "1")
pytest.importorskip("triton")

if importlib.util.find_spec("capsim_kernels") is None:
    _root = pathlib.Path(__file__).resolve().parents[2] / "kernels"
    _spec = importlib.util.spec_from_file_location(
        "capsim_kernels", _root / "__init__.py", submodule_search_locations=[str(_root)]
    )
    _mod = importlib.util.module_from_spec(_spec)
    sys.modules["capsim_kernels"] = _mod
    _spec.loader.exec_module(_mod)


@pytest.fixture
def device() -> str:
    return "cuda" if torch.cuda.is_available() else "cpu"
