"""Property-based fuzz of the real CLI (click's CliRunner, no subprocess).

For every option of ``memory``, ``simulate``, ``whatif``, ``sweep``, ``calibrate``,
``traces stats|show`` and ``live`` (``BASE``) a bad value is
generated from the option's own click type (out of its range, not finite, not a number,
not a choice, an empty list item, a malformed tree shape, a missing file, an empty path).
Each run must exit non-zero with one ``Error:`` line that names the option, and never
raise (no traceback); it must take well under a second (nothing is simulated).

A second property drives ``memory`` and ``simulate`` with *valid* values drawn across each
option's whole range: they must either succeed or end in one clean line, never crash.

Counted cases: ``CASES`` records every generated invocation; the last test prints the
total (``pytest -s``) and asserts it is the number the settings promise.
"""

from __future__ import annotations

import math
import time

import click
import pytest
from click.testing import CliRunner
from factories import one_line_error
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from capsim.commands.main import main
from capsim.commands.options import (
    FiniteFloat,
    ListOf,
    NameOrFile,
    OutDir,
    TreeShape,
    TreeShapes,
    VllmVersion,
)

# command path -> the minimum other arguments it needs to reach option validation
BASE: dict[tuple[str, ...], list[str]] = {
    ("memory",): [],
    ("simulate",): ["-c", "2", "-n", "4"],
    ("whatif",): ["--ttft-p99-ms", "500"],
    ("sweep",): ["--no-progress"],
    ("calibrate",): ["--tpot"],
    ("traces", "stats"): ["sharegpt"],
    ("traces", "show"): ["sharegpt"],
    ("live",): ["--url", "http://127.0.0.1:9", "--out", "/nonexistent/capsim-live", "-c", "1"],
}
BAD_PER_OPTION = 8
CASES: list[tuple[str, ...]] = []

JUNK = st.sampled_from(["", " ", "abc", "nan", "inf", "-inf", "1e400", "0x10", "1,,2", "--", "é"])


def _int_bad(t: click.IntRange) -> st.SearchStrategy[str]:
    outs = [JUNK, st.sampled_from(["1.5", "9" * 30, "2**63"])]
    if t.min is not None:
        outs.append(st.integers(max_value=t.min - 1).map(str))
    if t.max is not None:
        outs.append(st.integers(min_value=t.max + 1).map(str))
    return st.one_of(*outs)


def _float_bad(t: click.FloatRange) -> st.SearchStrategy[str]:
    outs = [st.sampled_from(["", "abc", "nan", "inf", "-inf", "1e400", "1,5"])]
    if t.min is not None:
        below = st.floats(max_value=t.min, allow_nan=False, allow_infinity=False)
        outs.append(below.filter(lambda x: x < t.min or (t.min_open and x == t.min)).map(repr))
    if t.max is not None:
        above = st.floats(min_value=t.max, allow_nan=False, allow_infinity=False)
        outs.append(above.filter(lambda x: x > t.max or (t.max_open and x == t.max)).map(repr))
    return st.one_of(*outs)


def bad_values(param: click.Option) -> st.SearchStrategy[str] | None:
    """Values the option's type must refuse (None: the option takes anything, e.g. a flag)."""
    t = param.type
    if param.is_flag or param.count:
        return None
    if isinstance(t, ListOf):
        item = _bad_for_type(t.item)
        if item is None:
            return None
        return st.one_of(
            st.sampled_from(["", ",", "0.5,,0.6", ",".join(["0.5"] * 100)]),
            item.map(lambda v: f"0.5,{v}" if v.strip() else f"0.5,{v},"),
        )
    return _bad_for_type(t)


def _bad_for_type(t: click.ParamType) -> st.SearchStrategy[str] | None:
    if isinstance(t, FiniteFloat | click.FloatRange):
        return _float_bad(t)
    if isinstance(t, click.IntRange):
        return _int_bad(t)
    if isinstance(t, NameOrFile | click.Choice):
        choices = {str(c).lower() for c in t.choices}
        text = st.text(st.characters(codec="ascii", min_codepoint=33), min_size=1, max_size=12)
        return text.filter(lambda s: s.lower() not in choices and not s.startswith("-"))
    if isinstance(t, TreeShape | TreeShapes):
        return st.sampled_from(["", "0x2", "2x", "x", "abc", "2,,2", "65", "2x-1", "1000x1000"])
    if isinstance(t, VllmVersion):
        return st.sampled_from(["", "abc", "v", "0", "0.x", "latest", "1e3"])
    if isinstance(t, OutDir):
        return st.just("")
    if isinstance(t, click.Path) and t.exists:
        return st.just("/nonexistent/capsim-fuzz.toml")
    return None


def _fuzzable(path: tuple[str, ...]) -> list[tuple[tuple[str, ...], click.Option]]:
    cmd: click.Command = main
    for name in path:
        cmd = cmd.commands[name]  # type: ignore[attr-defined]
    return [
        (path, p)
        for p in cmd.params
        if isinstance(p, click.Option) and p.name != "help" and bad_values(p) is not None
    ]


FUZZED = [pair for path in BASE for pair in _fuzzable(path)]


def _check_one_line_error(res, names: tuple[str, ...] | None) -> None:  # type: ignore[no-untyped-def]
    tail = one_line_error(res)
    if names is not None:
        assert any(n in tail for n in names), (names, tail)


@pytest.mark.parametrize(
    ("path", "param"), FUZZED, ids=[f"{'-'.join(c)}{p.opts[0]}" for c, p in FUZZED]
)
def test_bad_value_gives_one_line_naming_the_option(
    path: tuple[str, ...], param: click.Option
) -> None:
    strategy = bad_values(param)
    assert strategy is not None

    @settings(
        max_examples=BAD_PER_OPTION,
        deadline=None,
        database=None,
        derandomize=True,
        suppress_health_check=list(HealthCheck),
    )
    @given(strategy)
    def run(value: str) -> None:
        args = [*path, *BASE[path], f"{param.opts[0]}={value}"]
        CASES.append(tuple(args))
        t0 = time.perf_counter()
        res = CliRunner().invoke(main, args)
        assert time.perf_counter() - t0 < 5.0, args
        _check_one_line_error(res, tuple(param.opts + param.secondary_opts))

    run()


def test_acceptance_options_are_fuzzed() -> None:
    """simulate's --tree-model and --temperature (issue 13) are in the bad-value fuzz."""
    fuzzed = {p.opts[0] for path, p in FUZZED if path == ("simulate",)}
    assert {"--tree-model", "--temperature"} <= fuzzed


ENGINE_VALID = {
    "--tp": st.sampled_from([1, 2, 4, 8, 3, 64]),
    "--gmu": st.floats(0.01, 1.0),
    "--max-num-seqs": st.integers(1, 4096),
    "--max-num-batched-tokens": st.integers(1, 1 << 20),
    "--max-model-len": st.integers(1, 1 << 19),
    "-k": st.integers(0, 8),
    "--commit": st.sampled_from(["storeall", "reconstruct", "deferred"]),
    "--tree": st.sampled_from(["chain", "2x2x2", "3x1", "1", "4x4x4", "10x10x10"]),
    "-m": st.sampled_from(["qwen3.5-35b-a3b", "qwen3.5-397b-a17b", "qwen3-next-80b-a3b"]),
    "-g": st.sampled_from(["B200", "h200", "H100"]),
    "--vllm-version": st.sampled_from(["0.10", "0.26", "0.33", "v0.33.1"]),
    "--kv-cache-memory": st.integers(1, 1 << 40),
    "--num-gpu-blocks-override": st.integers(2, 1 << 16),
    "--limit-mm-per-prompt": st.integers(0, 8),
    "--enforce-eager": st.sampled_from([""]),
    "--enable-prefix-caching": st.sampled_from([""]),
}


def _valid_args(opts: dict[str, object]) -> list[str]:
    """``--flag value`` pairs; a flag drawn with the value "" is given alone."""
    return [a for k, v in opts.items() for a in ((k, str(v)) if v != "" else (k,))]


@settings(max_examples=60, deadline=None, database=None, derandomize=True)
@given(st.fixed_dictionaries({}, optional=ENGINE_VALID))
def test_memory_valid_values_never_crash(opts: dict[str, object]) -> None:
    args = ["memory", *_valid_args(opts)]
    CASES.append(tuple(args))
    res = CliRunner().invoke(main, args)
    if res.exit_code == 0:
        assert "num_blocks" in res.output
    else:
        _check_one_line_error(res, None)


LOAD_VALID = {
    "--request-rate": st.floats(1e-3, 1e6).map(lambda x: f"{x:.6g}"),
    "--burstiness": st.floats(1e-3, 1e3).map(lambda x: f"{x:.6g}"),
    "-w": st.sampled_from(["sharegpt", "spec-bench", "burstgpt-standin", "azure-code"]),
    "--step-time": st.sampled_from(["roofline", "calibrated"]),
    "--seed": st.integers(0, 2**63 - 1),
    "--tree-model": st.sampled_from(["rank", "independent"]),
    "--temperature": st.floats(0.0, 2.0).map(lambda x: f"{x:.6g}"),
}


@settings(max_examples=25, deadline=None, database=None, derandomize=True)
@given(
    st.fixed_dictionaries({}, optional={**ENGINE_VALID, **LOAD_VALID}),
    st.integers(1, 8),
    st.integers(1, 12),
)
def test_simulate_valid_values_never_crash(opts: dict[str, object], c: int, n: int) -> None:
    args = ["simulate", "-c", str(c), "-n", str(n), "--json", *_valid_args(opts)]
    CASES.append(tuple(args))
    t0 = time.perf_counter()
    res = CliRunner().invoke(main, args)
    assert time.perf_counter() - t0 < 20.0, args
    if res.exit_code == 0:
        import json

        summary = json.loads(res.output)  # strict JSON: NaN would not parse with allow_nan off
        assert summary["num_requests"] == n
        assert all(
            v is None or not isinstance(v, float) or math.isfinite(v) for v in summary.values()
        )
    else:
        _check_one_line_error(res, None)


def test_zz_case_count() -> None:
    """Runs last in this module: the number of generated CLI invocations above."""
    expected_min = len(FUZZED) * 2  # hypothesis may stop early when a strategy is small
    print(f"\nCLI fuzz: {len(CASES)} generated invocations over {len(FUZZED)} options")
    if CASES:
        assert len(CASES) >= expected_min
