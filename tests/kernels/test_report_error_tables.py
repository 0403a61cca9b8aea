"""The two markdown error tables of the round reports, pinned on hand-made checks:
``report6.interp_summary`` (per axis, kernel) and ``report7.held_out_table`` (per declared
check, kernel): n, the median (upper middle) and the max of |error|."""

from __future__ import annotations

from capsim_kernels.bench.gdn import report6, report7


def _c(kernel: str, error: float, **kw) -> dict:  # type: ignore[no-untyped-def]
    return {"kernel": kernel, "error": error, **kw}


def test_interp_summary() -> None:
    checks = [
        _c("zz", -0.02, axis="T"), _c("aa", 0.01, axis="B"), _c("aa", -0.03, axis="B"),
        _c("aa", 0.5, axis="B"), _c("zz", 0.004, axis="B"),
    ]  # fmt: skip
    assert report6.interp_summary(checks).splitlines() == [
        "| axis | kernel | n | median abs err | max abs err |",
        "|---|---|---|---|---|",
        f"| B | {report6._short('aa')} | 3 | 3.0% | 50.0% |",
        f"| B | {report6._short('zz')} | 1 | 0.4% | 0.4% |",
        f"| T | {report6._short('zz')} | 1 | 2.0% | 2.0% |",
    ]


def test_held_out_table() -> None:
    declared = (("second", "B", (), ()), ("first", "T", (), ()), ("none", "T", (), ()))
    checks = [
        _c("k2", 0.1, check="first"), _c("k1", -0.2, check="first"), _c("k1", 0.05, check="first"),
        _c("k1", 0.07, check="second"), _c("k1", 0.3, check="other"),
    ]  # fmt: skip
    assert report7.held_out_table(checks, declared).splitlines() == [
        "| check | kernel | n | median abs err | max abs err |",
        "|---|---|---|---|---|",
        f"| second | {report6._short('k1')} | 1 | 7.0% | 7.0% |",
        f"| first | {report6._short('k1')} | 2 | 20.0% | 20.0% |",
        f"| first | {report6._short('k2')} | 1 | 10.0% | 10.0% |",
    ]
