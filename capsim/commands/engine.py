"""``capsim engine``: record a real vLLM engine (start-ups, `vllm bench serve` runs) and
compare capsim with it. Library code: capsim/live/engine_runner.py (stdlib only, runs
where vLLM runs), engine_record.py, engine_oos.py; docs/engine.md says how.
"""

from __future__ import annotations

import json
from pathlib import Path

import click

from capsim.commands.options import options


def _ints(text: str, name: str) -> list[int]:
    try:
        vals = [int(x) for x in text.split(",") if x.strip()]
    except ValueError:
        raise click.BadParameter(f"{text!r}: comma-separated integers", param_hint=name) from None
    if not vals or min(vals) < 1:
        raise click.BadParameter(f"{text!r}: integers >= 1", param_hint=name)
    return vals


@click.group("engine")
def engine() -> None:
    """Record a real vLLM server and compare capsim with it (docs/engine.md)."""


@engine.command("jobs")
@options("engine.jobs.gmu")
@options("engine.jobs.num_speculative_tokens")
@options("engine.jobs.max_num_seqs")
@options("engine.jobs.max_concurrency")
@options("engine.jobs.input_len")
@options("engine.jobs.output_len")
@options("engine.jobs.waves")
@options("engine.jobs.dummy_weights")
@options("engine.jobs.out")
def jobs_cmd(
    gpu_memory_utilization: float,
    num_speculative_tokens: int,
    max_num_seqs: int | None,
    concurrency: str,
    input_len: int,
    output_len: int,
    waves: int,
    dummy_weights: bool,
    out: Path,
) -> None:
    """Write a job list: one full start-up, then one bench per concurrency."""
    server = {
        "gpu_memory_utilization": gpu_memory_utilization,
        "num_speculative_tokens": num_speculative_tokens,
        "max_num_seqs": max_num_seqs,
        "extra_args": ["--load-format", "dummy"] if dummy_weights else [],
    }
    tag = f"g{round(gpu_memory_utilization * 100):03d}_k{num_speculative_tokens}"
    jobs = [{"name": f"s_{tag}", "kind": "startup", "mode": "full", "est_s": 900, "server": server}]
    for c in _ints(concurrency, "--max-concurrency"):
        jobs.append(
            {
                "name": f"{tag}_rand_c{c}",
                "kind": "bench",
                "est_s": 600,
                "bench": {
                    "num_prompts": waves * c,
                    "max_concurrency": c,
                    "input_len": input_len,
                    "output_len": output_len,
                    "warmup_prompts": c,
                },
            }
        )
    out.write_text(json.dumps({"jobs": jobs}, indent=1) + "\n")
    click.echo(f"wrote {out} ({len(jobs)} jobs)")


@engine.command("run")
@options("engine.run.jobs")
@options("engine.run.model")
@options("engine.run.out")
@options("engine.run.deadline_s")
@options("engine.run.payload_flags")
def run_cmd(jobs_file: str, model: str, out: str, deadline_s: float, payload_flags: bool) -> None:
    """Run a job list against `vllm serve` on this machine's GPU (vLLM must be installed)."""
    from capsim.live import engine_runner

    argv = [
        "--jobs",
        jobs_file,
        "--model",
        model,
        "--out",
        out,
        "--deadline-s",
        str(deadline_s),
        "--pack",
        str(Path(out) / "engine_results.tar.xz"),
    ]
    if not payload_flags:
        argv.append("--no-payload-flags")
    rc = engine_runner.main(argv)
    if rc:
        raise SystemExit(rc)


@engine.command("record")
@click.argument("results", type=click.Path(exists=True, file_okay=False, path_type=Path))
@options("engine.record.dest")
def record_cmd(results: Path, dest: Path) -> None:
    """Compact a results folder into DEST/runs/, DEST/startups/ and DEST/startups.csv."""
    import pandas as pd

    from capsim.live.engine_record import record

    rows = record(results, dest)
    csv = dest / "startups.csv"
    if rows:
        new = pd.DataFrame(rows)
        if csv.exists():
            old = pd.read_csv(csv)
            new = pd.concat([old[~old["job"].isin(new["job"])], new], ignore_index=True)
        new = new.convert_dtypes()  # counts stay integers where a column has gaps (kv-only rows)
        tmp = csv.with_name(csv.name + ".tmp")
        new.to_csv(tmp, index=False)
        tmp.replace(csv)
    click.echo(f"recorded {results} -> {dest} ({len(rows)} start-up(s))")


@engine.command("host-fit")
@click.argument(
    "runs", nargs=-1, required=True, type=click.Path(exists=True, file_okay=False, path_type=Path)
)
@options("engine.host_fit.out")
@options("engine.host_fit.base")
def host_fit_cmd(runs: tuple[Path, ...], out: Path, base: str) -> None:
    """Your machine's host cost per mixed step, from recorded runs' step logs (runs/NAME
    folders that `capsim engine record` wrote, served with the step log): the mean PIECEWISE
    and eager periods replace those of the registered fit. Use it as --engine-overhead
    OUT.json (docs/engine.md)."""
    import dataclasses

    from capsim.cost.engine_period import get_async_period
    from capsim.live.engine_period_fit import fit_machine_host

    try:
        fit = fit_machine_host(list(runs), get_async_period(base), name=out.stem)
    except ValueError as e:
        raise click.ClickException(str(e)) from None
    doc = {**dataclasses.asdict(fit), "fit_runs": list(fit.fit_runs), "base": base}
    tmp = out.with_name(out.name + ".tmp")
    tmp.write_text(json.dumps(doc, indent=1) + "\n")
    tmp.replace(out)
    reg = get_async_period(base)
    click.echo(
        f"{out}: PIECEWISE {1e3 * fit.piecewise_host_s:.1f} ms, eager "
        f"{1e3 * fit.eager_host_s:.1f} ms per step (base {base}: "
        f"{1e3 * reg.piecewise_host_s:.1f} / {1e3 * reg.eager_host_s:.1f} ms)"
    )
    click.echo(_round_trip_line(runs))


def _round_trip_line(runs: tuple[Path, ...]) -> str:
    """The client round trip of the closed-loop runs among ``runs`` (capsim.live.client_roundtrip)."""
    from capsim.cost.engine_period import CLIENT_ROUND_TRIP_S
    from capsim.live.client_roundtrip import fit_round_trip_s, run_intervals

    ivs = []
    for run in runs:
        try:
            ivs.append(run_intervals(run))
        except (OSError, ValueError, KeyError):
            continue  # open-loop, preempting or without a step log: no replacement to time
    ivs = [iv for iv in ivs if iv.lower_s.size]
    if not ivs:
        return "client round trip: no closed-loop run without preemptions among these"
    r_ms = 1e3 * fit_round_trip_s(ivs)
    return (
        f"client round trip: {r_ms:.1f} ms over {sum(iv.lower_s.size for iv in ivs)} "
        f"replacements (registered {1e3 * CLIENT_ROUND_TRIP_S:.1f} ms): "
        f"--client-round-trip-ms {r_ms:.1f}"
    )


@engine.command("compare")
@options("engine.compare.dest")
@options("engine.compare.engine_overhead")
def compare_cmd(dest: Path, engine_overhead: str) -> None:
    """capsim vs the recorded runs (the out-of-sample table) as Markdown."""
    from capsim.live.engine_oos import table

    if not (dest / "runs").is_dir():
        raise click.ClickException(f"{dest / 'runs'}: no recorded runs (capsim engine record)")
    csv = dest / "startups.csv"  # the start-ups' block counts: the diagnostic column only
    df, delta = table(dest / "runs", csv if csv.exists() else None, engine_overhead=engine_overhead)
    click.echo(f"engine overhead delta = {1e3 * delta:.3f} ms/step")
    click.echo(
        df.to_markdown(index=False, floatfmt=".4g")
        if _has_tabulate()
        else df.to_string(index=False)
    )


def _has_tabulate() -> bool:
    try:
        import tabulate  # noqa: F401
    except ImportError:
        return False
    return True
