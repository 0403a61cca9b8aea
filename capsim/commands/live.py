"""Click commands of the live cross-check: ``live``, ``crosscheck``, ``stepcheck``.

The lead adds them to the ``capsim`` group (``main.add_command(live)`` etc.).
"""

from __future__ import annotations

import json
from pathlib import Path

import click

from capsim.commands.options import options
from capsim.traces import WORKLOADS

OPEN_LOOP_MAX_IN_FLIGHT = 1024  # client threads when --request-rate has no --max-concurrency


@click.command("live")
@options("live.url")
@options(
    "dataset",
    "max_concurrency",
    "request_rate",
    "burstiness",
    "num_prompts",
    "seed",
    dataset={
        "type": click.Choice(sorted(WORKLOADS)),
        "help": "capsim workload name (capsim traces list)",
    },
    max_concurrency={
        "help": "closed loop: requests in flight; with --request-rate: cap (default "
        f"{OPEN_LOOP_MAX_IN_FLIGHT}, one client thread each)"
    },
    request_rate={"help": "open loop: Poisson requests per second (vllm bench serve's name)"},
    burstiness={"default": 1.0, "help": "gamma shape of the open-loop gaps (1 = Poisson)"},
    num_prompts={"default": 100},
)
@options("live.served_name")
@options("live.vocab_size")
@options("live.max_model_len")
@options("live.step_log")
@options("live.server_json")
@options("live.out")
def live(
    url: str,
    workload: str,
    concurrency: int | None,
    rate: float | None,
    burstiness: float,
    num_requests: int,
    seed: int,
    served_name: str,
    vocab_size: int,
    max_model_len: int | None,
    step_log: Path | None,
    server_json: Path | None,
    out_dir: Path,
) -> None:
    """Drive a live server like `vllm bench serve`; write the `capsim simulate` schema."""
    from capsim.io.result_files import write_result
    from capsim.live.client import LiveRun, run_live
    from capsim.live.workload import live_table

    if concurrency is None and rate is None:
        raise click.UsageError("--max-concurrency or --request-rate is required")
    table = live_table(workload, num_requests, seed, max_model_len)
    cap = concurrency or min(num_requests, OPEN_LOOP_MAX_IN_FLIGHT)
    run = LiveRun(url=url, concurrency=cap, num_requests=num_requests,
                  served_name=served_name, vocab_size=vocab_size, seed=seed,
                  request_rate_per_s=rate, burstiness=burstiness)  # fmt: skip
    result = run_live(run, table, step_log=step_log)
    out_dir.mkdir(parents=True, exist_ok=True)
    if step_log is not None and step_log.exists():
        (out_dir / "step_log.jsonl").write_text(step_log.read_text())
    if server_json is not None:
        (out_dir / "server.json").write_text(server_json.read_text())
    write_result(out_dir, result)
    s = result.summary
    click.echo(
        f"{out_dir}: {s['num_requests']} requests, {s['output_throughput_tok_per_s']:.1f} tok/s, "
        f"TTFT p99 {s['ttft_p99_s']:.3f} s, peak running {s.get('peak_running')}, "
        f"peak waiting {s.get('peak_waiting')}, preemptions {s['num_preemptions']}"
    )


@click.command("crosscheck")
@click.argument("live_dir", type=click.Path(path_type=Path, exists=True, file_okay=False))
def crosscheck_cmd(live_dir: Path) -> None:
    """Simulate LIVE_DIR's run with step times fitted to its engine log; compare."""
    from capsim.live.crosscheck import crosscheck

    report = crosscheck(live_dir)
    click.echo(f"{'metric':32s} {'observed':>12s} {'predicted':>12s} {'rel_err':>8s}")
    for r in report["rows"]:
        click.echo(
            f"{r['metric']:32s} {r['observed']:12.4g} {r['predicted']:12.4g} {r['rel_err']:8.1%}"
        )
    click.echo(
        f"throughput within 10%: {report['throughput_within_10pct']}; "
        f"p99 TTFT within 20%: {report['ttft_p99_within_20pct']}"
    )


@click.command("stepcheck")
@options("stepcheck.scenario")
@options("stepcheck.trace_dir")
@options("stepcheck.run_vllm")
@options("stepcheck.out")
@options("stepcheck.admit_with_lookahead")
def stepcheck(
    names: tuple[str, ...],
    trace_dir: Path | None,
    run_vllm: bool,
    out_path: Path | None,
    admit_with_lookahead: bool,
) -> None:
    """Step-exact comparison of capsim's scheduler with vLLM's, per scenario."""
    from capsim.live.scenarios import CI_SCENARIOS, get_scenario
    from capsim.live.stepcheck import compare, load_trace
    from capsim.live.venv import ensure_models, live_dir, run_vllm_trace

    trace_dir = trace_dir or live_dir() / "traces"
    names = names or CI_SCENARIOS
    if run_vllm:
        ensure_models()
    summaries, failed = [], False
    for name in names:
        sc = get_scenario(name)
        path = trace_dir / f"{name}.json"
        trace = run_vllm_trace(sc, path) if run_vllm else load_trace(path)
        if "error" in trace and not trace.get("partial_steps"):
            summaries.append({"scenario": name, "vllm_error": trace["error"].splitlines()[0]})
            click.echo(f"{name}: vLLM could not run it: {trace['error'].splitlines()[0]}")
            continue
        s = compare(trace, admit_with_lookahead=admit_with_lookahead).summary()
        summaries.append(s)
        failed |= not s["equal"]
        if s["vllm_error"]:
            click.echo(f"{name}: vLLM failed after {s['steps_vllm']} steps: {s['vllm_error']}")
        click.echo(
            f"{name}: {s['steps_vllm']} vLLM steps, {s['steps_capsim']} capsim steps, "
            f"{s['steps_differing']} differing, preemptions {s['preemptions_vllm']}/"
            f"{s['preemptions_capsim']}, block {s['block_size_vllm']}/{s['block_size_capsim']}"
            + (f", first diff: {s['first_diff']}" if s["first_diff"] else "")
        )
    if out_path is not None:
        out_path.write_text(json.dumps(summaries, indent=1))
    if failed:
        raise click.ClickException("capsim and vLLM differ (see above)")
