"""``capsim doctor``: click glue over ``capsim.memory.doctor`` (the library does the work)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import click

from capsim.commands.options import options

CONTEXT_SETTINGS = {"help_option_names": ["-h", "--help"], "max_content_width": 100}


@click.command("doctor", context_settings=CONTEXT_SETTINGS)
@options("doctor.command")
@options("doctor.from_log")
@options("doctor.vllm_version")
@options("doctor.gpu")
@options("doctor.gpu_total_gib")
@options("doctor.model")
@options("doctor.context")
@options("doctor.json")
def doctor(
    command: str | None,
    log_path: Path | None,
    vllm_version: str | None,
    gpu_name: str | None,
    gpu_total_gib: float | None,
    model_name: str | None,
    contexts: tuple[int, ...],
    as_json: bool,
) -> None:
    """What your vLLM deployment admits at your context lengths, which version-specific
    hazards cost it capacity (with the flag that recovers each), and vLLM's refusals."""
    from capsim.config import EngineConfig, SpecDecodeConfig
    from capsim.memory import doctor as doc
    from capsim.memory.release_rules import rule
    from capsim.memory.vllm_log import read_vllm_log
    from capsim.models import get_model
    from capsim.vllm_rules import rules_for

    if (command is None) == (log_path is None):
        raise click.UsageError("give exactly one of --command and --from-log")
    log = read_vllm_log(log_path) if log_path is not None else None
    vllm_version = _doctor_version(vllm_version, log)
    base = EngineConfig(
        vllm_version=vllm_version,
        gmu=rules_for(vllm_version).default_gmu,
        enable_prefix_caching=bool(rule("hybrid_prefix_caching_default", vllm_version)),
    )
    engine, k, names = _doctor_engine(command, log, base)
    model_name = _doctor_model(model_name, names, log)
    gpu = _doctor_gpu(gpu_name, gpu_total_gib, log)
    spec = SpecDecodeConfig(num_spec_tok=int(k or 0))
    report = doc.diagnose(
        engine.model_for(get_model(model_name)),
        gpu,
        engine,
        spec,
        tuple(contexts) or doc.DEFAULT_CONTEXTS_TOK,
    )
    click.echo(_report_json(report) if as_json else doc.format_report(report))


def _doctor_version(vllm_version: str | None, log: Any) -> str:
    """The release to follow: ``--vllm-version``, else the log's (a dev build refused)."""
    from capsim.memory.log_fixes import dev_build

    if vllm_version is None:
        vllm_version = log.vllm_version if log is not None else None
        if vllm_version is None:
            where = "the log has no version line" if log is not None else "a command line"
            raise click.UsageError(f"--vllm-version is required ({where} does not say it)")
    if dev_build(vllm_version):
        raise click.UsageError(
            f"vllm_version={vllm_version!r} is a development build: give --vllm-version X.Y"
        )
    return vllm_version


def _doctor_engine(command: str | None, log: Any, base: Any) -> tuple[Any, Any, list[str | None]]:
    """(EngineConfig, MTP depth, the model names it gives) from the command line or the log."""
    from capsim.memory import doctor as doc

    if log is None:
        assert command is not None
        text = doc.read_command(command)
        engine, k = doc.engine_from_command(text, base)
        from capsim.memory.log_fixes import serve_command

        served = serve_command(text if "vllm serve " in text else f"vllm serve {text}")
        return engine, k, [served.get("model")]
    engine, k = doc.engine_from_log(log, base)
    return engine, k, [log.model, log.served_model_name]


def _doctor_model(model_name: str | None, names: list[str | None], log: Any) -> str:
    """``--model``, else the preset the command's or log's model names (or weights) match."""
    from capsim.memory.log_compare import guess_preset
    from capsim.memory.log_fixes import preset_for

    if model_name is None:
        model_name = next((g for n in names if (g := guess_preset(n))), None)
        if model_name is None and log is not None:
            model_name = preset_for(log.architecture, names, log.weights_gib)
        if model_name is None:
            raise click.UsageError(f"model {names[0]!r} is not a capsim preset: give --model")
    return model_name


def _doctor_gpu(gpu_name: str | None, gpu_total_gib: float | None, log: Any) -> Any:
    """``--gpu`` (its total memory replaced by ``--gpu-total-gib`` or the log's), else an
    unnamed GPU of that total."""
    from capsim.gpus import get_gpu, with_total_memory
    from capsim.units import GiB

    total = gpu_total_gib if gpu_total_gib is not None else (log.gpu_total_gib if log else None)
    if gpu_name is None and total is None:
        raise click.UsageError("give --gpu NAME (or --gpu-total-gib; a log's total memory line)")
    if gpu_name is not None:
        gpu = get_gpu(gpu_name)
        return with_total_memory(gpu, round(total * GiB)) if total else gpu
    from capsim.memory.log_validate import gpu_from_text

    return gpu_from_text("unnamed", total)


def _report_json(report: Any) -> str:
    """``capsim doctor --json``: the diagnosis as a JSON object."""
    return json.dumps(
        {
            "model": report.model,
            "gpu": report.gpu,
            "vllm_version": report.vllm_version,
            "refusal": report.refusal,
            "admitted": report.admitted,
            "kv_budget_bytes": report.plan.kv_budget_bytes if report.plan else None,
            "hazards": [
                {
                    "key": f.hazard.key,
                    "cost": f.cost,
                    "flag": f.hazard.flag,
                    "source": f.hazard.source,
                }
                for f in report.findings
            ],
        },
        indent=2,
    )
