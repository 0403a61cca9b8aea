"""The option registry: a new engine flag is one entry, its default and help come from the
config dataclass, and ``collect`` builds the config from the parsed parameters."""

from __future__ import annotations

from typing import Any

import click
from click.testing import CliRunner

from capsim.commands import options as cliopts
from capsim.commands.options import OPTIONS, Opt, collect, options
from capsim.config import EngineConfig
from capsim.treeshape import format_tree, parse_tree, parse_trees


def test_a_new_engine_flag_is_one_entry(monkeypatch) -> None:  # type: ignore[no-untyped-def]
    entry = Opt(
        ("--enable-chunked-prefill/--no-enable-chunked-prefill",),
        source=(EngineConfig, "enable_chunked_prefill"),
        target="engine",
    )
    monkeypatch.setitem(cliopts.OPTIONS, "chunked", entry)
    seen: dict[str, Any] = {}

    @click.command()
    @options("gmu", "chunked")
    def cmd(**params: Any) -> None:
        seen["engine"] = EngineConfig(**collect("engine", params))

    res = CliRunner().invoke(cmd, ["--no-enable-chunked-prefill", "--gmu", "0.5"])
    assert res.exit_code == 0, res.output
    assert seen["engine"] == EngineConfig(gmu=0.5, enable_chunked_prefill=False)
    helptext = " ".join(CliRunner().invoke(cmd, ["--help"]).output.split())
    assert "vLLM default on" in helptext  # the dataclass field's help
    # gmu's default is the --vllm-version's rule (capsim.vllm_rules), not a constant
    assert "default: the vLLM version's rule" in helptext


def test_registry_flags_are_unique_per_command() -> None:
    from capsim.commands.main import main

    for name, cmd in main.commands.items():
        flags = [f for p in cmd.params for f in (*p.opts, *p.secondary_opts)]
        assert len(flags) == len(set(flags)), name
    assert {"--num-prompts", "--max-concurrency", "--request-rate", "--dataset-name"} <= {
        f for o in OPTIONS.values() for f in o.decls
    }


def test_one_tree_spelling() -> None:
    assert parse_tree("2x2x1") == parse_tree("2,2,1") == parse_tree([2, 2, 1]) == (2, 2, 1)
    assert parse_tree("chain") is None and format_tree(None) == "chain"
    assert format_tree(parse_tree("3,3")) == "3x3"
    assert parse_trees("chain;2x2x1,3x3") == (None, (2, 2, 1), (3, 3))


def test_gmu_default_follows_the_vllm_version() -> None:
    from capsim.commands.main import engine_config
    from capsim.vllm_rules import rules_for

    for version in ("0.10", "0.26", "0.33"):
        engine = engine_config({"gmu": None, "vllm_version": version})
        assert engine.gmu == rules_for(version).default_gmu
    assert engine_config({"gmu": 0.5, "vllm_version": "0.26"}).gmu == 0.5
