"""What every figure shares: colours, labels, facets, axis helpers and the layout check.

A figure is drawn for what a results directory holds, not for the published layout:
points are grouped into *facets* (a deployment with its settings; a workload and its load
mode), each figure image has at most ``MAX_PANELS`` panels, panels that compare share
their axes (limits computed once for all images of a figure), legends sit outside the
axes, and an image is never drawn for a facet without data. Every builder returns
``Drawn`` records naming the points it plotted, so ``build.py`` can check that every
point of the grid is in some figure (``uncovered``).

Pure: DataFrames in, ``matplotlib.figure.Figure`` objects out (never pyplot).
"""

from __future__ import annotations

import math
import textwrap
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

import numpy as np
import pandas as pd
from matplotlib.axes import Axes
from matplotlib.figure import Figure
from matplotlib.ticker import FuncFormatter, LogLocator, NullFormatter

from capsim.commit_modes import MODES

MODE_COLOUR: dict[str, str] = {name: m.colour for name, m in MODES.items()}
MODE_LABEL: dict[str, str] = {name: m.label for name, m in MODES.items()}
CACHING_STYLE: dict[bool, tuple[str, str]] = {False: ("-", "o"), True: (":", "^")}
"""Prefix caching off: solid line, circles; on: dotted line, triangles."""

MAX_PANELS = 6
PANEL_W_IN, PANEL_H_IN = 3.9, 2.9
GIB = 1024**3
LOAD_AXIS = {"concurrency": "offered concurrency (requests)", "rate": "request rate (req/s)"}

DEPLOYMENT: tuple[str, ...] = ("model", "gpu", "tp", "gmu")
VARIANTS: tuple[str, ...] = ("num_spec_tok", "tree_model", "temperature")
"""Settings that split a deployment's points when a grid varies them (each gets a label)."""


@dataclass(frozen=True, slots=True)
class Drawn:
    """One figure image: file stem, heading, the Figure, the points drawn in it, notes."""

    stem: str
    title: str
    fig: Figure
    point_ids: frozenset[str]
    notes: tuple[str, ...] = field(default=())


def mode_colour(mode: str) -> str:
    return MODE_COLOUR.get(str(mode), "#7f7f7f")


def mode_label(mode: str) -> str:
    return MODE_LABEL.get(str(mode), str(mode))


def short_model(model: str) -> str:
    """'qwen3.5-35b-a3b' -> 'Qwen3.5-35B-A3B'."""
    head, _, rest = str(model).partition("-")
    return head.replace("qwen", "Qwen") + ("-" + rest.upper() if rest else "")


def caching_of(df: pd.DataFrame) -> pd.Series:
    if "prefix_caching" not in df.columns:
        return pd.Series(False, index=df.index)
    return df["prefix_caching"].fillna(False).astype(bool)


def facet_cols(points: pd.DataFrame) -> list[str]:
    """Deployment columns plus the variant settings this grid actually varies."""
    cols = [c for c in DEPLOYMENT if c in points.columns]
    return cols + [c for c in VARIANTS if c in points.columns and points[c].nunique() > 1]


def facet_label(key: dict[str, object]) -> str:
    """'Qwen3.5-35B-A3B, B200 TP1, gmu 0.6' (+ 'k=2', 'T=0.5', ... when varied)."""
    gmu = float(key["gmu"])  # type: ignore[arg-type]
    text = f"{short_model(str(key['model']))}, {key['gpu']} TP{key['tp']}, gmu {gmu:g}"
    extra = {
        "num_spec_tok": lambda v: f"k={v}",
        "tree_model": lambda v: f"tree model {v}",
        "temperature": lambda v: f"T={float(v):g}",
    }
    for col, fmt in extra.items():
        if col in key:
            text += ", " + fmt(key[col])
    return text


def groups(df: pd.DataFrame, cols: Sequence[str]) -> list[tuple[dict[str, object], pd.DataFrame]]:
    """(key as dict, rows) per distinct value of ``cols``, in sorted order."""
    if df.empty:
        return []
    cols = list(cols)
    return [
        (dict(zip(cols, key if isinstance(key, tuple) else (key,), strict=True)), g)
        for key, g in df.groupby(cols, sort=True, dropna=False)
    ]


def chunks(items: Sequence, n: int = MAX_PANELS) -> list[Sequence]:
    """Split into runs of at most n, as even as possible (7 -> 4 + 3, not 6 + 1)."""
    if not items:
        return []
    k = math.ceil(len(items) / n)
    size = math.ceil(len(items) / k)
    return [items[i : i + size] for i in range(0, len(items), size)]


def grid_shape(n: int, max_cols: int = 2) -> tuple[int, int]:
    """Rows x columns for n panels: two columns at most, so a figure scaled to a phone's
    width still has readable text."""
    ncol = min(max_cols, n)
    return math.ceil(n / ncol), ncol


def new_figure(nrow: int, ncol: int, extra_h_in: float = 0.9) -> Figure:
    """A constrained-layout figure sized for nrow x ncol panels plus title and legend."""
    width = max(PANEL_W_IN * ncol, 6.0)
    return Figure(figsize=(width, PANEL_H_IN * nrow + extra_h_in), layout="constrained")


def wrap(text: str, width_in: float, fontsize: float) -> str:
    """``text`` broken into lines that fit ``width_in`` inches at ``fontsize`` points."""
    chars = max(30, int(width_in * 72 / (fontsize * 0.55)))
    return "\n".join(ln for part in text.split("\n") for ln in textwrap.wrap(part, chars) or [""])


def suptitle(fig: Figure, text: str, note: str = "", fontsize: float = 11) -> None:
    """A title (and a smaller note line, e.g. the step-time model) wrapped to the figure's
    width, so neither is ever cut at the sides."""
    title = wrap(text, fig.get_figwidth(), fontsize)
    if note:
        title += "\n" + wrap(note, fig.get_figwidth(), fontsize)
    fig.suptitle(title, fontsize=fontsize)


def legend_below(
    fig: Figure, handles: list, labels: list[str], ncol: int | None = None, where: str = "lower"
) -> None:
    """One legend for the figure, outside every axes (below the panels, or above them with
    ``where="upper"`` when the bottom holds notes)."""
    if not handles:
        return
    per_row = ncol or max(1, min(len(labels), int(fig.get_figwidth() // 2.6)))
    fig.legend(handles, labels, loc=f"outside {where} center", ncol=per_row, fontsize=8)


def unique_handles(axes: Iterable[Axes]) -> tuple[list, list[str]]:
    seen: dict[str, object] = {}
    for ax in axes:
        for h, lab in zip(*ax.get_legend_handles_labels(), strict=True):
            if not lab.startswith("_"):
                seen.setdefault(lab, h)
    return list(seen.values()), list(seen.keys())


_PLAIN = FuncFormatter(lambda v, _pos: f"{v:g}")


def log_y(ax: Axes, lo: float, hi: float) -> None:
    """Log y axis over [lo, hi], labelled 1, 2, 5, 10, ... instead of powers of ten."""
    ax.set_yscale("log")
    ax.set_ylim(lo, hi)
    decades = math.log10(hi / lo) if lo > 0 else 10.0
    if decades > 4:
        subs: tuple[float, ...] = (1.0,)
    elif decades >= 1:
        subs = (1.0, 3.0) if decades > 2 else (1.0, 2.0, 5.0)
    else:
        subs = (1.0, 1.2, 1.5, 2.0, 3.0, 5.0, 7.0)
    ax.yaxis.set_major_locator(LogLocator(base=10, subs=subs))
    ax.yaxis.set_major_formatter(_PLAIN)
    ax.yaxis.set_minor_formatter(NullFormatter())


def log_range(values: Iterable[float], pad: float = 1.4) -> tuple[float, float]:
    v = np.asarray(list(values), dtype=float)
    v = v[np.isfinite(v) & (v > 0)]
    if not v.size:
        return 0.1, 10.0
    return float(v.min()) / pad, float(v.max()) * pad


def load_x(ax: Axes, loads: Iterable[float], mode: str) -> None:
    """x axis over the swept loads, a tick per load: log-2 when they span 4x or more."""
    ticks = sorted({float(x) for x in loads})
    if ticks and ticks[0] > 0 and ticks[-1] / ticks[0] >= 4:
        ax.set_xscale("log", base=2)
        ax.set_xlim(ticks[0] / 1.3, ticks[-1] * 1.3)
    elif ticks:
        span = (ticks[-1] - ticks[0]) or max(ticks[-1], 1.0)
        ax.set_xlim(ticks[0] - 0.08 * span, ticks[-1] + 0.08 * span)
    ax.set_xticks(ticks if len(ticks) <= 8 else ticks[:: math.ceil(len(ticks) / 8)])
    ax.xaxis.set_major_formatter(_PLAIN)
    ax.xaxis.set_minor_formatter(NullFormatter())
    ax.tick_params(axis="both", labelsize=8)
    ax.set_xlabel(LOAD_AXIS.get(mode, "load"), fontsize=8)


def step_time_note(points: pd.DataFrame) -> str:
    """'step time: ...' naming every step-time label in the data (projections say so)."""
    if "step_time_label" not in points.columns:
        return ""
    labels = sorted({str(x) for x in points["step_time_label"].dropna()})
    return ("step time: " + "; ".join(labels)) if labels else ""


def ids(df: pd.DataFrame) -> frozenset[str]:
    return frozenset(str(x) for x in df["point_id"]) if "point_id" in df else frozenset()


def uncovered(points: pd.DataFrame, drawn: Iterable[Drawn]) -> pd.DataFrame:
    """The points of ``points`` that no figure drew (empty when every point is shown)."""
    seen: set[str] = set()
    for d in drawn:
        seen |= d.point_ids
    return points[~points["point_id"].astype(str).isin(seen)]


def layout_problems(fig: Figure) -> list[str]:
    """Text cut by the figure's edge, legends over axes, axes without data (empty = fine)."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg

    FigureCanvasAgg(fig).draw()
    renderer = fig.canvas.get_renderer()  # type: ignore[attr-defined]
    problems: list[str] = []
    w_in, h_in = fig.get_figwidth(), fig.get_figheight()
    tight = fig.get_tightbbox(renderer)  # inches: every drawn artist, text included
    if tight.x0 < -0.02 or tight.y0 < -0.02 or tight.x1 > w_in + 0.02 or tight.y1 > h_in + 0.02:
        problems.append(
            f"drawn artists reach outside the figure: {tight.bounds} vs {w_in:.2f} x {h_in:.2f} in"
        )
    visible = [ax for ax in fig.axes if ax.get_visible()]
    for ax in visible:
        if not ax.axison:  # a text-only box (notes)
            continue
        if ax.get_legend() is not None:
            problems.append(f"legend inside axes {ax.get_title()!r}")
        if not (ax.lines or ax.collections or ax.patches):
            problems.append(f"axes without data {ax.get_title()!r}")
    titles = [t for t in (fig._suptitle, fig._supxlabel) if t is not None and t.get_text()]
    for leg in fig.legends:
        lb = leg.get_window_extent(renderer)
        for ax in visible:
            if lb.overlaps(ax.get_tightbbox(renderer)):
                problems.append(f"figure legend overlaps axes {ax.get_title()!r}")
        for t in titles:
            if lb.overlaps(t.get_window_extent(renderer)):
                problems.append(f"figure legend overlaps the title {t.get_text()[:40]!r}")
    return problems
