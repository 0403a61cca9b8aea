"""``capsim traces list|stats|show``: what workloads exist and what they look like."""

from __future__ import annotations

from pathlib import Path

import click

from capsim.commands.options import options
from capsim.traces.stats import format_stats, workload_stats
from capsim.traces.table import RequestTable
from capsim.traces.userfile import load_file
from capsim.traces.workloads import WORKLOADS, load_workload


def _load(name: str, num_requests: int, seed: int, model: str, root: Path | None) -> RequestTable:
    try:
        if name not in WORKLOADS and "+sys=" not in name and Path(name).is_file():
            return load_file(Path(name))
        return load_workload(name, num_requests=num_requests, seed=seed, model=model, root=root)
    except (ValueError, FileNotFoundError) as exc:
        raise click.BadParameter(str(exc), param_hint="NAME") from exc


def _common(f):  # type: ignore[no-untyped-def]
    return options("model", "seed", "traces.root", model={"help": "selects tokenizer counts"})(f)


@click.group("traces")
def traces() -> None:
    """Workloads: list them, print their statistics, show their rows."""


@traces.command("list")
def list_cmd() -> None:
    """Names and one-line descriptions of the built-in workloads."""
    width = max(len(n) for n in WORKLOADS)
    for name, desc in WORKLOADS.items():
        click.echo(f"{name:<{width}}  {desc}")


@traces.command("stats")
@click.argument("name")
@options("num_prompts", num_prompts={"default": 1000, "help": "requests to sample"})
@options("stats.block_size")
@_common
def stats_cmd(
    name: str, num_requests: int, block_size_tok: int, seed: int, model: str, root: Path | None
) -> None:
    """Counts, mean/median/p99 of input and output tokens, arrival rate and gap CV, and
    the ideal prefix hit rate of workloads that share prefixes.

    NAME is a workload from 'capsim traces list' (optionally with '+sys=N,TOK[,ZIPF_A]'),
    or a path to your own CSV/Parquet/JSONL file.
    """
    table = _load(name, num_requests, seed, model, root)
    click.echo(format_stats(workload_stats(table, block_size_tok)))


@traces.command("show")
@click.argument("name")
@options("num_prompts", num_prompts={"default": 10, "help": "requests to sample and print"})
@_common
def show_cmd(name: str, num_requests: int, seed: int, model: str, root: Path | None) -> None:
    """Print the sampled requests, one per line.

    NAME is a workload from 'capsim traces list', or a path to your own CSV/Parquet/JSONL file.
    """
    table = _load(name, num_requests, seed, model, root)
    click.echo(f"# {table.name}: {table.num_requests} requests")
    click.echo(f"{'row':>6} {'arrival_s':>12} {'prompt_tok':>10} {'output_tok':>10}  source_id")
    for i in range(table.num_requests):
        arr = "-" if table.arrival_s is None else f"{table.arrival_s[i]:.4f}"
        click.echo(
            f"{i:>6} {arr:>12} {int(table.prompt_tok[i]):>10} {int(table.output_tok[i]):>10}  "
            f"{table.source_id[i]}"
        )
