"""Round 8 tables from round8_gdn_<phase>.csv (round6.py --plan r8).

    python -m capsim_kernels.bench.gdn.report8 --results kernels/results/h200

Prints: the deferred-commit variants side by side with the incumbents and vLLM's
store-all (gdn_kc, same run; per row p50, floor ratio, worst per-(request, head) error,
speed-up over vLLM), the same points' round-7 timings (reproducibility), the coverage
cells (gdn_cov), and the held-out checks declared before the call (``HELD_OUT8``).
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from .report6 import _short, read, side_by_side, timed
from .report7 import RUN_FILES, held_out, held_out_table

# Declared 2026-12-02 05:45 UTC, before the call (kernels/BENCHMARKS.md "Round 8"): lines
# through the fit coordinates (newest row per point of any run, round 8's own fit rows
# included) predict round 8's other rows of the same (kernel, heads, window or batch).
# (name, axis, fit coordinates, phases, model_shape)
HELD_OUT8 = (
    ("B at the 35B TP8 heads (1, 256 -> 64)", "B", (1, 256), ("gdn_cov",),
     "qwen3.5-35b-a3b-tp8"),
    ("T at the 35B TP8 heads (1, 9 -> 2, 4)", "T", (1, 9), ("gdn_cov",), "qwen3.5-35b-a3b-tp8"),
    ("T of replay at the 35B TP2 heads (2, 9 -> 3..8)", "T", (2, 9), ("gdn_cov",),
     "qwen3.5-35b-a3b-tp2"),
)  # fmt: skip
RUN_FILES8 = (*RUN_FILES, "round8_gdn_*.csv")


def kc_table(rows: list[dict]) -> str:
    """One line per (T, B, kernel) of gdn_kc: p50, x floor, worst error, x vLLM."""
    lines = ["| T | B | kernel | p50 us | x floor | worst err (req, head) | vLLM / this |",
             "|---|---|---|---|---|---|---|"]  # fmt: skip
    kc = [r for r in timed(rows) if r["phase"] == "gdn_kc"]
    cells = sorted({(int(r["T"]), int(r["B"])) for r in kc}, key=lambda x: (x[0] != 4, -x[1], x[0]))
    for t, b in cells:
        sel = [r for r in kc if int(r["T"]) == t and int(r["B"]) == b]
        vllm = next((float(r["p50_us"]) for r in sel if r["kernel"] == "vllm_storeall"), None)
        for r in sorted(sel, key=lambda r: float(r["p50_us"])):
            p50 = float(r["p50_us"])
            x = f"{vllm / p50:.2f}x" if vllm else ""
            lines.append(f"| {t} | {b} | {_short(r['kernel'])} | {p50:.1f} | {r['floor_ratio']} | "
                         f"{r['err_max_req_head']} | {x} |")  # fmt: skip
    return "\n".join(lines)


def repro_table(results: Path, rows: list[dict]) -> str:
    """Round 8's gdn_kc rows next to round 7's at the same point (kernel, shape, T, B)."""
    old = {(r["kernel"], r["model_shape"], r["T"], r["tree"], r["B"]): float(r["p50_us"])
           for p in sorted(results.glob("round7_gdn_*.csv")) for r in timed(read(p))
           if float(r.get("gate_floor") or 0.3) == 0.3}  # fmt: skip
    lines = ["| T | B | kernel | round 8 us | round 7 us | r8 / r7 |", "|---|---|---|---|---|---|"]
    for r in timed(rows):
        key = (r["kernel"], r["model_shape"], r["T"], r["tree"], r["B"])
        if r["phase"] == "gdn_kc" and key in old:
            p50 = float(r["p50_us"])
            lines.append(f"| {r['T']} | {r['B']} | {_short(r['kernel'])} | {p50:.1f} | "
                         f"{old[key]:.1f} | {p50 / old[key]:.3f} |")  # fmt: skip
    return "\n".join(lines)


def load_round(results: Path, tag: str) -> list[dict]:
    """Print a round's meta line (copy bandwidth, checks, phases) and return its GDN rows."""
    meta = json.loads((results / f"{tag}_meta.json").read_text())
    print(f"copy bandwidth {meta.get('copy_gbps')} GB/s; checks_ok {meta.get('checks_ok')}; "
          f"timed {meta.get('num_timed')}; phases {meta.get('phase_s')}")  # fmt: skip
    return [r for p in sorted(results.glob(f"{tag}_gdn_*.csv")) for r in read(p)]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--results", type=Path, required=True)
    args = ap.parse_args(argv)
    rows = load_round(args.results, "round8")
    print("\n### gdn_kc side by side (35B TP1 fp32, same run)\n")
    print(kc_table(rows))
    print("\n### gdn_kc rows vs round 7 at the same points\n")
    print(repro_table(args.results, rows))
    cov = [r for r in rows if r["phase"] == "gdn_cov"]
    for shape in sorted({r["model_shape"] for r in cov}):
        for b in sorted({int(r["B"]) for r in cov if r["model_shape"] == shape}, reverse=True):
            print(f"\n### coverage cells: {shape}, B = {b}\n")
            print(side_by_side(cov, shape, b))
    checks = held_out(args.results, HELD_OUT8, "round8_gdn_*.csv", RUN_FILES8)
    if checks:
        print("\n### Held-out checks (declared before the call)\n")
        print(held_out_table(checks, HELD_OUT8))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
