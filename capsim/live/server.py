"""Start and stop a vLLM CPU OpenAI server from the live venv, on 127.0.0.1 only.

The server runs with ``experiments/live/steplog`` on PYTHONPATH, so when ``step_log`` is
given its engine core appends one JSON line per step (see steplog/sitecustomize.py).
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
import urllib.request
from dataclasses import dataclass
from pathlib import Path

from capsim.live.venv import EXPERIMENTS, live_dir, live_env, venv_python


@dataclass(frozen=True, slots=True, kw_only=True)
class ServerArgs:
    model_dir: Path
    port: int = 8077
    served_name: str = "tiny"
    block_size: int = 32
    num_gpu_blocks: int = 40
    max_num_seqs: int = 8
    max_num_batched_tokens: int = 512
    max_model_len: int = 2048
    speculative_config: str = ""  # vLLM's --speculative-config JSON; "" = no speculation

    def __post_init__(self) -> None:
        if not 1024 <= self.port <= 65535:
            raise ValueError(f"server.port={self.port} must be in [1024, 65535]")
        if self.speculative_config:
            try:
                spec = json.loads(self.speculative_config)
            except ValueError:
                spec = None
            if not isinstance(spec, dict):
                raise ValueError(
                    f"server.speculative_config={self.speculative_config!r} must be a JSON object"
                )

    def argv(self) -> list[str]:
        return [
            "-m", "vllm.entrypoints.openai.api_server",
            "--model", str(self.model_dir),
            "--served-model-name", self.served_name,
            "--host", "127.0.0.1",
            "--port", str(self.port),
            "--dtype", "bfloat16",
            "--max-model-len", str(self.max_model_len),
            "--block-size", str(self.block_size),
            "--num-gpu-blocks-override", str(self.num_gpu_blocks),
            "--max-num-seqs", str(self.max_num_seqs),
            "--max-num-batched-tokens", str(self.max_num_batched_tokens),
            "--no-enable-prefix-caching",
            "--enforce-eager",
        ] + (["--speculative-config", self.speculative_config]
             if self.speculative_config else [])  # fmt: skip

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"


class LiveServer:
    """A running server; use as a context manager (stops the process it started)."""

    def __init__(self, args: ServerArgs, log_path: Path, step_log: Path | None = None) -> None:
        self.args = args
        self.log_path = log_path
        self.step_log = step_log
        self.proc: subprocess.Popen | None = None

    def start(self, timeout_s: float = 240) -> LiveServer:
        env = live_env()
        env["VLLM_ENABLE_V1_MULTIPROCESSING"] = "1"
        env["VLLM_CPU_OMP_THREADS_BIND"] = "auto"
        env["PYTHONPATH"] = str(EXPERIMENTS / "steplog")
        if self.step_log is not None:
            self.step_log.parent.mkdir(parents=True, exist_ok=True)
            self.step_log.unlink(missing_ok=True)
            env["CAPSIM_STEP_LOG"] = str(self.step_log.resolve())
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        log = self.log_path.open("w")
        self.proc = subprocess.Popen(
            [str(venv_python()), *self.args.argv()],
            env=env,
            cwd=live_dir(),
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(
                    f"vLLM server exited with {self.proc.returncode}; see {self.log_path}"
                )
            try:
                with urllib.request.urlopen(self.args.url + "/health", timeout=2) as r:
                    if r.status == 200:
                        return self
            except OSError:
                pass
            time.sleep(1.0)
        self.stop()
        raise TimeoutError(f"vLLM server not healthy after {timeout_s}s; see {self.log_path}")

    def stop(self) -> None:
        if self.proc is None or self.proc.poll() is not None:
            return
        # the server's own process group (start_new_session): API server + engine core
        os.killpg(self.proc.pid, signal.SIGTERM)
        try:
            self.proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait(timeout=10)

    def __enter__(self) -> LiveServer:
        return self.start() if self.proc is None else self

    def __exit__(self, *exc: object) -> None:
        self.stop()
