"""Every click command, and every option of it, says what it does (the CLI reference is
generated from these texts)."""

from __future__ import annotations

from pathlib import Path

import click

from capsim.reports.reference import cli_markdown, entry_point_group, walk

ROOT = Path(__file__).resolve().parents[2]


def _commands():
    group = entry_point_group(ROOT / "pyproject.toml")
    return list(walk(group, click.Context(group, info_name="capsim")))


def test_every_command_and_option_has_help():
    missing = []
    for cmd, ctx in _commands():
        if not (cmd.help or "").strip():
            missing.append(ctx.command_path)
        for p in cmd.params:
            if isinstance(p, click.Option) and not (p.help or "").strip():
                missing.append(f"{ctx.command_path} {p.opts[0]}")
    assert missing == []


def test_reference_lists_every_command_and_option():
    group = entry_point_group(ROOT / "pyproject.toml")
    text = cli_markdown(group)
    commands = _commands()
    assert len(commands) >= 10
    for cmd, ctx in commands:
        assert f"## `{ctx.command_path}`" in text
        for p in cmd.params:
            if isinstance(p, click.Option) and not p.hidden:
                assert p.opts[0] in text, (ctx.command_path, p.opts[0])
