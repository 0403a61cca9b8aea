"""Piecewise-linear lookups over measured points, with stated edge rules.

Rules (the only ones the calibrated model uses):

- inside the measured range: linear interpolation between the two neighbouring points;
- below the smallest measured x: the time of the smallest point (``clamp``): op time is
  non-decreasing in work, so this is an upper bound, never a guess below the data;
- above the largest measured x: ``ValueError`` naming the quantity, the value and the
  measured range (``refuse``), unless the curve was built with ``above="proportional"``:
  t(x) = t(x_max) * x / x_max, for ops whose cost per item is constant at the top of the
  grid (memory-bound per-request work); users of such a curve must say so in describe().

Scalar lookups use ``bisect`` on Python lists: the simulator calls them every step, and a
scalar ``np.interp`` costs several times more.
"""

from __future__ import annotations

from bisect import bisect_left
from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np


@dataclass(frozen=True, slots=True)
class Curve:
    """y(x) through measured points (x strictly increasing)."""

    name: str
    xs: tuple[float, ...]
    ys: tuple[float, ...]
    above: str = "refuse"
    _xl: list[float] = field(default_factory=list, repr=False, compare=False)
    _yl: list[float] = field(default_factory=list, repr=False, compare=False)
    _sl: list[float] = field(default_factory=list, repr=False, compare=False)

    def __post_init__(self) -> None:
        if len(self.xs) != len(self.ys) or not self.xs:
            raise ValueError(f"curve {self.name!r}: xs and ys must be non-empty, equal length")
        if any(b <= a for a, b in zip(self.xs, self.xs[1:], strict=False)):
            raise ValueError(f"curve {self.name!r}: xs={self.xs} must be strictly increasing")
        if not all(np.isfinite(self.ys)) or min(self.ys) < 0:
            raise ValueError(f"curve {self.name!r}: ys must be finite and >= 0")
        if self.above not in ("refuse", "proportional"):
            raise ValueError(f"curve {self.name!r}: above={self.above!r} is not a known rule")
        self._xl.extend(float(x) for x in self.xs)
        self._yl.extend(float(y) for y in self.ys)
        xl, yl = self._xl, self._yl
        self._sl.append(0.0)
        self._sl.extend((yl[i] - yl[i - 1]) / (xl[i] - xl[i - 1]) for i in range(1, len(xl)))

    @classmethod
    def from_points(
        cls, name: str, xs: Sequence[float], ys: Sequence[float], above: str = "refuse"
    ) -> Curve:
        order = np.argsort(np.asarray(xs, dtype=float), kind="stable")
        return cls(
            name, tuple(float(xs[i]) for i in order), tuple(float(ys[i]) for i in order), above
        )

    @property
    def x_max(self) -> float:
        return self._xl[-1]

    def __call__(self, x: float) -> float:
        xl, yl = self._xl, self._yl
        if x <= xl[0]:
            return yl[0]
        if x > xl[-1]:
            if self.above == "proportional":
                return yl[-1] * x / xl[-1]
            raise ValueError(
                f"{self.name}: {x:g} is above the measured grid [{xl[0]:g}, {xl[-1]:g}]; "
                "the calibrated model does not extrapolate"
            )
        i = bisect_left(xl, x)
        return yl[i - 1] + self._sl[i] * (x - xl[i - 1])


def curve_sum(name: str, parts: Sequence[tuple[float, Curve]], above: str = "refuse") -> Curve:
    """The weighted sum of curves as one curve, exact on the union of their grids.

    A sum of piecewise-linear functions is piecewise linear with breakpoints at the union
    of theirs; the clamp below the grid carries over point by point. Above the smallest
    ``x_max`` of its parts the result follows ``above`` (refuse by default).
    """
    if not parts:
        raise ValueError(f"curve_sum {name!r}: no parts")
    top = min(c.x_max for _, c in parts)
    xs = sorted({x for _, c in parts for x in c.xs if x <= top})
    ys = [sum(w * c(x) for w, c in parts) for x in xs]
    return Curve(name, tuple(xs), tuple(ys), above)


@dataclass(frozen=True, slots=True)
class Sheet:
    """y(u, x): curves along x at measured u values, linear in u between them.

    Below the smallest u the first curve is used (clamp); above the largest u: refuse, or
    with ``above="proportional"`` scale the top curve by ``u / u_max``.
    """

    name: str
    us: tuple[float, ...]
    curves: tuple[Curve, ...]
    above: str = "refuse"
    _ul: list[float] = field(default_factory=list, repr=False, compare=False)

    def __post_init__(self) -> None:
        if len(self.us) != len(self.curves) or not self.us:
            raise ValueError(f"sheet {self.name!r}: us and curves must be non-empty, equal")
        if any(b <= a for a, b in zip(self.us, self.us[1:], strict=False)):
            raise ValueError(f"sheet {self.name!r}: us={self.us} must be strictly increasing")
        self._ul.extend(float(u) for u in self.us)

    def __call__(self, u: float, x: float) -> float:
        ul = self._ul
        if u <= ul[0]:
            return self.curves[0](x)
        if u > ul[-1]:
            if self.above == "proportional":
                return self.curves[-1](x) * u / ul[-1]
            raise ValueError(
                f"{self.name}: {u:g} is above the measured grid [{ul[0]:g}, {ul[-1]:g}]; "
                "the calibrated model does not extrapolate"
            )
        i = bisect_left(ul, u)
        u0, u1 = ul[i - 1], ul[i]
        y0, y1 = self.curves[i - 1](x), self.curves[i](x)
        return y0 + (y1 - y0) * (u - u0) / (u1 - u0)
