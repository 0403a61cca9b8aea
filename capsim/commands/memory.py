"""Click glue of ``capsim memory``'s modes (issue 11), kept apart from ``commands/main.py``.

The pool flags vLLM itself has (``--vllm-version``, ``--kv-cache-memory``,
``--num-gpu-blocks-override``, ``--limit-mm-per-prompt``, ``--enforce-eager``) are entries
of ``capsim.commands.options.OPTIONS`` (engine target). Here: ``memory_mode_options`` adds
``--from-log``, ``--validate``, ``--validate-out`` and ``--version-rules`` to
``capsim memory``; ``run_memory_mode`` runs whichever was given;
``capsim.vllm_rules.resolve_gmu``
gives the release's default gpu_memory_utilization when ``--gmu`` is not given.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import click

from capsim.commands.options import options
from capsim.config import EngineConfig, SpecDecodeConfig
from capsim.vllm_rules import rules_table

MODE_KEYS: tuple[str, ...] = (
    "from_log",
    "validate",
    "version_rules",
    "validate_out",
    "gpu_total_gib",
    "drafter",
    "kv_cache_dtype",
    "quantization",
)


memory_mode_options = options(
    "memory.from_log",
    "memory.validate",
    "memory.validate_out",
    "memory.version_rules",
    "memory.gpu_total_gib",
    "memory.drafter",
)


def apply_pool_flags(
    params: dict[str, Any], model: Any, engine: EngineConfig
) -> tuple[Any, EngineConfig]:
    """--kv-cache-dtype and --quantization, in vLLM's spelling, onto the model and engine."""
    from dataclasses import replace

    from capsim.memory.log_compare import KV_DTYPES, QUANT

    if params.get("kv_cache_dtype"):
        engine = replace(engine, kv_cache_dtype=KV_DTYPES[params["kv_cache_dtype"]])
    if params.get("quantization"):
        model = replace(model, quantization=QUANT[params["quantization"]])
    return model, engine


def with_drafter(params: dict[str, Any], spec: SpecDecodeConfig) -> SpecDecodeConfig:
    """--drafter FILE onto the speculative config (the file's every value cites a source)."""
    from dataclasses import replace

    from capsim.drafter import drafter_from_json

    path = params.get("drafter")
    return spec if path is None else replace(spec, drafter=drafter_from_json(path))


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
        from capsim.memory.release_rules import rules_markdown

        click.echo(rules_table())
        click.echo("")
        click.echo(rules_markdown())
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
    from capsim.memory.log_validate import format_table, summary, validate_dir, write_table

    results = validate_dir(directory)
    if out is not None:
        write_table(out, results)
    if as_json:
        click.echo(json.dumps(summary(results), indent=2))
    else:
        click.echo(format_table(results))


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
    from capsim.gpus import get_gpu
    from capsim.memory.log_compare import (
        compare,
        format_comparison,
        guess_preset,
        settings_from_log,
    )
    from capsim.memory.log_fixes import missing_lines, preset_for
    from capsim.memory.log_validate import gpu_from_text
    from capsim.memory.vllm_log import read_vllm_log
    from capsim.models import get_model

    log = read_vllm_log(path)
    if not model_given:
        guessed = guess_preset(log.model) or guess_preset(log.served_model_name)
        guessed = guessed or preset_for(
            log.architecture, [log.model, log.served_model_name], log.weights_gib
        )
        if guessed is None:
            raise ValueError(
                f"--from-log {path}: model {log.model or log.served_model_name!r} "
                f"(architecture {log.architecture or 'not logged'}) is not a capsim preset; "
                "give --model PRESET or --model config.json"
            )
        model_name = guessed
    if gpu_given:
        gpu = get_gpu(gpu_name)
    elif log.gpu_total_gib is not None:  # the log's total memory: vLLM's size-based defaults
        gpu = gpu_from_text("unnamed", log.gpu_total_gib)
    else:
        raise ValueError(
            f"--from-log {path}: the log has no 'Free memory on device (F/T GiB)' line (the "
            "GPU's total memory); give --gpu NAME"
        )
    settings = settings_from_log(
        log, model=get_model(model_name), gpu=gpu, engine=engine, spec=spec
    )
    c = compare(settings, log)
    if as_json:
        click.echo(
            json.dumps(
                {
                    "log": log.as_dict(),
                    "missing": missing_lines(log),
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
