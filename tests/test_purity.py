"""capsim.core and capsim.cost stay pure: importing them loads no simulation, plotting,
GPU, CLI or dataframe library (STYLE.md convention 5)."""

from __future__ import annotations

import subprocess
import sys

FORBIDDEN = ("simpy", "torch", "triton", "click", "matplotlib", "pandas")
MODULES = (
    "capsim.memory.memory_plan",
    "capsim.core.scheduler",
    "capsim.core.kv_manager",
    "capsim.core.acceptance",
    "capsim.core.decode_run",
    "capsim.cost.roofline",
    "capsim.cost.base",
)


def test_core_imports_are_pure() -> None:
    code = (
        "import sys\n"
        + "".join(f"import {m}\n" for m in MODULES)
        + f"bad = [m for m in {FORBIDDEN!r} if m in sys.modules]\n"
        + "print(','.join(bad))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == ""
