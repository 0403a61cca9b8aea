"""The isolated vLLM CPU environment and how capsim calls into it.

capsim itself never imports vllm: the live venv (``experiments/live/setup_env.sh``,
default ``.venv-live/`` at the repo root) runs the scripts in ``experiments/live/`` as
subprocesses, and capsim reads the JSON they write.
"""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

from capsim.live.scenarios import Scenario

REPO_ROOT = Path(__file__).resolve().parents[2]
EXPERIMENTS = REPO_ROOT / "experiments" / "live"


def venv_dir() -> Path:
    return Path(os.environ.get("CAPSIM_LIVE_VENV", REPO_ROOT / ".venv-live"))


def live_dir() -> Path:
    """Git-ignored work folder for models, traces and caches (``/.live/``)."""
    return Path(os.environ.get("CAPSIM_LIVE_DIR", REPO_ROOT / ".live"))


def venv_python() -> Path:
    py = venv_dir() / "bin" / "python"
    if not py.exists():
        raise FileNotFoundError(
            f"live venv python {py} does not exist: run experiments/live/setup_env.sh"
        )
    return py


def live_env() -> dict[str, str]:
    # NOTE: run these subprocesses with cwd=live_dir(), never the repo root: vLLM inspects
    # models in a `python -m` subprocess that puts the cwd on sys.path, and the repo's own
    # `kernels/` package then shadows PyPI's `kernels`, which transformers probes for
    # ("No module named 'triton'" from kernels/gdn_verify in the model inspection).
    """Environment for vLLM CPU runs (shared/LIVE_VLLM.md s2): Intel OpenMP preloaded,
    1 GiB KV space (overridden by num_gpu_blocks anyway), offline, no usage stats."""
    env = dict(os.environ)
    iomp = venv_dir() / "lib" / "libiomp5.so"
    if iomp.exists():
        env["LD_PRELOAD"] = str(iomp)
    env.update(
        VLLM_CPU_KVCACHE_SPACE="1",
        HF_HUB_OFFLINE="1",
        TRANSFORMERS_OFFLINE="1",
        VLLM_NO_USAGE_STATS="1",
        VLLM_DO_NOT_TRACK="1",
        VLLM_CACHE_ROOT=str(live_dir() / "vllm_cache"),
        VLLM_ENABLE_V1_MULTIPROCESSING="0",
    )
    env.pop("PYTHONPATH", None)
    return env


def venv_cpu_avx512_bf16(timeout_s: float = 120) -> bool:
    """Whether the live venv's torch sees AVX-512 BF16 on this CPU: vLLM's CPU platform then
    stores an "auto" GDN state in fp32, else in the model dtype (stepcheck's rule)."""
    code = "import torch; print(int(torch.cpu._is_avx512_bf16_supported()))"
    out = subprocess.run(
        [str(venv_python()), "-c", code],
        check=True,
        env=live_env(),
        cwd=live_dir(),
        timeout=timeout_s,
        capture_output=True,
        text=True,
    )
    return out.stdout.strip().splitlines()[-1] == "1"


def ensure_models(models_dir: Path | None = None, timeout_s: float = 600) -> Path:
    models_dir = models_dir or live_dir() / "models"
    live_dir().mkdir(parents=True, exist_ok=True)
    subprocess.run(
        [str(venv_python()), str(EXPERIMENTS / "build_tiny_models.py"), "--out", str(models_dir)],
        check=True,
        env=live_env(),
        cwd=live_dir(),
        timeout=timeout_s,
        capture_output=True,
    )
    return models_dir


def run_vllm_trace(
    scenario: Scenario,
    out_path: Path,
    models_dir: Path | None = None,
    timeout_s: float = 900,
) -> dict:
    """Run ``scenario`` on vLLM's real engine (in-process, in the live venv); return the trace."""
    models_dir = models_dir or live_dir() / "models"
    out_path.parent.mkdir(parents=True, exist_ok=True)
    sc_path = out_path.with_suffix(".scenario.json")
    sc_path.write_text(json.dumps(scenario.to_json(str(models_dir / scenario.model))))
    log_path = out_path.with_suffix(".log")
    with log_path.open("w") as log:
        subprocess.run(
            [str(venv_python()), str(EXPERIMENTS / "trace_vllm.py"), str(sc_path), str(out_path)],
            check=True,
            env=live_env(),
            cwd=live_dir(),
            timeout=timeout_s,
            stdout=log,
            stderr=subprocess.STDOUT,
        )
    return json.loads(out_path.read_text())
