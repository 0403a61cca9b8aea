"""Shared click parameter types and option definitions: one entry per option.

Every command builds its options from ``OPTIONS`` (``@options("model", "gpu", ...)``), so a
flag is spelled, bounded, defaulted and documented once. Defaults and help come from the
config dataclasses (``capsim.config``), so ``--help`` and the config cannot disagree.
Options with a ``target`` (``engine``, ``spec``, ``acceptance``, ``load``) are collected
into that config by ``collect``; adding an ``EngineConfig`` flag is one entry here plus the
dataclass field.

Flag names are vLLM's own: ``vllm serve``'s engine arguments (``--gpu-memory-utilization``,
``--tensor-parallel-size``/``-tp``, ``--speculative-config``, ``--kv-cache-dtype``,
``--quantization``, ``--max-num-seqs``, ``--max-num-batched-tokens``, ``--max-model-len``,
``--enable-prefix-caching``, ``--max-cudagraph-capture-size``, ``--enforce-eager``) and
``vllm bench serve``'s load flags (``--num-prompts``, ``--max-concurrency``,
``--request-rate``, ``--burstiness``, ``--dataset-name``, ``--seed``); capsim's earlier
spellings (``--gmu``, ``--tp``, ``-k``, ...) stay as aliases.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from typing import Any

import click

from capsim.commands.command_flags import COMMAND_FLAGS
from capsim.commands.opt import Opt, dc_default, raw_opt
from capsim.commands.param_types import (
    SPEC_METHODS,
    EngineOverheadType,
    FiniteFloat,
    KvCacheDtype,
    ListOf,
    ModelName,
    NameOrFile,
    OutDir,
    SpeculativeConfigJSON,
    TreeShape,
    TreeShapes,
    VllmVersion,
    WorkloadName,
    positive_int,
    workload_names,
)
from capsim.commands.plan_flags import PLAN_FLAGS
from capsim.commit_modes import COMMIT_MODES
from capsim.config import (
    MAX_CONCURRENCY,
    MAX_NUM_REQUESTS,
    MAX_TOKENS,
    AcceptanceConfig,
    EngineConfig,
    LoadConfig,
    SimConfig,
    SpecDecodeConfig,
)
from capsim.draft_rank import MAX_TEMPERATURE, TREE_MODELS
from capsim.gpus import GPUS
from capsim.models import QUANT_METHOD_FORMATS
from capsim.sweep.executors import EXECUTORS
from capsim.treeshape import format_tree
from capsim.units import GiB
from capsim.vllm_rules import DEFAULT_VLLM_VERSION, rules_for

# ------------------------------------------------------------------------ option registry

MAX_KV_CACHE_BYTES = 1024 * 1024 * GiB
"""Largest --kv-cache-memory accepted (1 PiB: more than any GPU node holds)."""
MAX_MM_PER_PROMPT = 1024
"""Most images per prompt accepted by --limit-mm-per-prompt."""


_ENG, _SPEC, _LOAD = EngineConfig, SpecDecodeConfig, LoadConfig


SHARED_OPTIONS: dict[str, Opt] = {
    # deployment
    "model": Opt(
        ("--model", "-m"),
        type=ModelName(),
        source=(SimConfig, "model"),
        help="model preset, its HF id (Qwen/Qwen3.5-35B-A3B, ...) or path to an HF config.json",
    ),
    "gpu": Opt(
        ("--gpu", "-g"),
        type=click.Choice(sorted(GPUS), case_sensitive=False),
        source=(SimConfig, "gpu"),
        help="GPU",
    ),
    "tp": Opt(
        ("--tensor-parallel-size", "-tp", "--tp"),
        type=click.IntRange(1, 64),
        source=(_ENG, "tp"),
        dest="tp",
        target="engine",
    ),
    "gmu": Opt(
        ("--gpu-memory-utilization", "--gmu"),
        type=FiniteFloat(0.0, 1.0, min_open=True),
        default=None,  # the --vllm-version's default (resolve_gmu), not the dataclass's
        help="gpu_memory_utilization (default: the vLLM version's rule, "
        f"{rules_for(DEFAULT_VLLM_VERSION).default_gmu} for {DEFAULT_VLLM_VERSION})",
        dest="gmu",
        target="engine",
    ),
    "gmu_list": Opt(
        ("--gpu-memory-utilization", "--gmu"),
        type=ListOf(FiniteFloat(0.0, 1.0, min_open=True)),
        help="gpu_memory_utilization values, e.g. 0.6,0.75,0.9",
        dest="gmu",
    ),
    "max_num_seqs": Opt(
        ("--max-num-seqs",),
        type=positive_int(MAX_CONCURRENCY),
        source=(_ENG, "max_num_seqs"),
        target="engine",
    ),
    "max_num_batched_tokens": Opt(
        ("--max-num-batched-tokens",),
        type=positive_int(MAX_TOKENS),
        source=(_ENG, "max_num_batched_tokens"),
        target="engine",
    ),
    "max_model_len": Opt(
        ("--max-model-len",),
        type=positive_int(MAX_TOKENS),
        source=(_ENG, "max_model_len"),
        target="engine",
    ),
    "kv_cache_dtype": Opt(
        ("--kv-cache-dtype",),
        type=KvCacheDtype(),
        default=None,
        help="vLLM --kv-cache-dtype: attention KV dtype (auto = the model's, bfloat16)",
        target="engine",
    ),
    "quantization": Opt(
        ("--quantization", "-q"),
        type=click.Choice(sorted(QUANT_METHOD_FORMATS)),
        default=None,
        help="vLLM --quantization: weight format of the checkpoint (default: its "
        "config.json's quantization_config)",
        target="engine",
    ),
    "max_cudagraph_capture_size": Opt(
        ("--max-cudagraph-capture-size",),
        type=click.IntRange(1, MAX_TOKENS),
        default=None,
        help="vLLM --max-cudagraph-capture-size: largest CUDA-graph capture in tokens "
        "(default: vLLM's rule for the version and GPU)",
        target="engine",
    ),
    "engine_overhead": Opt(
        ("--engine-overhead",),
        type=EngineOverheadType(),
        default=None,
        help="add the engine's host cost per step by CUDA-graph mode (FULL decode / "
        "PIECEWISE mixed <= largest capture / eager above), fitted on real vLLM 0.26 H200 "
        "runs (experiments/engine/PLAN.md): measured-h200-vllm0.26, or your machine's own "
        "fit from `capsim engine host-fit` (a .json file); default: kernel prices only",
        target="engine",
    ),
    "client_round_trip_ms": Opt(
        ("--client-round-trip-ms",),
        type=click.FloatRange(0.0, 1e4),
        default=None,
        help="with --engine-overhead: ms from a client's send to the request reaching vLLM's "
        "scheduler (API server and HTTP, engine -> client -> engine in a closed loop; "
        "default 22.7 ms, fitted on the H200 host where client and server share a machine; "
        "`capsim engine host-fit` prints your runs' value)",
        target="engine",
    ),
    "ssm_state_dtype": Opt(
        ("--ssm-state-dtype",),
        type=click.Choice(["float32", "bfloat16"]),
        source=(_ENG, "ssm_state_dtype"),
        target="engine",
    ),
    # vLLM's pool-shaping flags (issue 11): pin or shape the KV/state pool
    "vllm_version": Opt(
        ("--vllm-version",),
        type=VllmVersion(),
        source=(_ENG, "vllm_version"),
        help="vLLM release whose memory accounting to follow "
        "(capsim memory --version-rules lists the rules)",
        target="engine",
    ),
    "kv_cache_memory": Opt(
        ("--kv-cache-memory",),
        type=click.IntRange(1, MAX_KV_CACHE_BYTES),
        default=None,
        help="vLLM --kv-cache-memory BYTES: pin the KV pool (gmu then ignored)",
        dest="kv_cache_memory_bytes",
        target="engine",
    ),
    "num_gpu_blocks_override": Opt(
        ("--num-gpu-blocks-override",),
        type=click.IntRange(2, MAX_TOKENS),
        default=None,
        help="vLLM --num-gpu-blocks-override N: pin the number of blocks",
        target="engine",
    ),
    "limit_mm_per_prompt": Opt(
        ("--limit-mm-per-prompt",),
        type=click.IntRange(0, MAX_MM_PER_PROMPT),
        default=None,
        help="images per prompt; 0 = text only (no vision tower, no encoder profiling); "
        "default: the model's multimodal default",
        target="engine",
    ),
    "enforce_eager": Opt(
        ("--enforce-eager/--no-enforce-eager",),
        source=(_ENG, "enforce_eager"),
        help="vLLM --enforce-eager: no CUDA graphs",
        target="engine",
    ),
    "async_scheduling": Opt(
        ("--async-scheduling/--no-async-scheduling",),
        default=None,
        help="vLLM --async-scheduling: two batches in flight, so a finished request's slot "
        "and a new arrival reach the batch one step later (default: the --vllm-version's, "
        "on since 0.14)",
        target="engine",
    ),
    "prefix_caching": Opt(
        ("--enable-prefix-caching/--no-enable-prefix-caching",),
        source=(_ENG, "enable_prefix_caching"),
        help="vLLM prefix caching (GDN state in 'align' mode); default: the --vllm-version's "
        "for hybrids (on since 0.28, off before); the published runs had it off",
        target="engine",
    ),
    # speculation
    "speculative_config": Opt(
        ("--speculative-config",),
        type=SpeculativeConfigJSON(),
        default=None,
        help='vLLM --speculative-config JSON, e.g. \'{"method": "mtp", '
        '"num_speculative_tokens": 3}\' (methods: ' + ", ".join(SPEC_METHODS) + ")",
    ),
    "spec_tokens": Opt(
        ("--num-speculative-tokens", "--spec-tokens", "-k"),
        type=click.IntRange(0, 64),
        source=(_SPEC, "num_spec_tok"),
        help="MTP chain depth k (0 = no speculation); a --tree sets its own depth",
        dest="num_spec_tok",
        target="spec",
    ),
    "tree": Opt(
        ("--tree", "--tree-widths"),
        type=TreeShape(),
        default=None,
        help="draft tree widths per depth, 2x2x2 (also 2,2,2; N = 2+4+8 = 14 nodes) or chain",
        dest="tree_widths",
        target="spec",
    ),
    "commit": Opt(
        ("--commit",),
        type=click.Choice(COMMIT_MODES),
        source=(_SPEC, "commit"),
        help="GDN state handling during verification",
        target="spec",
    ),
    "acceptance": Opt(
        ("--acceptance",),
        type=ListOf(FiniteFloat(0.0, 1.0)),
        default=None,
        help="per-depth conditional acceptance, e.g. 0.9,0.8,0.7 "
        "(default: 0.8522 at every depth = 3.2 tok/step for k=3)",
    ),
    "tree_model": Opt(
        ("--tree-model",),
        type=click.Choice(TREE_MODELS),
        source=(AcceptanceConfig, "tree_model"),
        help="draft-tree acceptance: rank (calibrated on top-k draft data) | independent "
        "(upper bound)",
        target="acceptance",
    ),
    "temperature": Opt(
        ("--temperature",),
        type=FiniteFloat(0.0, MAX_TEMPERATURE),
        source=(AcceptanceConfig, "temperature"),
        help="sampling temperature of verification (0 = greedy; > 0 lowers acceptance)",
        target="acceptance",
    ),
    # load, named as in `vllm bench serve`
    "dataset": Opt(
        ("--dataset-name", "--workload", "-w"),
        type=NameOrFile([], "workload"),  # choices filled lazily by _workload_type()
        source=(SimConfig, "workload"),
        help="workload name (see 'capsim traces list') or a CSV/Parquet/JSONL file",
        dest="workload",
    ),
    "max_concurrency": Opt(
        ("--max-concurrency", "--concurrency", "-c"),
        type=positive_int(MAX_CONCURRENCY),
        default=None,
        help="closed loop: max requests in flight",
        dest="concurrency",
    ),
    "request_rate": Opt(
        ("--request-rate", "--rate"),
        type=FiniteFloat(0.0, 1e9, min_open=True),
        default=None,
        help="open loop: requests per second (finite; for all-at-once use --max-concurrency)",
        dest="rate",
    ),
    "burstiness": Opt(
        ("--burstiness",),
        type=FiniteFloat(1e-3, 1e3),
        source=(_LOAD, "burstiness"),
        target="load",
    ),
    "num_prompts": Opt(
        ("--num-prompts", "--num-requests", "-n"),
        type=positive_int(MAX_NUM_REQUESTS),
        source=(_LOAD, "num_requests"),
        help="requests to send",
        dest="num_requests",
        target="load",
    ),
    "seed": Opt(
        ("--seed",),
        type=click.IntRange(0, 2**63 - 1),
        source=(SimConfig, "seed"),
    ),
    "step_time": Opt(
        ("--step-time",),
        type=click.Choice(["roofline", "calibrated"]),
        source=(SimConfig, "step_time"),
    ),
    "out": Opt(
        ("--out", "-o"),
        type=OutDir(),
        default=None,
        help="write summary.json, requests.parquet and steps.parquet into this directory",
    ),
    "jobs": Opt(
        ("--jobs",),
        type=click.IntRange(1, 256),
        default=None,
        help="worker processes (default: cores; never more than there are tasks)",
    ),
    # how sweep, whatif and plan run their simulations, and their latency targets
    "executor": raw_opt(
        "--executor",
        type=click.Choice(EXECUTORS),
        default="local",
        show_default=True,
        help="where simulations run: serial, a local process pool (--jobs) or dask "
        "(--scheduler); the results are the same",
    ),
    "scheduler": raw_opt(
        "--scheduler", default=None, help="dask scheduler address (with --executor dask)"
    ),
    "progress": raw_opt("--progress/--no-progress", default=True, help="show a progress bar"),
    "ttft_p99_ms": raw_opt(
        "--ttft-p99-ms",
        type=FiniteFloat(0.0, None, min_open=True),
        default=None,
        help="p99 TTFT target (ms)",
    ),
}
"""Flags several commands share: engine (``target="engine"``), speculation, load, runs."""

OPTIONS: dict[str, Opt] = {**SHARED_OPTIONS, **COMMAND_FLAGS, **PLAN_FLAGS}
"""The one option registry: every flag of every ``capsim`` command is an entry here
(``tests/commands/test_options.py`` checks that no command declares a raw click option)."""


def _resolved(name: str) -> Opt:
    opt = OPTIONS[name]
    if name == "dataset":
        return replace(opt, type=WorkloadName(workload_names(), "workload"))
    return opt


def options(*names: str, **overrides: dict[str, Any]) -> Callable[[Any], Any]:
    """Decorate a command with the named options, in the given order.

    ``overrides`` maps an option name to keyword arguments for its ``click.option``.
    """

    def wrap(fn: Any) -> Any:
        for name in reversed(names):
            fn = _resolved(name).decorator(**overrides.get(name, {}))(fn)
        return fn

    return wrap


def dest_of(opt: Opt) -> str:
    """The parameter name of ``opt`` (its ``dest``, else its first flag in snake case)."""
    return opt.dest or opt.decls[0].split("/")[0].lstrip("-").replace("-", "_")


def fold_speculative_config(params: dict[str, Any]) -> dict[str, Any]:
    """``--speculative-config`` given: its ``num_speculative_tokens`` becomes ``num_spec_tok``
    (a different ``--num-speculative-tokens`` beside it is refused)."""
    spec = params.get("speculative_config")
    if not spec:
        return params
    k = spec["num_spec_tok"]
    given = params.get("num_spec_tok")
    default = dc_default(SpecDecodeConfig, "num_spec_tok")
    if given is not None and given not in (k, default):
        raise click.BadParameter(
            f"num_speculative_tokens={k} disagrees with --num-speculative-tokens {given}",
            param_hint="--speculative-config",
        )
    return {**params, "num_spec_tok": k}


def collect(target: str, params: dict[str, Any], *, given_only: bool = False) -> dict[str, Any]:
    """The parameters of options with ``target`` as config field -> value.

    ``given_only`` leaves out parameters that are None (flags left at a ``None`` default,
    e.g. overrides of a grid TOML's values)."""
    out = {}
    for opt in OPTIONS.values():
        if opt.target != target:
            continue
        dest = dest_of(opt)
        if dest in params and not (given_only and params[dest] is None):
            out[dest] = params[dest]
    return out


__all__ = [
    "OPTIONS",
    "FiniteFloat",
    "ListOf",
    "NameOrFile",
    "Opt",
    "OutDir",
    "SpeculativeConfigJSON",
    "TreeShape",
    "TreeShapes",
    "VllmVersion",
    "WorkloadName",
    "collect",
    "dc_default",
    "fold_speculative_config",
    "format_tree",
    "options",
]
