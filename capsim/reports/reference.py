"""Reference pages generated from the code, so they cannot drift from it.

``cli_markdown(group)`` walks a click group (``capsim``'s, as the console script names it)
and writes every command's help, usage and options; ``columns_markdown()`` writes the
result schema of ``capsim.sweep.columns``; ``grid_markdown()`` the grid TOML layout. The
MkDocs hook ``scripts/mkdocs_hooks.py`` calls them while the site builds: a page holding a
marker (``<!-- capsim:cli -->``, ``<!-- capsim:columns -->``, ``<!-- capsim:grid -->``)
gets the generated text in its place.
"""

from __future__ import annotations

import html
import importlib
import inspect
import tomllib
from collections.abc import Iterator
from pathlib import Path

import click

MARKERS = ("<!-- capsim:cli -->", "<!-- capsim:columns -->", "<!-- capsim:grid -->")


def entry_point_group(pyproject: Path) -> click.Group:
    """The click group the ``capsim`` console script of ``pyproject`` points at."""
    scripts = tomllib.loads(pyproject.read_text())["project"]["scripts"]
    module, _, attr = scripts["capsim"].partition(":")
    group = getattr(importlib.import_module(module), attr)
    if not isinstance(group, click.Group):
        raise TypeError(f"{scripts['capsim']} is not a click group")
    return group


def walk(cmd: click.Command, ctx: click.Context) -> Iterator[tuple[click.Command, click.Context]]:
    """``cmd`` and every command below it, depth first, sub-commands sorted by name."""
    yield cmd, ctx
    if isinstance(cmd, click.Group):
        for name in sorted(cmd.list_commands(ctx)):
            sub = cmd.get_command(ctx, name)
            if sub is not None and not sub.hidden:
                yield from walk(sub, click.Context(sub, info_name=name, parent=ctx))


def _cell(text: str) -> str:
    return " ".join(text.split()).replace("|", "\\|")


def _code(text: str) -> str:
    """An inline code cell whose '|' (choice lists) cannot split the table's row."""
    return f"<code>{html.escape(' '.join(text.split())).replace('|', '&#124;')}</code>"


def _command_md(cmd: click.Command, ctx: click.Context) -> list[str]:
    path = ctx.command_path
    lines = [f"## `{path}`", ""]
    if cmd.help:
        text = inspect.cleandoc(click.unstyle(cmd.help))
        lines += [ln for ln in text.splitlines() if ln.strip() != "\b"] + [""]
    lines += ["```text", cmd.get_usage(ctx).strip(), "```", ""]
    rows = []
    for param in cmd.get_params(ctx):
        record = param.get_help_record(ctx) if isinstance(param, click.Option) else None
        if isinstance(param, click.Argument):
            need = "required" if param.required else "optional"
            record = (param.human_readable_name, f"argument ({need})")
        if record is not None:
            rows.append(record)
    if rows:
        lines += ["| option | meaning |", "|---|---|"]
        lines += [f"| {_code(opts)} | {_cell(help_)} |" for opts, help_ in rows]
        lines.append("")
    if isinstance(cmd, click.Group):
        subs = sorted(cmd.list_commands(ctx))
        lines += ["Commands: " + ", ".join(f"`{path} {n}`" for n in subs), ""]
    return lines


def cli_markdown(group: click.Group, prog: str = "capsim") -> str:
    """Every command of ``group``: help text, usage line and an options table."""
    root = click.Context(group, info_name=prog, terminal_width=100, max_content_width=100)
    out: list[str] = []
    for cmd, ctx in walk(group, root):
        out += _command_md(cmd, ctx)
    return "\n".join(out).strip() + "\n"


def columns_markdown() -> str:
    """``points.parquet`` and ``matched.parquet``: every column, unit and meaning."""
    from capsim.sweep.columns import (
        MATCHED_COLUMNS,
        MATCHED_KEEP,
        POINT_COLUMNS,
        markdown_table,
    )

    keep = ", ".join(f"`{c}`" for c in MATCHED_KEEP)
    return "\n".join(
        [
            f"## `points.parquet` ({len(POINT_COLUMNS)} columns)",
            "",
            "One row per simulated point.",
            "",
            markdown_table(POINT_COLUMNS),
            f"## `matched.parquet` ({len(MATCHED_COLUMNS)} + {2 * len(MATCHED_KEEP)} columns)",
            "",
            "One row per matched point and TreeWY mode. Besides the columns below, each of "
            f"{keep} appears twice, as `<name>_sa` (store-all) and `<name>_tw` (TreeWY).",
            "",
            markdown_table(MATCHED_COLUMNS),
        ]
    )


TOML_NOTES: dict[tuple[str, str], tuple[str, str]] = {
    ("[sweep]", "commit_modes"): (
        "`['storeall', 'reconstruct']`",
        "GDN commit modes compared at every point: storeall, reconstruct, deferred",
    ),
    ("[[block]]", "name"): ("`'block<i>'`", "block name, e.g. 'main' or 'trees'"),
    ("[[block]]", "deployment"): ("required", "the deployments: [[block.deployment]] tables"),
    ("[[block]]", "workload"): ("required", "the workloads: [[block.workload]] tables"),
    ("[[block]]", "trees"): (
        "`['chain']`",
        "draft shapes: 'chain' (the k-deep chain) or widths per depth, '2x2x1' or [2, 2, 1]",
    ),
    ("[[block]]", "prefix_caching"): (
        "`false`",
        "vLLM --enable-prefix-caching; a list runs every value (True = GDN 'align' mode)",
    ),
}
"""TOML keys whose default or meaning differs from their dataclass field's."""


def grid_markdown() -> str:
    """The grid TOML layout: every table's keys, their kind, default and meaning (the schema
    of ``capsim.sweep.grid_toml`` and the help of the dataclass fields behind it)."""
    import dataclasses

    from capsim.sweep.grid import Block, Deployment, SweepSpec, WorkloadLoads
    from capsim.sweep.grid_toml import KIND_WORDS, SCHEMA

    classes = {
        "[sweep]": SweepSpec,
        "[[block]]": Block,
        "[[block.deployment]]": Deployment,
        "[[block.workload]]": WorkloadLoads,
    }
    rename = {"deployment": "deployments", "workload": "workloads"}
    out: list[str] = []
    for title, schema in SCHEMA.items():
        fields = {f.name: f for f in dataclasses.fields(classes[title])}
        out += [f"## `{title}`", "", "| key | kind | default | meaning |", "|---|---|---|---|"]
        for key, kind in schema.items():
            f = fields.get(rename.get(key, key))
            default, meaning = "required", ""
            if f is not None:
                if f.default is not dataclasses.MISSING:
                    default = f"`{f.default!r}`"
                meaning = str(f.metadata.get("help", ""))
            default, meaning = TOML_NOTES.get((title, key), (default, meaning))
            words = KIND_WORDS.get(kind, kind)
            out.append(f"| `{key}` | {_cell(words)} | {_cell(default)} | {_cell(meaning)} |")
        out.append("")
    return "\n".join(out)


def expand_markers(markdown: str, pyproject: Path) -> str:
    """``markdown`` with each marker replaced by its generated reference."""
    if MARKERS[0] in markdown:
        markdown = markdown.replace(MARKERS[0], cli_markdown(entry_point_group(pyproject)))
    if MARKERS[1] in markdown:
        markdown = markdown.replace(MARKERS[1], columns_markdown())
    if MARKERS[2] in markdown:
        markdown = markdown.replace(MARKERS[2], grid_markdown())
    return markdown
