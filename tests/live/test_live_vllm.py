"""Live: run vLLM's real engine (CPU build, own venv) and compare capsim step by step.

Needs the venv of experiments/live/setup_env.sh. When it is missing the tests build it if
CI=true or CAPSIM_LIVE_SETUP=1 (about 3 minutes, 2.5 GB, PyPI only), else they skip.
"""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from capsim.live.scenarios import CI_SCENARIOS, get_scenario
from capsim.live.stepcheck import compare
from capsim.live.venv import EXPERIMENTS, ensure_models, run_vllm_trace, venv_dir

pytestmark = pytest.mark.live


@pytest.fixture(scope="module")
def live_models() -> Path:
    if not (venv_dir() / ".capsim-live-ok").exists():
        if os.environ.get("CI") == "true" or os.environ.get("CAPSIM_LIVE_SETUP") == "1":
            subprocess.run(["bash", str(EXPERIMENTS / "setup_env.sh")], check=True, timeout=1200)
        else:
            pytest.skip("live venv missing: run experiments/live/setup_env.sh")
    return ensure_models()


# The GDN state dtype for vLLM's "auto" depends on the host CPU (fp32 with AVX-512 BF16,
# else bf16: capsim.live.stepcheck.vllm_cpu_ssm_state_dtype); the trace reports the host's
# capability and the MambaSpec dtypes, and the layout check compares the dtype too.
@pytest.mark.parametrize("name", CI_SCENARIOS)
def test_vllm_and_capsim_agree_on_every_step(live_models: Path, name: str, tmp_path: Path) -> None:
    trace = run_vllm_trace(get_scenario(name), tmp_path / f"{name}.json", live_models)
    assert "error" not in trace, trace.get("error")
    check = compare(trace)
    assert check.layout.agrees, (check.layout.capsim, check.layout.vllm)
    assert check.equal, check.summary()
    assert check.num_preemptions_vllm >= 1


def test_mtp_on_the_hybrid_agrees_with_vllms_lookahead_rule(
    live_models: Path, tmp_path: Path
) -> None:
    trace = run_vllm_trace(get_scenario("qwen3next_mtp"), tmp_path / "mtp.json", live_models)
    assert "error" not in trace, trace.get("error")
    check = compare(trace, admit_with_lookahead=True)
    assert check.layout.agrees and check.equal, check.summary()
    assert check.num_preemptions_vllm >= 1
