"""Markdown renderings of a gdn_verify.csv grid (run.py --render) and its target summary."""

from __future__ import annotations

from .shapes import (
    KERNELS,
    STATE_DTYPES,
)


def render_markdown(rows: list[dict]) -> str:
    """One table per (model shape, state dtype): p50 µs (and x floor) per kernel."""
    lines = []
    key = lambda r: (r["model_shape"], r["state_dtype"])  # noqa: E731
    groups: dict = {}
    for r in rows:
        groups.setdefault(key(r), []).append(r)
    for (ms, sd), rs in groups.items():
        lines += [f"### {ms}, state {sd}", ""]
        kernels = [k for k in KERNELS if any(r["kernel"] == k for r in rs)]
        lines.append("| T | tree | B | " + " | ".join(kernels) + " |")
        lines.append("|---|---|---|" + "---|" * len(kernels))
        cells: dict = {}
        for r in rs:
            cells[(int(r["T"]), r["tree"], int(r["B"]), r["kernel"])] = r
        for t, tree, b in sorted({(int(r["T"]), r["tree"], int(r["B"])) for r in rs}):
            vals = []
            for k in kernels:
                r = cells.get((t, tree, b, k))
                if r is None:
                    vals.append("")
                else:
                    ratio = float(r["p50_us"]) / float(r["floor_us"])
                    vals.append(f"{float(r['p50_us']):.1f} ({ratio:.2f}x)")
            lines.append(f"| {t} | {tree} | {b} | " + " | ".join(vals) + " |")
        lines.append("")
    return "\n".join(lines)


def summarize_targets(rows: list[dict]) -> str:
    """The issue's targets (35B TP1 shape) from measured rows, as text."""
    ms = "qwen3.5-35b-a3b-tp1"
    idx = {
        (r["kernel"], r["state_dtype"], int(r["T"]), r["tree"], int(r["B"])): r
        for r in rows
        if r["model_shape"] == ms
    }
    out = ["targets (35B TP1 shape; p50 us):"]

    def p50(kernel, sd, t, tree, b):
        r = idx.get((kernel, sd, t, tree, b))
        return None if r is None else (float(r["p50_us"]), float(r["floor_us"]))

    for sd in STATE_DTYPES:
        for t, tree in ((4, "chain"), (15, "chain"), (15, "2,2,2"), (40, "chain"), (40, "3,3,3")):
            for b in (1, 256):
                sa = p50("storeall", sd, t, tree, b)
                tvc = p50("treewy_verify_commit", sd, t, tree, b)
                de = p50("deferred", sd, t, tree, b)
                if sa is None or tvc is None:
                    continue
                line = (
                    f"  {sd:8s} T={t:2d} {tree:6s} B={b:3d}: storeall {sa[0]:8.1f}  "
                    f"verify+commit {tvc[0]:8.1f} ({tvc[0] / tvc[1]:.2f}x floor, "
                    f"{sa[0] / tvc[0]:.2f}x faster)"
                )
                if de is not None:
                    line += (
                        f"  deferred {de[0]:8.1f} ({de[0] / de[1]:.2f}x floor, "
                        f"{sa[0] / de[0]:.2f}x faster)"
                    )
                out.append(line)
    return "\n".join(out)
