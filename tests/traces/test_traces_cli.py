from __future__ import annotations

import re

from click.testing import CliRunner

from capsim.commands.traces import traces
from capsim.traces import WORKLOADS


def test_list():
    out = CliRunner().invoke(traces, ["list"]).output
    for name in WORKLOADS:
        assert name in out


def test_stats_closed_and_timed():
    r = CliRunner().invoke(traces, ["stats", "spec-bench", "--num-requests", "480"])
    assert r.exit_code == 0, r.output
    assert "480 requests" in r.output
    assert re.search(r"output tokens\s+mean\s+256\.0\s+median\s+256\.0\s+p99\s+256\.0", r.output)
    assert "closed loop" in r.output
    r = CliRunner().invoke(traces, ["stats", "azure-conv", "--num-requests", "19366"])
    assert r.exit_code == 0, r.output
    # NOTES.md §5: 5.53 req/s, inter-arrival CV 1.09
    assert re.search(r"rate 5\.53\d req/s", r.output)
    assert "gap CV 1.09" in r.output


def test_show_and_user_file(tmp_path):
    r = CliRunner().invoke(traces, ["show", "sharegpt", "--num-requests", "3"])
    assert r.exit_code == 0 and len(r.output.strip().splitlines()) == 5
    path = tmp_path / "mine.csv"
    path.write_text("prompt_tok,output_tok\n5,6\n7,8\n")
    r = CliRunner().invoke(traces, ["stats", str(path)])
    assert r.exit_code == 0 and "2 requests" in r.output
    path.write_text("prompt_tok,output_tok\n5,0\n")
    r = CliRunner().invoke(traces, ["stats", str(path)])
    assert r.exit_code == 2 and "mine.csv:2" in r.output


def test_unknown_name_lists_valid_ones():
    r = CliRunner().invoke(traces, ["stats", "nope"])
    assert r.exit_code == 2
    assert "sharegpt" in r.output and "nope" in r.output


def test_every_command_has_help():
    for name, cmd in traces.commands.items():
        assert cmd.help, name
        assert CliRunner().invoke(traces, [name, "--help"]).exit_code == 0
