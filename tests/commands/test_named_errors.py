"""Pathological inputs of issue 20, each refused with one line naming the file, field or
flag and the value (never "internal error"), and refused BEFORE any simulation runs."""

from __future__ import annotations

from pathlib import Path

import pytest
from click.testing import CliRunner
from factories import one_line_error as assert_one_line_error

import capsim.simulate as simulate_mod
from capsim.commands.main import main


def one_line_error(args: list[str], *needles: str) -> str:
    tail = assert_one_line_error(CliRunner().invoke(main, [str(a) for a in args]), *needles)
    assert "internal error" not in tail, tail
    return tail


@pytest.fixture
def no_simulation(monkeypatch):  # type: ignore[no-untyped-def]
    """Fail the test if a simulation starts (the check must come first)."""

    def refuse(*a, **k):  # type: ignore[no-untyped-def]
        raise AssertionError("a simulation ran before the input was checked")

    monkeypatch.setattr(simulate_mod, "EngineSim", refuse)


def _sim(*extra: object) -> list[str]:
    return ["simulate", "-c", 2, "-n", 4, *extra]


@pytest.mark.parametrize(
    ("name", "text", "needles"),
    [
        (
            "big.csv",
            "prompt_tok,output_tok,source_id\n10,10," + "x" * 140_000 + "\n",
            ["big.csv", "line 2", "longer than 131072 characters (128 KiB)"],
        ),
        (
            "cr.csv",
            "prompt_tok,output_tok\n10,10\n1\r0,5\n",
            ["cr.csv", "line 3", "bare carriage return"],
        ),
        (
            "huge.csv",
            "prompt_tok,output_tok\n10,10\n99999999999999999999999,5\n",
            ["huge.csv:3", "prompt_tok=99999999999999999999999 is above the int64 maximum"],
        ),
        (
            "huge.jsonl",
            '{"prompt_tok": 10, "output_tok": 99999999999999999999999}\n',
            ["huge.jsonl:1", "output_tok=99999999999999999999999 is above the int64 maximum"],
        ),
        (
            "deep.jsonl",
            '{"prompt_tok": 1, "source_id": ' + "[" * 50_000 + "]" * 50_000 + "}\n",
            ["deep.jsonl:1", "JSON nested too deeply"],
        ),
    ],
    ids=[
        "field-over-128KiB",
        "bare-CR",
        "int-above-int64-csv",
        "int-above-int64-jsonl",
        "json-depth",
    ],
)
def test_bad_trace_file(tmp_path, no_simulation, name, text, needles) -> None:  # type: ignore[no-untyped-def]
    path = tmp_path / name
    path.write_text(text)
    one_line_error(_sim("-w", path), *needles)


def test_deep_toml_grid(tmp_path) -> None:  # type: ignore[no-untyped-def]
    grid = tmp_path / "deep.toml"
    grid.write_text('[sweep]\nname = "x"\nfoo = ' + "[" * 5000 + "]" * 5000 + "\n")
    one_line_error(
        ["sweep", "--grid", grid, "--out", tmp_path / "o"], "deep.toml", "TOML nested too deeply"
    )


def test_deep_model_config(tmp_path, no_simulation) -> None:  # type: ignore[no-untyped-def]
    cfg = tmp_path / "config.json"
    cfg.write_text('{"a": ' + "[" * 50_000 + "]" * 50_000 + "}")
    one_line_error(_sim("-m", cfg), "config.json", "JSON nested too deeply")


def test_pool_below_one_request_is_refused_in_vllms_words(no_simulation) -> None:  # type: ignore[no-untyped-def]
    one_line_error(
        _sim("--num-gpu-blocks-override", 2),
        "num_gpu_blocks_override=2",
        "To serve at least one request with the model's max seq len",
        "KV cache is needed, which is larger than the available KV cache memory",
    )


def test_request_the_pool_can_never_hold(tmp_path, no_simulation) -> None:  # type: ignore[no-untyped-def]
    path = tmp_path / "long.csv"
    path.write_text("prompt_tok,output_tok\n100,10\n60000,100\n")
    one_line_error(
        _sim("-w", path, "--num-gpu-blocks-override", 40),
        "row 1",
        "prompt+output=60100 tokens needs",
        "could never finish",
    )


@pytest.mark.parametrize("values", ["0.9,0.8", "0.9,0.8,0.7,0.6"])
def test_acceptance_list_must_match_the_depth(no_simulation, values) -> None:  # type: ignore[no-untyped-def]
    one_line_error(
        _sim("--acceptance", values), "--acceptance", "per-depth values for a draft depth of 3"
    )


def test_unwritable_out_is_refused_before_simulating(tmp_path, no_simulation) -> None:  # type: ignore[no-untyped-def]
    blocker = tmp_path / "afile"
    blocker.write_text("x")
    one_line_error(_sim("--out", blocker / "sub"), "--out", "is not writable", "before simulating")


def test_run_that_cannot_fit_is_refused_with_the_number(monkeypatch, no_simulation) -> None:  # type: ignore[no-untyped-def]
    import capsim.footprint as fp

    monkeypatch.setattr(fp, "available_memory_bytes", lambda *a, **k: 2**30)
    one_line_error(
        ["simulate", "--request-rate", 60, "-n", 10_000_000, "--exact"],
        "simulate -n 10000000 needs at least",
        "1.00 GiB is available",
    )


def test_one_acceptance_value_still_means_every_depth() -> None:
    res = CliRunner().invoke(
        main, ["simulate", "-c", "2", "-n", "4", "--acceptance", "0.9", "--json"]
    )
    assert res.exit_code == 0, res.output


def test_streaming_run_writes_only_what_it_kept(tmp_path: Path) -> None:
    out = tmp_path / "o"
    res = CliRunner().invoke(
        main, ["simulate", "-c", "2", "-n", "6", "--streaming", "--out", str(out)]
    )
    assert res.exit_code == 0, res.output
    assert sorted(p.name for p in out.iterdir()) == ["summary.json"]
