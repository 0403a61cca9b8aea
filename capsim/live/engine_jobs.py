"""Job lists for the real-engine runner: server and bench settings, their `vllm serve` /
`vllm bench serve` command lines, and the job-list parser (vLLM's own flag names).

Standard library only, like ``engine_runner.py`` (which imports it): the two files are
copied together next to the payload on a GPU machine and run there as scripts.
"""

from __future__ import annotations

import dataclasses
import json
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

DEFAULT_ACCEPTANCE = 0.8522  # capsim's default conditional acceptance per depth
KV_DONE_MARKERS = ("GPU KV cache size:",)
# vLLM 0.26 checks max_num_seqs against the Mamba blocks after it prints the KV lines
# (config/compilation.py resolve_cudagraph_mode_and_sizes), so a "kv" job sees it only after
# its KV line; the runner looks for it once the server is stopped.
REFUSAL_AFTER_KV = "exceeds available Mamba cache blocks"
FAIL_MARKERS = (
    REFUSAL_AFTER_KV,
    "Engine core initialization failed",
    "EngineCore failed to start",
    "CUDA out of memory",
    "No available memory for the cache blocks",
)
SAMPLED_METRICS: dict[str, str] = {
    "vllm:num_requests_running": "running",
    "vllm:num_requests_waiting": "waiting",
    "vllm:kv_cache_usage_perc": "kv_usage",
    "vllm:num_preemptions_total": "preemptions",
    "vllm:prompt_tokens_total": "prompt_tok",
    "vllm:generation_tokens_total": "generation_tok",
    "vllm:spec_decode_num_drafts_total": "spec_drafts",
    "vllm:spec_decode_num_draft_tokens_total": "spec_draft_tok",
    "vllm:spec_decode_num_accepted_tokens_total": "spec_accepted_tok",
}
PER_POSITION = "vllm:spec_decode_num_accepted_tokens_per_pos_total"
STEPLOG_DIR = Path(__file__).resolve().parent / "engine_steplog"  # sitecustomize.py inside


def synthetic_rates(k: int, conditional: float = DEFAULT_ACCEPTANCE) -> list[float]:
    """Per-position unconditional rates of a chain with one conditional acceptance at
    every depth (vLLM's `synthetic_acceptance_rates`): p, p^2, ..., p^k."""
    return [round(conditional**i, 6) for i in range(1, k + 1)]


@dataclass(frozen=True)
class ServerSpec:
    """One `vllm serve` configuration (None = vLLM's default)."""

    gpu_memory_utilization: float = 0.9
    num_speculative_tokens: int = 3
    synthetic_acceptance_rates: tuple[float, ...] | None = None  # None: capsim's default chain
    max_num_seqs: int | None = None
    max_num_batched_tokens: int | None = None
    enable_prefix_caching: bool | None = None
    port: int = 8000
    extra_args: tuple[str, ...] = ()
    step_log: bool = False  # per-step log of the engine core (engine_steplog/sitecustomize.py)
    # VLLM_LOGGING_LEVEL for the server (None: vLLM's default INFO); "DEBUG" prints 0.26's
    # per-mode CUDA-graph estimate lines (first capture + per-graph); start-ups only
    log_level: str | None = None
    # a config.json served instead of the model dir's own (e.g. one TP rank's shapes,
    # scripts/engine_tp_shape.py): the runner serves a sibling dir holding it and links to
    # the model dir's other files (served_model_dir); a relative path is looked up in the
    # working directory (the repository root on the device), then beside the job list.
    # vLLM's --hf-overrides cannot do this with MTP: 0.26's draft ModelConfig drops dict
    # overrides (config/speculative.py compose_draft_hf_overrides)
    model_config: str | None = None

    def __post_init__(self) -> None:
        if self.log_level not in (None, "DEBUG", "INFO", "WARNING", "ERROR"):
            raise ValueError(f"server.log_level={self.log_level!r}: DEBUG, INFO, WARNING or ERROR")

    def speculative_config(self) -> dict[str, Any] | None:
        k = self.num_speculative_tokens
        if k == 0:
            return None
        rates = list(self.synthetic_acceptance_rates or synthetic_rates(k))
        if len(rates) != k:
            raise ValueError(f"server.synthetic_acceptance_rates={rates}: need {k} values")
        return {
            "method": "mtp",
            "num_speculative_tokens": k,
            "rejection_sample_method": "synthetic",
            "synthetic_acceptance_rates": rates,
        }


def serve_argv(
    spec: ServerSpec, model: str, python: str = sys.executable, payload_flags: bool = True
) -> list[str]:
    """The `vllm serve` command line (dummy weights; the payload's two required flags)."""
    argv = [
        python,
        "-m",
        "vllm.entrypoints.cli.main",
        "serve",
        model,
        "--host",
        "127.0.0.1",
        "--port",
        str(spec.port),
        "--gpu-memory-utilization",
        str(spec.gpu_memory_utilization),
    ]
    if payload_flags:
        argv += ["--load-format", "dummy", "--gdn-prefill-backend", "triton"]
    sc = spec.speculative_config()
    if sc is not None:
        argv += ["--speculative-config", json.dumps(sc, separators=(",", ":"))]
    if spec.max_num_seqs is not None:
        argv += ["--max-num-seqs", str(spec.max_num_seqs)]
    if spec.max_num_batched_tokens is not None:
        argv += ["--max-num-batched-tokens", str(spec.max_num_batched_tokens)]
    if spec.enable_prefix_caching is not None:
        argv.append(
            "--enable-prefix-caching"
            if spec.enable_prefix_caching
            else "--no-enable-prefix-caching"
        )
    return argv + list(spec.extra_args)


def resolve_model_config(path: str, jobs_dir: Path | None = None) -> Path:
    """``server.model_config`` as a file: absolute, or relative to the working directory,
    then to ``jobs_dir`` (the job list's folder)."""
    p = Path(path)
    for cand in (p, *((jobs_dir / p,) if jobs_dir is not None and not p.is_absolute() else ())):
        if cand.is_file():
            return cand.resolve()
    raise ValueError(f"server.model_config={path!r}: no such file (nor beside the job list)")


def served_model_dir(base: Path, config: Path) -> Path:
    """``base``'s sibling ``<base>-<config stem>`` serving ``config`` as its config.json; every
    other entry of ``base`` (tokenizer, processor configs, datasets) is a symlink to it."""
    if not (base / "config.json").is_file():
        raise ValueError(f"--model={str(base)!r}: server.model_config needs a local model dir")
    stem = config.name.removesuffix(".json").removesuffix(".config")
    dest = base.parent / f"{base.name}-{stem}"
    dest.mkdir(parents=True, exist_ok=True)
    for entry in base.iterdir():
        if entry.name == "config.json":
            continue
        link = dest / entry.name
        if link.is_symlink() or link.exists():
            link.unlink()
        link.symlink_to(entry.resolve())
    tmp = dest / "config.json.tmp"
    tmp.write_bytes(config.read_bytes())
    tmp.replace(dest / "config.json")
    return dest


def serve_env(base: dict[str, str], payload_flags: bool = True) -> dict[str, str]:
    env = dict(base)
    env.setdefault("HF_HUB_OFFLINE", "1")
    env.setdefault("VLLM_SERVER_DEV_MODE", "1")  # /server_info
    env.setdefault("PYTHONUNBUFFERED", "1")
    if payload_flags:
        env.setdefault("VLLM_USE_FLASHINFER_SAMPLER", "0")
    return env


@dataclass(frozen=True)
class BenchSpec:
    """One measured `vllm bench serve` run (closed loop or Poisson)."""

    num_prompts: int
    max_concurrency: int | None = None
    request_rate: float | None = None
    dataset_name: str = "random"  # "random" (fixed lengths) or "custom" (a JSONL list)
    input_len: int = 1024
    output_len: int = 256
    dataset_path: str | None = None
    warmup_prompts: int = 0
    # "bench": the warm-up is a `vllm bench serve` run (what calls 1-2 of 2026-12-01 used);
    # "http": this file's own client sends it (saves the ~20 s start of a bench process)
    warmup_client: str = "bench"
    seed: int = 0
    sample_period_s: float = 0.5
    # with a step-log server: False pauses the log for this bench and its warm-up (a paired
    # run on the same server measures what the log itself costs)
    step_log: bool = True
    # POST /reset_prefix_cache (vLLM's dev-mode route, VLLM_SERVER_DEV_MODE=1) between the
    # warm-up and the measured run, so a prefix-caching run starts cold as capsim simulates it
    # (the warm-up sends the dataset's first rows, which the measured run sends again)
    reset_prefix_cache: bool = False

    def __post_init__(self) -> None:
        if self.num_prompts < 1:
            raise ValueError(f"bench.num_prompts={self.num_prompts} must be >= 1")
        if self.dataset_name not in ("random", "custom"):
            raise ValueError(f"bench.dataset_name={self.dataset_name!r}: random or custom")
        if self.warmup_client not in ("bench", "http"):
            raise ValueError(f"bench.warmup_client={self.warmup_client!r}: bench or http")
        if self.dataset_name == "custom" and not self.dataset_path:
            raise ValueError("bench.dataset_path is required for dataset_name=custom")


def bench_argv(
    b: BenchSpec,
    model: str,
    port: int,
    num_prompts: int,
    result_dir: str | None,
    python: str = sys.executable,
    max_concurrency: int | None = None,
) -> list[str]:
    """`vllm bench serve` for `b` (num_prompts given separately: warm-ups use fewer)."""
    argv = [
        python,
        "-m",
        "vllm.entrypoints.cli.main",
        "bench",
        "serve",
        "--backend",
        "vllm",
        "--base-url",
        f"http://127.0.0.1:{port}",
        "--model",
        model,
        "--tokenizer",
        model,
        "--num-prompts",
        str(num_prompts),
        "--seed",
        str(b.seed),
        "--ignore-eos",
        "--disable-tqdm",
        "--percentile-metrics",
        "ttft,tpot,itl,e2el",
        "--metric-percentiles",
        "50,90,99",
    ]
    if b.dataset_name == "random":
        argv += [
            "--dataset-name",
            "random",
            "--random-input-len",
            str(b.input_len),
            "--random-output-len",
            str(b.output_len),
            "--random-range-ratio",
            "0",
        ]
    else:
        argv += [
            "--dataset-name",
            "custom",
            "--dataset-path",
            str(b.dataset_path),
            "--custom-output-len",
            "-1",
            "--skip-chat-template",
            "--disable-shuffle",
        ]
    conc = max_concurrency if max_concurrency is not None else b.max_concurrency
    if conc is not None:
        argv += ["--max-concurrency", str(conc)]
    if b.request_rate is not None:
        argv += ["--request-rate", str(b.request_rate)]
    if result_dir is not None:
        argv += [
            "--save-result",
            "--save-detailed",
            "--result-dir",
            result_dir,
            "--result-filename",
            "bench.json",
        ]
    return argv


@dataclass(frozen=True)
class Job:
    name: str
    kind: str  # "startup" | "bench"
    est_s: float
    server: ServerSpec | None = None
    mode: str = "full"  # startup: "kv" (stop at the KV-cache line) or "full"
    bench: BenchSpec | None = None

    def __post_init__(self) -> None:
        if not self.name or any(c not in _NAME_OK for c in self.name):
            raise ValueError(f"job.name={self.name!r}: letters, digits, '_', '-', '.' only")
        if self.kind not in ("startup", "bench"):
            raise ValueError(f"job.kind={self.kind!r}: startup or bench")
        if not self.est_s > 0:
            raise ValueError(f"job.est_s={self.est_s} must be > 0 ({self.name})")
        if self.kind == "startup" and (self.server is None or self.mode not in ("kv", "full")):
            raise ValueError(f"job {self.name}: startup needs server and mode kv|full")
        if self.kind == "bench" and self.bench is None:
            raise ValueError(f"job {self.name}: bench needs a bench block")


_NAME_OK = set("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_-.")


def _build(cls: type, raw: dict[str, Any], where: str) -> Any:
    names = {f.name for f in dataclasses.fields(cls)}
    extra = set(raw) - names
    if extra:
        raise ValueError(f"{where}: unknown field(s) {sorted(extra)}")
    kw = {k: (tuple(v) if isinstance(v, list) else v) for k, v in raw.items()}
    return cls(**kw)


def parse_jobs(raw: dict[str, Any]) -> tuple[list[Job], dict[str, Any]]:
    """Jobs from a job-list dict ({"jobs": [...], ...}); the rest is returned as settings."""
    jobs = []
    for i, j in enumerate(raw.get("jobs", [])):
        j = dict(j)
        if "server" in j:
            j["server"] = _build(ServerSpec, j["server"], f"jobs[{i}].server")
        if "bench" in j:
            j["bench"] = _build(BenchSpec, j["bench"], f"jobs[{i}].bench")
        jobs.append(_build(Job, j, f"jobs[{i}]"))
    if not jobs:
        raise ValueError("job list: no jobs")
    names = [j.name for j in jobs]
    if len(set(names)) != len(names):
        raise ValueError(f"job list: duplicate job names in {names}")
    return jobs, {k: v for k, v in raw.items() if k != "jobs"}
