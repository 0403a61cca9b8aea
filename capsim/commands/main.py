"""The ``capsim`` command line: parse, configure, call, write. No logic lives here."""

from __future__ import annotations

import math
import os
import sys
import time
from pathlib import Path
from typing import Any

import click

from capsim.commands.memory import (
    apply_pool_flags,
    memory_mode_options,
    run_memory_mode,
    with_drafter,
)
from capsim.commands.options import collect, fold_speculative_config, options
from capsim.config import (
    AcceptanceConfig,
    EngineConfig,
    LoadConfig,
    SimConfig,
    SpecDecodeConfig,
)
from capsim.gpus import get_gpu
from capsim.io.atomic import dumps_json
from capsim.models import get_model
from capsim.units import GiB, MiB
from capsim.vllm_rules import DEFAULT_VLLM_VERSION, resolve_gmu

CONTEXT_SETTINGS = {"help_option_names": ["-h", "--help"], "max_content_width": 100}


class CapsimGroup(click.Group):
    """The ``capsim`` group: every error ends in one line; ``--debug`` shows tracebacks.

    Bad input raises ``ValueError`` naming the field and value (configs, loaders) or a
    click error naming the option; both become ``Error: <one line>`` and exit code 1/2.
    Anything else is a bug: one line naming the exception, the traceback with ``--debug``.
    """

    def invoke(self, ctx: click.Context) -> object:
        try:
            return super().invoke(ctx)
        except click.ClickException as exc:
            exc.message = one_line(exc.message)
            raise
        except (click.exceptions.Exit, click.exceptions.Abort, KeyboardInterrupt):
            raise
        except Exception as exc:
            if _debug(ctx):
                raise
            if isinstance(exc, ValueError):
                raise click.ClickException(one_line(str(exc))) from None
            if isinstance(exc, MemoryError):
                raise click.ClickException(
                    "out of host memory: the run holds more than this machine has; use "
                    "fewer requests or --streaming (docs/reliability.md)"
                ) from None
            raise click.ClickException(
                one_line(f"internal error {type(exc).__name__}: {exc}")
                + " (rerun with --debug for the traceback)"
            ) from None


def one_line(text: str) -> str:
    """Collapse a multi-line message into one line (``; `` between the lines)."""
    lines = [ln.strip() for ln in str(text).splitlines() if ln.strip()]
    return "; ".join(lines)


def _debug(ctx: click.Context) -> bool:
    return bool((ctx.find_root().obj or {}).get("debug")) or os.environ.get("CAPSIM_DEBUG") == "1"


@click.group(cls=CapsimGroup, context_settings=CONTEXT_SETTINGS)
@click.version_option(package_name="capsim")
@options("main.debug")
@click.pass_context
def main(ctx: click.Context, debug: bool) -> None:
    """capsim: how many requests a vLLM deployment of a GDN hybrid admits, where it
    saturates, and what TTFT/TPOT/throughput it gives, with store-all GDN state snapshots
    versus TreeWY's single reconstructed state."""
    ctx.obj = {"debug": debug}


ENGINE_OPTIONS = (
    "model",
    "gpu",
    "tp",
    "gmu",
    "max_num_seqs",
    "max_num_batched_tokens",
    "max_model_len",
    "ssm_state_dtype",
    "kv_cache_dtype",
    "quantization",
    "max_cudagraph_capture_size",
    "vllm_version",
    "kv_cache_memory",
    "num_gpu_blocks_override",
    "limit_mm_per_prompt",
    "enforce_eager",
    "prefix_caching",
    "async_scheduling",
)
SPEC_OPTIONS = ("speculative_config", "spec_tokens", "tree", "commit", "acceptance")
ACCEPTANCE_OPTIONS = ("tree_model", "temperature")  # how drafts are accepted: simulate only


def spec_config(params: dict[str, Any]) -> SpecDecodeConfig:
    acc = params.get("acceptance")
    extra = collect("acceptance", params)
    spec = SpecDecodeConfig(
        **collect("spec", fold_speculative_config(params)),
        acceptance=AcceptanceConfig(conditional=acc, **extra) if acc else AcceptanceConfig(**extra),
    )
    if acc and len(acc) > 1 and len(acc) != spec.depth:
        raise click.BadParameter(
            f"{','.join(f'{p:g}' for p in acc)}: {len(acc)} per-depth values for a draft depth "
            f"of {spec.depth}; give one value (every depth) or exactly {spec.depth}",
            param_hint="--acceptance",
        )
    return spec


def engine_config(params: dict[str, Any]) -> EngineConfig:
    """The EngineConfig of the engine options; gmu not given -> the vLLM version's default."""
    fields = collect("engine", params, given_only=True)
    fields["gmu"] = resolve_gmu(fields.get("gmu"), fields.get("vllm_version", DEFAULT_VLLM_VERSION))
    return EngineConfig(**fields)


def memory_report(plan) -> str:  # type: ignore[no-untyped-def]
    src = plan.term_sources
    pinned = " (pinned: --kv-cache-memory, gmu ignored)" if plan.kv_cache_memory_pinned else ""
    lines = [
        f"model {plan.model} on {plan.gpu}, tp={plan.tp}, gmu={plan.gmu}, "
        f"vLLM {plan.vllm_version}" + (", multimodal" if plan.multimodal else ", text only"),
        f"  total memory           {plan.total_memory_bytes / GiB:10.2f} GiB",
        f"  budget ceil(gmu*total) {plan.budget_bytes / GiB:10.2f} GiB",
        f"  - weights              {plan.weights_bytes / GiB:10.2f} GiB  ({src['weights']})",
    ]
    for name, value in plan.weights_breakdown_bytes.items():
        lines.append(f"      {name:<22}{value / GiB:10.3f} GiB")
    lines.append(
        f"  - activation peak      {plan.activation_peak_bytes / GiB:10.2f} GiB  "
        f"({src['activation_peak']})"
    )
    for name, value in plan.activation_parts_bytes.items():
        if value:
            lines.append(f"      {name:<22}{value / GiB:10.3f} GiB")
    lines += [
        f"  - runner buffers       {plan.runner_buffers_bytes / GiB:10.2f} GiB  "
        f"({src['runner_buffers']})",
        f"  - non-torch            {plan.non_torch_bytes / GiB:10.2f} GiB  ({src['non_torch']})",
        f"  - CUDA graphs          {plan.cudagraph_bytes / GiB:10.2f} GiB  ({src['cudagraph']}; "
        f"largest capture {plan.cudagraph_capture_max})",
        f"  = KV/state budget      {plan.kv_budget_bytes / GiB:10.2f} GiB{pinned}",
        f"  attention KV per token per layer  {plan.attn_bytes_per_tok_per_layer} B "
        f"({plan.kv_heads_per_rank} KV head(s) per rank)",
        f"  GDN page: conv {plan.conv_state_bytes} B + ssm {plan.ssm_state_bytes} B = "
        f"{plan.mamba_page_unpadded_bytes} B, padded to {plan.page_bytes} B "
        f"({plan.mamba_padding_pct:.2f} %)",
        f"  block_size             {plan.block_size_tok} tokens",
        f"  groups                 group_size {plan.group_size}: {plan.num_attn_groups} attention "
        f"({plan.num_attn_layers} layers) + {plan.num_gdn_groups} GDN "
        f"({plan.num_gdn_layers} layers, {plan.gdn_padding_layers} padding)"
        + (
            f" + {plan.num_draft_groups} drafter ({plan.num_draft_layers} layers, "
            f"{plan.draft_block_size_tok}-token blocks, "
            + (
                f"at most {plan.draft_admission_blocks} blocks per request: sliding window)"
                if plan.draft_admission_blocks
                else "full attention)"
            )
            if plan.num_draft_groups
            else ""
        ),
        f"  bytes per block        {plan.bytes_per_block} B = {plan.bytes_per_block / MiB:.2f} MiB",
        f"  num_blocks             {plan.num_blocks} ({plan.usable_blocks} usable; 0 is null)",
        f"  GDN blocks per request {plan.gdn_blocks_per_request} "
        f"({plan.num_gdn_groups} groups x {plan.gdn_slots_per_group} slots"
        + (
            f" + {plan.pending_blocks_per_request} for TreeWY deferred pending "
            f"{plan.pending_bytes_per_request / MiB:.1f} MiB"
            if plan.pending_blocks_per_request
            else ""
        )
        + f") = {plan.gdn_blocks_per_request * plan.bytes_per_block / MiB:.1f} MiB",
        f"  scheduler              max_num_seqs {plan.max_num_seqs}, max_num_batched_tokens "
        f"{plan.max_num_batched_tokens}, lookahead {plan.lookahead_tok} tok",
        f"  vLLM would log         GPU KV cache size: {plan.vllm_kv_cache_tokens():,} tokens",
        "  max concurrency at context:",
    ]
    for ctx in contexts_for(plan):
        lines.append(
            f"      {ctx:>6} tok: {plan.max_concurrency(ctx):6d} requests "
            f"({plan.blocks_per_request(ctx)} blocks each)"
        )
    return "\n".join(lines)


CONTEXTS_TOK: tuple[int, ...] = (1024, 2048, 4096, 8192, 32768)


def contexts_for(plan) -> tuple[int, ...]:  # type: ignore[no-untyped-def]
    """The table's context lengths that fit max_model_len (max_model_len itself if none)."""
    fit = tuple(c for c in CONTEXTS_TOK if c <= plan.max_model_len)
    return fit or (plan.max_model_len,)


def memory_json(plan) -> dict:  # type: ignore[no-untyped-def,type-arg]
    d = plan.as_json()
    d["max_concurrency_at_context_tok"] = {
        str(ctx): plan.max_concurrency(ctx) for ctx in contexts_for(plan)
    }
    return d


@main.command(context_settings=CONTEXT_SETTINGS)
@options(*ENGINE_OPTIONS, *SPEC_OPTIONS)
@memory_mode_options
@options("memory.json")
@click.pass_context
def memory(ctx: click.Context, as_json: bool, **params: Any) -> None:
    """Print the KV/state pool vLLM would build: budget, weights, page, block size,
    groups, blocks, GDN slots per request and capacity at a few context lengths.
    --from-log compares with a real vLLM start-up, --validate reproduces a set of them."""
    from capsim.memory.memory_plan import plan_memory
    from capsim.memory.term_lookup import measured_term

    spec = with_drafter(params, spec_config(params))
    engine = engine_config(params)

    def given(name: str) -> bool:
        source = ctx.get_parameter_source(name)
        return source is not None and source.name != "DEFAULT"

    if run_memory_mode(
        params,
        model_name=params["model"],
        gpu_name=params["gpu"],
        engine=engine,
        spec=spec,
        model_given=given("model"),
        as_json=as_json,
        gpu_given=given("gpu"),
    ):
        return
    gpu = get_gpu(params["gpu"])
    if params.get("gpu_total_gib") is not None:
        from capsim.gpus import with_total_memory

        gpu = with_total_memory(gpu, round(float(params["gpu_total_gib"]) * GiB))
    model, engine = apply_pool_flags(params, engine.model_for(get_model(params["model"])), engine)
    plan = plan_memory(model, gpu, engine, spec, lookup=measured_term)
    if as_json:
        click.echo(dumps_json(memory_json(plan)))
    else:
        click.echo(memory_report(plan))


def _load_mode(replay: bool, rate: float | None, concurrency: int | None) -> str:
    if replay:
        if rate is not None:
            raise click.BadParameter(
                "--replay sends at the trace's timestamps; drop it or --request-rate",
                param_hint="--replay",
            )
        return "replay"
    if rate is not None:
        return "rate"
    if concurrency is None:
        raise click.UsageError("give --max-concurrency C, --request-rate R or --replay")
    return "concurrency"


def _workload_table(workload: str):  # type: ignore[no-untyped-def]
    """A user file's RequestTable, or None for a registered workload name."""
    path = Path(workload)
    if path.suffix in (".csv", ".parquet", ".jsonl", ".gz") or path.is_file():
        from capsim.traces import load_file

        return load_file(path)
    return None


def step_time_label(model: dict[str, Any]) -> str:
    """'calibrated' or 'calibrated, PROJECTION H200->B200' (as figures and reports say)."""
    kind = str(model.get("kind"))
    projection = model.get("projection")
    return f"{kind}, {str(projection).split(':')[0]}" if projection else kind


@main.command(context_settings=CONTEXT_SETTINGS)
@options(*ENGINE_OPTIONS, *SPEC_OPTIONS, *ACCEPTANCE_OPTIONS)
@options("dataset", "max_concurrency", "request_rate")
@options("simulate.replay")
@options("burstiness", "num_prompts", "seed", "step_time", "engine_overhead")
@options("client_round_trip_ms", "out")
@options("simulate.json")
@options("simulate.save_result")
@options("simulate.result_filename")
@options("simulate.streaming", "simulate.keep_requests", "simulate.keep_steps")
def simulate(
    workload: str,
    concurrency: int | None,
    rate: float | None,
    replay: bool,
    burstiness: float,
    num_requests: int,
    seed: int,
    step_time: str,
    out: Path | None,
    as_json: bool,
    save_result: bool,
    result_filename: Path,
    streaming: bool | None,
    keep_requests: bool | None,
    keep_steps: bool | None,
    **params: Any,
) -> None:
    """Simulate one point (model, GPU, gmu, speculation, workload, load) end to end.

    Load flags are vllm bench serve's: --max-concurrency (closed loop), --request-rate
    (open loop, gamma gaps of shape --burstiness), --num-prompts, --dataset-name."""
    from capsim.footprint import available_memory_bytes
    from capsim.simulate import simulate as run_point

    mode = _load_mode(replay, rate, concurrency)
    if out is not None:
        _check_out_writable(out, "--out")
    if save_result:
        _check_out_writable(result_filename.parent, "--result-filename")
    cfg = SimConfig(
        model=params["model"],
        gpu=params["gpu"],
        engine=engine_config(params),
        spec=spec_config(params),
        workload=workload,
        load=LoadConfig(
            mode=mode,  # type: ignore[arg-type]
            concurrency=concurrency,
            rate_req_per_s=rate,
            burstiness=burstiness,
            num_requests=num_requests,
        ),
        seed=seed,
        step_time=step_time,
    )
    t0 = time.perf_counter()
    result = run_point(
        cfg,
        workload=_workload_table(workload),
        streaming=streaming,
        keep_requests=keep_requests,
        keep_steps=keep_steps,
        memory_limit_bytes=available_memory_bytes(),
    )
    wall_s = time.perf_counter() - t0
    written = _write_outputs(result, out, save_result, result_filename)
    if as_json:
        click.echo(dumps_json(result.summary))
        return
    _print_point(result, cfg, mode, workload, wall_s)
    if out is not None:
        click.echo(f"wrote {out}/" + ", ".join(written))


def _write_outputs(
    result: Any, out: Path | None, save_result: bool, result_filename: Path
) -> list[str]:
    """``--out`` files and the ``--save-result`` JSON; an OSError names the flag."""
    from capsim.io.result_files import write_result

    written: list[str] = []
    if out is not None:
        try:
            written = write_result(out, result)
        except OSError as exc:
            raise click.ClickException(f"--out {out}: cannot write results: {exc}") from None
    if save_result:
        from capsim.io.atomic import write_json_atomic
        from capsim.io.bench import bench_result

        try:
            write_json_atomic(result_filename, bench_result(result))
        except OSError as exc:
            raise click.ClickException(f"--result-filename {result_filename}: {exc}") from None
    return written


def _print_point(result: Any, cfg: SimConfig, mode: str, workload: str, wall_s: float) -> None:
    """The one-point summary: a header line, then the labelled rows."""
    s = result.summary
    load = "replay" if mode == "replay" else f"{s['offered_load']:g}"
    click.echo(
        f"{result.config['model']} on {result.config['gpu']} "
        + (
            f"kv pinned {cfg.engine.kv_cache_memory_bytes / GiB:.2f} GiB "
            if cfg.engine.kv_cache_memory_bytes
            else f"gmu={cfg.engine.gmu} "
        )
        + f"vLLM {cfg.engine.vllm_version} "
        f"commit={result.config['spec']['commit']} workload={workload} "
        f"load={load}  ({wall_s:.2f} s wall)"
    )
    for k, v in summary_rows(s, result.step_time_model, cfg.engine.enable_prefix_caching):
        click.echo(f"  {k:<24}{v}")


def _check_out_writable(path: Path, flag: str) -> None:
    """Before simulating: ``path`` is (or can be made) a directory we can write into."""
    import os
    import tempfile

    if path.exists() and not path.is_dir():
        raise click.BadParameter(f"{str(path)!r} exists and is not a directory", param_hint=flag)
    try:
        path.mkdir(parents=True, exist_ok=True)
        fd, probe = tempfile.mkstemp(prefix=".probe.", dir=path)
        os.close(fd)
        os.unlink(probe)
    except OSError as exc:
        raise click.BadParameter(
            f"{str(path)!r} is not writable ({exc.strerror or exc}); checked before simulating",
            param_hint=flag,
        ) from None


def _num(value: float | None, digits: int = 1, scale: float = 1.0) -> str:
    """``value * scale`` with ``digits`` decimals; n/a where undefined (None or NaN)."""
    if value is None or not math.isfinite(value):
        return "n/a"
    return f"{value * scale:.{digits}f}"


def _ms(value: float | None, digits: int = 1) -> str:
    return _num(value, digits, 1e3)


def summary_rows(
    s: dict[str, Any], step_time_model: dict[str, Any], prefix_caching: bool = False
) -> list[tuple[str, str]]:
    """The printed summary of ``simulate`` (n/a where a metric is undefined)."""
    rows = [
        ("requests", f"{s['num_requests']}"),
        ("duration", f"{s['duration_s']:.2f} s"),
        ("output throughput", f"{s['output_throughput_tok_per_s']:.1f} tok/s"),
        (
            "warm-up / cool-down",
            f"{_num(s.get('warmup_s'), 2)} s / {_num(s.get('cooldown_s'), 2)} s at "
            f"{_num(s.get('warmup_output_throughput_tok_per_s'))} / "
            f"{_num(s.get('cooldown_output_throughput_tok_per_s'))} tok/s",
        ),
        (
            "under load (no drain)",
            f"{_num(s.get('load_output_throughput_tok_per_s'))} tok/s; p99 TTFT after the "
            f"burst {_ms(s.get('steady_ttft_p99_s'))} ms "
            f"({s.get('steady_num_requests', 0)} requests)",
        ),
        ("TTFT mean / p99", f"{_ms(s['ttft_mean_s'])} / {_ms(s['ttft_p99_s'])} ms"),
        ("TPOT mean / p99", f"{_ms(s['tpot_mean_s'], 2)} / {_ms(s['tpot_p99_s'], 2)} ms"),
        ("E2EL mean", f"{s['e2el_mean_s']:.2f} s"),
        ("peak KV/state usage", f"{s['peak_kv_usage'] * 100:.1f} %"),
        ("peak running / waiting", f"{s['peak_running']} / {s['peak_waiting']}"),
        ("preemptions", f"{s['num_preemptions']}"),
        (
            "acceptance length",
            f"{s['mean_acceptance_len_tok']:.2f} tok/step"
            if s["mean_acceptance_len_tok"] == s["mean_acceptance_len_tok"]  # not NaN
            else "none (no speculation, k=0)",
        ),
        (
            "pool",
            f"{s['usable_blocks']} blocks of {s['block_size_tok']} tok, "
            f"{s['gdn_blocks_per_request']} GDN blocks/request, analytical capacity "
            f"{s['analytical_capacity_req']} at {s['mean_context_tok']} tok",
        ),
        ("step-time model", step_time_label(step_time_model)),
    ]
    if prefix_caching:
        rows.append(
            (
                "prefix cache",
                f"hit rate {s['prefix_cache_hit_rate']:.3f} ({s['prefix_cache_hits_tok']} of "
                f"{s['prefix_cache_queries_tok']} tok), {s['num_cached_block_evictions']} "
                "cached blocks evicted",
            )
        )
    return rows


def _register_commands() -> None:
    """Attach the commands that live in their own packages (imported lazily by click)."""
    from capsim.commands.calibrate import calibrate
    from capsim.commands.doctor import doctor
    from capsim.commands.engine import engine
    from capsim.commands.live import crosscheck_cmd, live, stepcheck
    from capsim.commands.plan import plan
    from capsim.commands.sweep import knee, report, sweep, whatif
    from capsim.commands.traces import traces

    for cmd in (
        traces,
        sweep,
        knee,
        report,
        whatif,
        plan,
        calibrate,
        live,
        crosscheck_cmd,
        stepcheck,
        doctor,
        engine,
    ):
        main.add_command(cmd)


_register_commands()


if __name__ == "__main__":
    sys.exit(main())
