"""Write one simulated point: requests.parquet, steps.parquet, summary.json (atomic).

summary.json is written last, so its presence marks a complete point.
"""

from __future__ import annotations

import platform
import subprocess
from pathlib import Path
from typing import Any

from capsim import __version__
from capsim.io.atomic import write_json_atomic, write_parquet_atomic
from capsim.sim_result import SimResult


def git_sha(repo_dir: Path | None = None) -> str | None:
    try:
        out = subprocess.run(
            ["git", "rev-parse", "HEAD"],
            cwd=repo_dir or Path(__file__).resolve().parent,
            capture_output=True,
            text=True,
            timeout=5,
            check=False,
        )
    except (OSError, subprocess.SubprocessError):
        return None
    return out.stdout.strip() or None


def provenance() -> dict[str, Any]:
    import numpy as np
    import pandas as pd
    import simpy

    return {
        "capsim_version": __version__,
        "git_sha": git_sha(),
        "python": platform.python_version(),
        "numpy": np.__version__,
        "pandas": pd.__version__,
        "simpy": simpy.__version__,
    }


def write_result(out_dir: Path, result: SimResult) -> None:
    out_dir.mkdir(parents=True, exist_ok=True)
    write_parquet_atomic(out_dir / "requests.parquet", result.requests)
    write_parquet_atomic(out_dir / "steps.parquet", result.steps)
    write_json_atomic(
        out_dir / "summary.json",
        {
            "summary": result.summary,
            "config": result.config,
            "step_time_model": result.step_time_model,
            "provenance": provenance(),
        },
    )
