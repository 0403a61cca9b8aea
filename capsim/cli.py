"""The ``capsim`` command line: parse, configure, call, write. No logic lives here."""

from __future__ import annotations

import json
import sys
import time
from dataclasses import asdict
from pathlib import Path

import click

from capsim.config import (
    AcceptanceConfig,
    EngineConfig,
    LoadConfig,
    SimConfig,
    SpecDecodeConfig,
)
from capsim.core.draft_rank import TREE_MODELS
from capsim.cost.base import COMMIT_MODES
from capsim.gpus import GPUS, get_gpu
from capsim.models import PRESETS, get_model
from capsim.units import GiB, MiB

CONTEXT_SETTINGS = {"help_option_names": ["-h", "--help"], "max_content_width": 100}


def parse_int_list(field_name: str, text: str | None) -> tuple[int, ...] | None:
    """'2,2,2' -> (2, 2, 2); errors name the option and the value."""
    if text is None or text == "":
        return None
    try:
        return tuple(int(x) for x in text.split(","))
    except ValueError:
        raise click.BadParameter(
            f"{text!r} is not a comma list of integers", param_hint=field_name
        ) from None


def parse_float_list(field_name: str, text: str | None) -> tuple[float, ...] | None:
    if text is None or text == "":
        return None
    try:
        return tuple(float(x) for x in text.split(","))
    except ValueError:
        raise click.BadParameter(
            f"{text!r} is not a comma list of numbers", param_hint=field_name
        ) from None


def _spec_from_options(
    spec_tokens: int,
    tree_widths: str | None,
    commit: str,
    acceptance: str | None,
    tree_model: str = "rank",
    temperature: float = 0.0,
) -> SpecDecodeConfig:
    widths = parse_int_list("--tree-widths", tree_widths)
    acc = parse_float_list("--acceptance", acceptance)
    extra = {"tree_model": tree_model, "temperature": temperature}
    return SpecDecodeConfig(
        num_spec_tok=spec_tokens,
        tree_widths=widths,
        commit=commit,  # type: ignore[arg-type]
        acceptance=AcceptanceConfig(conditional=acc, **extra) if acc else AcceptanceConfig(**extra),
    )


def _run_or_fail(fn, *args, **kwargs):  # type: ignore[no-untyped-def]
    """Turn a ValueError (bad config/input) into a clean message and exit code 1."""
    try:
        return fn(*args, **kwargs)
    except ValueError as exc:
        raise click.ClickException(str(exc)) from None


@click.group(context_settings=CONTEXT_SETTINGS)
@click.version_option(package_name="capsim")
def main() -> None:
    """capsim: how many requests a vLLM deployment of a GDN hybrid admits, where it
    saturates, and what TTFT/TPOT/throughput it gives, with store-all GDN state snapshots
    versus TreeWY's single reconstructed state."""


spec_options = [
    click.option(
        "--spec-tokens",
        "-k",
        type=int,
        default=3,
        show_default=True,
        help="MTP chain depth k (0 = no speculation); ignored with --tree-widths",
    ),
    click.option(
        "--tree-widths",
        type=str,
        default=None,
        help="draft tree branching per depth, e.g. 2,2,2 (N = 2+4+8 = 14 nodes)",
    ),
    click.option(
        "--commit",
        type=click.Choice(COMMIT_MODES),
        default="storeall",
        show_default=True,
        help="GDN state handling during verification",
    ),
    click.option(
        "--acceptance",
        type=str,
        default=None,
        help="per-depth conditional acceptance, e.g. 0.9,0.8,0.7 "
        "(default: 0.8522 at every depth = 3.2 tok/step for k=3)",
    ),
]

engine_options = [
    click.option(
        "--model",
        "-m",
        default="qwen3.5-35b-a3b",
        show_default=True,
        help=f"preset ({', '.join(PRESETS)}) or path to an HF config.json",
    ),
    click.option("--gpu", "-g", default="B200", show_default=True, help=f"GPU ({', '.join(GPUS)})"),
    click.option("--tp", type=int, default=1, show_default=True, help="tensor-parallel size"),
    click.option(
        "--gmu", type=float, default=0.9, show_default=True, help="gpu_memory_utilization"
    ),
    click.option("--max-num-seqs", type=int, default=None, help="default: vLLM's for the GPU tier"),
    click.option(
        "--max-num-batched-tokens", type=int, default=None, help="default: vLLM's for the GPU tier"
    ),
    click.option(
        "--max-model-len",
        type=int,
        default=None,
        help="default: the model's max_position_embeddings",
    ),
    click.option(
        "--ssm-state-dtype",
        type=click.Choice(["float32", "bfloat16"]),
        default=None,
        help="GDN recurrent state dtype (default: the model's vLLM default)",
    ),
]


def add_options(options):  # type: ignore[no-untyped-def]
    def wrap(fn):  # type: ignore[no-untyped-def]
        for opt in reversed(options):
            fn = opt(fn)
        return fn

    return wrap


def _engine(tp, gmu, max_num_seqs, max_num_batched_tokens, max_model_len, ssm_state_dtype):  # type: ignore[no-untyped-def]
    return EngineConfig(
        tp=tp,
        gmu=gmu,
        max_num_seqs=max_num_seqs,
        max_num_batched_tokens=max_num_batched_tokens,
        max_model_len=max_model_len,
        ssm_state_dtype=ssm_state_dtype,
    )


def memory_report(plan) -> str:  # type: ignore[no-untyped-def]
    lines = [
        f"model {plan.model} on {plan.gpu}, tp={plan.tp}, gmu={plan.gmu}",
        f"  total memory           {plan.total_memory_bytes / GiB:10.2f} GiB",
        f"  budget ceil(gmu*total) {plan.budget_bytes / GiB:10.2f} GiB",
        f"  - weights              {plan.weights_bytes / GiB:10.2f} GiB",
    ]
    for name, value in plan.weights_breakdown_bytes.items():
        lines.append(f"      {name:<22}{value / GiB:10.3f} GiB")
    lines += [
        f"  - activation peak      {plan.activation_peak_bytes / GiB:10.2f} GiB  (modelled)",
        f"  - runner buffers       {plan.runner_buffers_bytes / GiB:10.2f} GiB  (modelled)",
        f"  - CUDA graphs          {plan.cudagraph_bytes / GiB:10.2f} GiB  (modelled)",
        f"  = KV/state budget      {plan.kv_budget_bytes / GiB:10.2f} GiB",
        f"  attention KV per token per layer  {plan.attn_bytes_per_tok_per_layer} B "
        f"({plan.kv_heads_per_rank} KV head(s) per rank)",
        f"  GDN page: conv {plan.conv_state_bytes} B + ssm {plan.ssm_state_bytes} B = "
        f"{plan.mamba_page_unpadded_bytes} B, padded to {plan.page_bytes} B",
        f"  block_size             {plan.block_size_tok} tokens",
        f"  groups                 group_size {plan.group_size}: {plan.num_attn_groups} attention "
        f"({plan.num_attn_layers} layers incl. MTP) + {plan.num_gdn_groups} GDN "
        f"({plan.num_gdn_layers} layers, {plan.gdn_padding_layers} padding)",
        f"  bytes per block        {plan.bytes_per_block} B = {plan.bytes_per_block / MiB:.2f} MiB",
        f"  num_blocks             {plan.num_blocks} ({plan.usable_blocks} usable; 0 is null)",
        f"  GDN blocks per request {plan.gdn_blocks_per_request} "
        f"({plan.num_gdn_groups} groups x {plan.gdn_slots_per_group} slots) = "
        f"{plan.gdn_blocks_per_request * plan.bytes_per_block / MiB:.1f} MiB",
        f"  scheduler              max_num_seqs {plan.max_num_seqs}, max_num_batched_tokens "
        f"{plan.max_num_batched_tokens}, lookahead {plan.lookahead_tok} tok",
        "  max concurrency at context:",
    ]
    for ctx in CONTEXTS_TOK:
        lines.append(
            f"      {ctx:>6} tok: {plan.max_concurrency(ctx):6d} requests "
            f"({plan.blocks_per_request(ctx)} blocks each)"
        )
    return "\n".join(lines)


CONTEXTS_TOK: tuple[int, ...] = (1024, 2048, 4096, 8192, 32768)


def memory_json(plan) -> dict:  # type: ignore[no-untyped-def,type-arg]
    d = asdict(plan)
    d["max_concurrency_at_context_tok"] = {
        str(ctx): plan.max_concurrency(ctx) for ctx in CONTEXTS_TOK
    }
    return d


@main.command(context_settings=CONTEXT_SETTINGS)
@add_options(engine_options)
@add_options(spec_options)
@click.option("--json", "as_json", is_flag=True, help="print the plan as JSON")
def memory(
    model,
    gpu,
    tp,
    gmu,
    max_num_seqs,
    max_num_batched_tokens,
    max_model_len,  # type: ignore[no-untyped-def]
    ssm_state_dtype,
    spec_tokens,
    tree_widths,
    commit,
    acceptance,
    as_json,
) -> None:
    """Print the KV/state pool vLLM would build: budget, weights, page, block size,
    groups, blocks, GDN slots per request and capacity at a few context lengths."""
    from capsim.core.memory_plan import plan_memory

    def build():  # type: ignore[no-untyped-def]
        spec = _spec_from_options(spec_tokens, tree_widths, commit, acceptance)
        engine = _engine(
            tp, gmu, max_num_seqs, max_num_batched_tokens, max_model_len, ssm_state_dtype
        )
        return plan_memory(get_model(model), get_gpu(gpu), engine, spec)

    plan = _run_or_fail(build)
    if as_json:
        click.echo(json.dumps(memory_json(plan), indent=2))
    else:
        click.echo(memory_report(plan))


@main.command(context_settings=CONTEXT_SETTINGS)
@add_options(engine_options)
@add_options(spec_options)
@click.option(
    "--workload",
    "-w",
    default="sharegpt",
    show_default=True,
    help="workload name (see 'capsim traces list') or a CSV/Parquet/JSONL file",
)
@click.option(
    "--concurrency",
    "-c",
    type=int,
    default=None,
    help="closed loop: max requests in flight (vllm bench --max-concurrency)",
)
@click.option("--rate", type=float, default=None, help="open loop: requests per second")
@click.option("--replay", is_flag=True, help="send at the trace's own timestamps")
@click.option(
    "--burstiness",
    type=float,
    default=1.0,
    show_default=True,
    help="gamma shape of open-loop gaps (1 = Poisson)",
)
@click.option("--num-requests", "-n", type=int, default=1000, show_default=True)
@click.option("--seed", type=int, default=0, show_default=True)
@click.option(
    "--step-time",
    type=click.Choice(["roofline", "calibrated"]),
    default="calibrated",
    show_default=True,
    help="step-time model",
)
@click.option(
    "--out",
    "-o",
    type=click.Path(file_okay=False, path_type=Path),
    default=None,
    help="write requests.parquet, steps.parquet and summary.json here",
)
@click.option("--json", "as_json", is_flag=True, help="print the summary as JSON")
@click.option(
    "--tree-model",
    type=click.Choice(TREE_MODELS),
    default="rank",
    show_default=True,
    help="draft-tree acceptance: rank (calibrated on top-k draft data) | independent (upper bound)",
)
@click.option(
    "--temperature",
    type=float,
    default=0.0,
    show_default=True,
    help="sampling temperature of verification (0 = greedy; > 0 lowers acceptance)",
)
def simulate(
    model,
    gpu,
    tp,
    gmu,
    max_num_seqs,
    max_num_batched_tokens,
    max_model_len,  # type: ignore[no-untyped-def]
    ssm_state_dtype,
    spec_tokens,
    tree_widths,
    commit,
    acceptance,
    workload,
    concurrency,
    rate,
    replay,
    burstiness,
    num_requests,
    seed,
    step_time,
    out,
    as_json,
    tree_model,
    temperature,
) -> None:
    """Simulate one point (model, GPU, gmu, speculation, workload, load) end to end."""
    from capsim.io.results import write_result
    from capsim.simulate import simulate as run_point

    if replay:
        mode = "replay"
    elif rate is not None:
        mode = "rate"
    else:
        mode = "concurrency"
        if concurrency is None:
            raise click.UsageError("give --concurrency C, --rate R or --replay")

    def build_and_run():  # type: ignore[no-untyped-def]
        workload_table = None
        wl_path = Path(workload)
        if wl_path.suffix in (".csv", ".parquet", ".jsonl") or wl_path.is_file():
            from capsim.traces import load_file

            workload_table = load_file(wl_path)
        cfg = SimConfig(
            model=model,
            gpu=gpu,
            engine=_engine(
                tp, gmu, max_num_seqs, max_num_batched_tokens, max_model_len, ssm_state_dtype
            ),
            spec=_spec_from_options(
                spec_tokens, tree_widths, commit, acceptance, tree_model, temperature
            ),
            workload=workload,
            load=LoadConfig(
                mode=mode,
                concurrency=concurrency,
                rate_req_per_s=rate,
                burstiness=burstiness,
                num_requests=num_requests,
            ),
            seed=seed,
            step_time=step_time,
        )
        return run_point(cfg, workload=workload_table)

    t0 = time.perf_counter()
    result = _run_or_fail(build_and_run)
    wall_s = time.perf_counter() - t0
    if out is not None:
        try:
            write_result(out, result)
        except OSError as exc:
            raise click.ClickException(f"--out {out}: cannot write results: {exc}") from None
    if as_json:
        click.echo(json.dumps(result.summary, indent=2, default=float))
        return
    s = result.summary
    click.echo(
        f"{result.config['model']} on {result.config['gpu']} gmu={gmu} "
        f"commit={result.config['spec']['commit']} workload={workload} "
        f"load={s['offered_load']}  ({wall_s:.2f} s wall)"
    )
    rows = [
        ("requests", f"{s['num_requests']}"),
        ("duration", f"{s['duration_s']:.2f} s"),
        ("output throughput", f"{s['output_throughput_tok_per_s']:.1f} tok/s"),
        (
            "warm-up / cool-down",
            f"{s['warmup_s']:.2f} s / {s['cooldown_s']:.2f} s at "
            f"{s['warmup_output_throughput_tok_per_s']:.1f} / "
            f"{s['cooldown_output_throughput_tok_per_s']:.1f} tok/s",
        ),
        (
            "under load (no drain)",
            f"{s['load_output_throughput_tok_per_s']:.1f} tok/s; p99 TTFT after the burst "
            f"{s['steady_ttft_p99_s'] * 1e3:.1f} ms ({s['steady_num_requests']} requests)",
        ),
        ("TTFT mean / p99", f"{s['ttft_mean_s'] * 1e3:.1f} / {s['ttft_p99_s'] * 1e3:.1f} ms"),
        ("TPOT mean / p99", f"{s['tpot_mean_s'] * 1e3:.2f} / {s['tpot_p99_s'] * 1e3:.2f} ms"),
        ("E2EL mean", f"{s['e2el_mean_s']:.2f} s"),
        ("peak KV/state usage", f"{s['peak_kv_usage'] * 100:.1f} %"),
        ("peak running / waiting", f"{s['peak_running']} / {s['peak_waiting']}"),
        ("preemptions", f"{s['num_preemptions']}"),
        ("acceptance length", f"{s['mean_acceptance_len_tok']:.2f} tok/step"),
        (
            "pool",
            f"{s['usable_blocks']} blocks of {s['block_size_tok']} tok, "
            f"{s['gdn_blocks_per_request']} GDN blocks/request, analytical capacity "
            f"{s['analytical_capacity_req']} at {s['mean_context_tok']} tok",
        ),
        ("step-time model", str(result.step_time_model.get("kind"))),
    ]
    for k, v in rows:
        click.echo(f"  {k:<24}{v}")
    if out is not None:
        click.echo(f"wrote {out}/summary.json, requests.parquet, steps.parquet")


def _register_commands() -> None:
    """Attach the commands that live in their own packages (imported lazily by click)."""
    from capsim.calibration.cli import calibrate
    from capsim.live.cli import crosscheck_cmd, live, stepcheck
    from capsim.sweep.cli import knee, report, sweep, whatif
    from capsim.traces.cli import traces

    for cmd in (traces, sweep, knee, report, whatif, calibrate, live, crosscheck_cmd, stepcheck):
        main.add_command(cmd)


_register_commands()


if __name__ == "__main__":
    sys.exit(main())
