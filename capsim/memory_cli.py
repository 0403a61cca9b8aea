"""Click glue of the memory-plan options (issue 11), kept apart from ``cli.py``.

``pool_options`` (``pool_override_options`` where a grid TOML gives defaults) adds
vLLM's own flags that shape or pin the pool (``--vllm-version``,
``--kv-cache-memory``, ``--num-gpu-blocks-override``, ``--limit-mm-per-prompt``,
``--enforce-eager``) to any command; ``apply_pool`` folds them into an ``EngineConfig``.
``memory_mode_options`` adds ``--from-log``, ``--validate`` and ``--version-rules`` to
``capsim memory``; ``run_memory_mode`` runs whichever was given.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import Any

import click

from capsim.config import EngineConfig, SpecDecodeConfig
from capsim.core.vllm_versions import DEFAULT_VLLM_VERSION, rules_for, rules_table

POOL_KEYS: tuple[str, ...] = (
    "vllm_version",
    "kv_cache_memory",
    "num_gpu_blocks_override",
    "limit_mm_per_prompt",
    "enforce_eager",
)
MODE_KEYS: tuple[str, ...] = ("from_log", "validate", "version_rules", "validate_out")


def _opts(options: list[Callable[[Any], Any]]) -> Callable[[Any], Any]:
    def wrap(fn: Any) -> Any:
        for opt in reversed(options):
            fn = opt(fn)
        return fn

    return wrap


def make_pool_options(version_default: str | None) -> Callable[[Any], Any]:
    """The pool flags; ``version_default=None`` for commands whose inputs (a grid TOML)
    already say the version, so that only a given flag overrides them."""
    return _opts(
        [
            click.option(
                "--vllm-version",
                default=version_default,
                show_default=version_default is not None,
                help="vLLM release whose memory accounting to follow "
                "(capsim memory --version-rules lists the rules)",
            ),
            click.option(
                "--kv-cache-memory",
                "kv_cache_memory",
                type=click.IntRange(min=1),
                default=None,
                help="vLLM --kv-cache-memory BYTES: pin the KV pool (gmu then ignored)",
            ),
            click.option(
                "--num-gpu-blocks-override",
                type=click.IntRange(min=2),
                default=None,
                help="vLLM --num-gpu-blocks-override N: pin the number of blocks",
            ),
            click.option(
                "--limit-mm-per-prompt",
                type=click.IntRange(min=0),
                default=None,
                help="images per prompt; 0 = text only (no vision tower, no encoder "
                "profiling); default: the model's multimodal default",
            ),
            click.option(
                "--enforce-eager/--no-enforce-eager",
                default=None,
                help="vLLM --enforce-eager: no CUDA graphs",
            ),
        ]
    )


pool_options = make_pool_options(DEFAULT_VLLM_VERSION)
pool_override_options = make_pool_options(None)


def pool_overrides(params: dict[str, Any]) -> dict[str, Any]:
    """The pool flags given on the command line, as EngineConfig/Deployment field names."""
    out = {
        "vllm_version": params.get("vllm_version"),
        "kv_cache_memory_bytes": params.get("kv_cache_memory"),
        "num_gpu_blocks_override": params.get("num_gpu_blocks_override"),
        "limit_mm_per_prompt": params.get("limit_mm_per_prompt"),
        "enforce_eager": params.get("enforce_eager"),
    }
    return {k: v for k, v in out.items() if v is not None}


memory_mode_options = _opts(
    [
        click.option(
            "--from-log",
            type=click.Path(dir_okay=False, path_type=Path),
            default=None,
            help="a vLLM start-up log: plan with its settings and compare term by term",
        ),
        click.option(
            "--validate",
            type=click.Path(file_okay=False, path_type=Path),
            default=None,
            help="a directory with startups.csv (+ models/): reproduce every row",
        ),
        click.option(
            "--validate-out",
            type=click.Path(dir_okay=False, path_type=Path),
            default=None,
            help="with --validate: also write the per-row table as CSV here",
        ),
        click.option(
            "--version-rules", is_flag=True, help="print the vLLM version rules table and exit"
        ),
    ]
)


def resolve_gmu(gmu: float | None, vllm_version: str) -> float:
    """--gmu when given, else the release's default gpu_memory_utilization."""
    return float(gmu) if gmu is not None else rules_for(vllm_version).default_gmu


def apply_pool(engine: EngineConfig, params: dict[str, Any]) -> EngineConfig:
    """The pool options of ``params`` (click kwargs) on top of ``engine``."""
    return replace(engine, **pool_overrides(params))


def run_memory_mode(
    params: dict[str, Any],
    *,
    model_name: str,
    gpu_name: str,
    engine: EngineConfig,
    spec: SpecDecodeConfig,
    model_given: bool,
    as_json: bool,
    gpu_given: bool = True,
) -> bool:
    """Run --version-rules / --validate / --from-log if one was given; True if it ran."""
    if params.get("version_rules"):
        click.echo(rules_table())
        return True
    if params.get("validate") is not None:
        _validate(Path(params["validate"]), params.get("validate_out"), as_json)
        return True
    if params.get("from_log") is not None:
        _from_log(
            Path(params["from_log"]),
            model_name,
            gpu_name,
            engine,
            spec,
            model_given,
            as_json,
            gpu_given,
        )
        return True
    return False


def _validate(directory: Path, out: Path | None, as_json: bool) -> None:
    from capsim.core.log_validate import format_table, summary, validate_dir, write_table

    results = validate_dir(directory)
    if out is not None:
        write_table(out, results)
    if as_json:
        click.echo(json.dumps(summary(results), indent=2))
    else:
        click.echo(format_table(results))


def _guess_model(log_model: str | None) -> str | None:
    from capsim.models import PRESETS

    text = (log_model or "").lower()
    for name in sorted(PRESETS, key=len, reverse=True):
        if name in text.replace("_", "-"):
            return name
    return None


def _from_log(
    path: Path,
    model_name: str,
    gpu_name: str,
    engine: EngineConfig,
    spec: SpecDecodeConfig,
    model_given: bool,
    as_json: bool,
    gpu_given: bool = True,
) -> None:
    from capsim.core.log_compare import compare, format_comparison, settings_from_log
    from capsim.core.log_validate import gpu_from_text
    from capsim.gpus import get_gpu
    from capsim.io.vllm_log import read_vllm_log
    from capsim.models import get_model

    log = read_vllm_log(path)
    if not model_given:
        guessed = _guess_model(log.model) or _guess_model(log.served_model_name)
        if guessed is None:
            raise ValueError(
                f"--from-log {path}: model {log.model or log.served_model_name!r} is not a "
                "capsim preset; "
                "give --model PRESET or --model config.json"
            )
        model_name = guessed
    if gpu_given or log.gpu_total_gib is None:
        gpu = get_gpu(gpu_name)
    else:  # the log's total memory, no GPU name: vLLM's size-based defaults
        gpu = gpu_from_text("unnamed", log.gpu_total_gib)
    settings = settings_from_log(
        log, model=get_model(model_name), gpu=gpu, engine=engine, spec=spec
    )
    c = compare(settings, log)
    if as_json:
        click.echo(
            json.dumps(
                {
                    "log": log.as_dict(),
                    "missing": list(c.missing),
                    "notes": list(settings.notes),
                    "terms": [_row(r) for r in c.rows],
                    "differs": c.differing,
                    "errors": c.errors,
                    "failure": c.failure,
                },
                indent=2,
                default=str,
            )
        )
    else:
        click.echo(format_comparison(c))


def _row(r: Any) -> dict[str, Any]:
    return {k: getattr(r, k) for k in ("term", "log", "capsim", "unit", "status", "source")}
