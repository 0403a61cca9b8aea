"""Markdown tables and the drift plot of round 5 from the measured CSVs.

    python -m capsim_kernels.bench.gdn.report --results kernels/results/h200 \\
        [--plot kernels/results/h200/round5_drift.png]

Reads round5_side_by_side.csv (side_by_side.py) and round5_drift.csv (drift.py); prints
the side-by-side tables (p50 us with each kernel's float64 error), the issue's target
table against vLLM's fastest measured store-all, and the drift table; writes the PNG.
"""

from __future__ import annotations

import argparse
import csv
from pathlib import Path

# columns of the side-by-side table: (kernel, math) -> header
SBS_COLUMNS = (
    (("treewy_verify_commit", "fp32"), "TreeWY v+c (fp32)"),
    (("treewy_verify_commit", "tf32"), "TreeWY v+c (tf32 opt-in)"),
    (("treewy_fused", "fp32"), "fused (fp32)"),
    (("treewy_deferred", "fp32"), "deferred (fp32)"),
    (("treewy_deferred", "tf32"), "deferred (tf32 opt-in)"),
    (("treewy_verify_commit", "tf32@bf16"), "TreeWY v+c"),
    (("treewy_fused", "tf32@bf16"), "fused"),
    (("treewy_deferred", "tf32@bf16"), "deferred"),
    (("capsim_storeall", "fp32"), "capsim store-all (default)"),
    (("capsim_storeall_tuned", "fp32"), "capsim store-all (tuned)"),
    (("vllm_triton_storeall", "fp32"), "vLLM Triton store-all"),
    (("fla_fused_recurrent", "fp32"), "fla fused_recurrent"),
)
VLLM = ("vllm_triton_storeall",)


def read(path: Path) -> list[dict]:
    with Path(path).open() as fh:
        return list(csv.DictReader(fh))


def _key(r: dict) -> tuple[str, str]:
    math = r["math"] if r["state_dtype"] == "float32" else f"{r['math']}@bf16"
    if r["kernel"] in ("capsim_storeall", "capsim_storeall_tuned", *VLLM, "fla_fused_recurrent"):
        math = "fp32"
    return r["kernel"], math


def side_by_side_table(rows: list[dict], state_dtype: str, batch: int) -> str:
    """p50 us (relative error of the committed state vs float64) per kernel and window."""
    rs = [r for r in rows if r["state_dtype"] == state_dtype and int(r["B"]) == batch]
    present = [(k, h) for k, h in SBS_COLUMNS if any(_key(r) == k for r in rs)]
    cells = {(int(r["T"]), r["tree"], _key(r)): r for r in rs}
    lines = ["| T | tree | " + " | ".join(h for _, h in present) + " |",
             "|---|---|" + "---|" * len(present)]  # fmt: skip
    for t, tree in sorted({(int(r["T"]), r["tree"]) for r in rs}):
        vals = []
        for k, _ in present:
            r = cells.get((t, tree, k))
            if r is None:
                vals.append("")
            elif not r.get("p50_us"):
                vals.append(f"not timed (check failed: {float(r['state_err']):.1e})")
            else:
                vals.append(f"{float(r['p50_us']):.1f} ({float(r['state_err']):.1e})")
        lines.append(f"| {t} | {tree} | " + " | ".join(vals) + " |")
    return "\n".join(lines)


def target_table(rows: list[dict]) -> str:
    """Issue 12 item 4: TreeWY (default math) against vLLM's fastest measured store-all,
    at B = 256 and B = 1; trees against capsim's tuned store-all (vLLM has no tree op)."""
    idx = {(r["kernel"], r["math"], r["state_dtype"], int(r["T"]), r["tree"], int(r["B"])): r
           for r in rows if r.get("p50_us")}  # fmt: skip
    out = ["| state | T | tree | B | baseline (p50 us) | TreeWY v+c p50 us (x floor, TB/s) | "
           "ratio | deferred p50 us (x floor, TB/s) | ratio |",
           "|---|---|---|---|---|---|---|---|---|"]  # fmt: skip
    for sd in ("float32", "bfloat16"):
        math = "fp32" if sd == "float32" else "tf32"
        for t, tree in ((4, "chain"), (15, "chain"), (15, "2,2,2"), (40, "chain"), (40, "3,3,3")):
            for b in (256, 1):
                if tree == "chain":
                    base = idx.get(("vllm_triton_storeall", "fp32", sd, t, tree, b))
                    name = "vLLM Triton"
                else:
                    base = idx.get(("capsim_storeall_tuned", "fp32", sd, t, tree, b))
                    name = "capsim tuned"
                vc = idx.get(("treewy_verify_commit", math, sd, t, tree, b))
                de = idx.get(("treewy_deferred", math, sd, t, tree, b))
                if base is None or vc is None:
                    continue
                bp = float(base["p50_us"])

                def cell(r, bp=bp):
                    p = float(r["p50_us"])
                    return (f"{p:.1f} ({p / float(r['floor_us']):.2f}x, "
                            f"{float(r['achieved_tbps']):.2f})"), f"{bp / p:.2f}x"  # fmt: skip

                c1, r1 = cell(vc)
                c2, r2 = cell(de) if de is not None else ("", "")
                out.append(f"| {sd} | {t} | {tree} | {b} | {name} {bp:.1f} | {c1} | {r1} | "
                           f"{c2} | {r2} |")  # fmt: skip
    return "\n".join(out)


DRIFT_STEPS = (1, 10, 100, 1000, 2000)


def drift_table(rows: list[dict]) -> str:
    """Largest relative error of the committed state up to each step."""
    keys = sorted({(r["state_dtype"], r["tree"], r["kernel"], r["math"]) for r in rows},
                  key=lambda k: (k[0] != "float32", k[1] != "chain", k[2]))  # fmt: skip
    val = {(r["state_dtype"], r["tree"], r["kernel"], r["math"], int(r["step"])):
           float(r["max_err_so_far"]) for r in rows}  # fmt: skip
    out = ["| state | tree | kernel (math) | " + " | ".join(f"step {s}" for s in DRIFT_STEPS)
           + " |", "|---|---|---|" + "---|" * len(DRIFT_STEPS)]  # fmt: skip
    for sd, tree, kernel, math in keys:
        cells = [val.get((sd, tree, kernel, math, s)) for s in DRIFT_STEPS]
        out.append(f"| {sd} | {tree} | {kernel} ({math}) | "
                   + " | ".join("" if c is None else f"{c:.2e}" for c in cells) + " |")  # fmt: skip
    return "\n".join(out)


def drift_plot(rows: list[dict], path: Path) -> None:
    """Max relative error so far vs step (log-log), one panel per (state dtype, tree)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    panels = sorted({(r["state_dtype"], r["tree"]) for r in rows},
                    key=lambda k: (k[0] != "float32", k[1] != "chain"))  # fmt: skip
    fig, axes = plt.subplots(1, len(panels), figsize=(4.2 * len(panels), 3.8), squeeze=False)
    labels = sorted({f"{r['kernel']} ({r['math']})" for r in rows})
    color = {lab: f"C{i}" for i, lab in enumerate(labels)}
    for ax, (sd, tree) in zip(axes[0], panels, strict=True):
        series: dict = {}
        for r in rows:
            if (r["state_dtype"], r["tree"]) == (sd, tree):
                label = f"{r['kernel']} ({r['math']})"
                series.setdefault(label, []).append((int(r["step"]), float(r["max_err_so_far"])))
        for label, pts in sorted(series.items()):
            pts.sort()
            ax.loglog([p[0] for p in pts], [p[1] for p in pts], marker="o", ms=3, label=label,
                      color=color[label])  # fmt: skip
        ax.set_title(f"{sd} state, {tree}")
        ax.set_xlabel("speculative steps")
        ax.grid(True, which="both", alpha=0.3)
        ax.legend(fontsize=6)
    axes[0][0].set_ylabel("max relative state error vs float64")
    fig.tight_layout()
    tmp = path.with_name(path.name + ".tmp.png")
    fig.savefig(tmp, dpi=110)
    tmp.replace(path)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--results", type=Path, required=True)
    ap.add_argument("--plot", type=Path, default=None)
    args = ap.parse_args(argv)
    sbs = read(args.results / "round5_side_by_side.csv")
    drift = read(args.results / "round5_drift.csv")
    for sd in ("float32", "bfloat16"):
        for b in (256, 1):
            print(f"\n#### {sd} state, B = {b}\n")
            print(side_by_side_table(sbs, sd, b))
    print("\n#### targets\n")
    print(target_table(sbs))
    print("\n#### drift\n")
    print(drift_table(drift))
    if args.plot is not None:
        drift_plot(drift, args.plot)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
