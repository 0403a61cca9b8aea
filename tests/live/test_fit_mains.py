"""The two fit commands' ``main``: a usage line and exit 2 without exactly one argument,
else the fit's fields as JSON on stdout (the committed step logs) and exit 0."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from capsim.live import engine_fit, engine_period_fit

RUNS = Path(__file__).resolve().parents[2] / "experiments" / "engine" / "runs"
CASES = [
    (engine_fit, engine_fit.fit_engine_overhead, "capsim.live.engine_fit"),
    (engine_period_fit, engine_period_fit.fit_async_period, "capsim.live.engine_period_fit"),
]


@pytest.mark.parametrize(("mod", "fit", "name"), CASES, ids=["engine_fit", "period_fit"])
def test_usage_without_one_argument(mod, fit, name, capsys) -> None:  # type: ignore[no-untyped-def]
    for argv in ([], ["a", "b"]):
        assert mod.main(argv) == 2
        err = capsys.readouterr()
        assert err.out == ""
        assert err.err == f"usage: python3 -m {name} RUNS_DIR\n"


@pytest.mark.parametrize(("mod", "fit", "name"), CASES, ids=["engine_fit", "period_fit"])
def test_prints_the_fit_as_json(mod, fit, name, capsys) -> None:  # type: ignore[no-untyped-def]
    assert mod.main([str(RUNS)]) == 0
    out = capsys.readouterr().out
    want = fit(RUNS)
    got = json.loads(out)
    assert list(got) == list(want.__dataclass_fields__)
    for key, value in got.items():
        ref = getattr(want, key)
        assert value == (list(ref) if isinstance(ref, tuple) else ref), key
    assert out.startswith('{\n "name": ') and out.endswith("}\n")
