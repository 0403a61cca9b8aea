"""Round 7 tables from round7_gdn_<phase>.csv and round7_step_ops.csv (round6.py --plan r7).

    python -m capsim_kernels.bench.gdn.report7 --results kernels/results/h200 [--step FILE]

Prints: kcode's variants next to the defaults and vLLM's store-all (gdn_kc, same run),
issue 19's target table on those rows, the coverage cells (gdn_cov), the TP head counts
(gdn_tp64, gdn_tpT) and calibration batches (gdn_cal) side by side, the held-out checks
of the step model's interpolation declared before the call (``HELD_OUT``), and the step
operators' FP8 rows next to the bf16 rows of the same class.
"""

from __future__ import annotations

import argparse
import csv
import json
from pathlib import Path

from .report6 import _lin, error_table, read, side_by_side, target_table, timed, variant_table

# Declared 2026-12-02 02:00 UTC, before the call (kernels/BENCHMARKS.md "Round 7"): each
# check predicts the round-7 rows of its phases from lines through the fit coordinates
# (rows of any run, the newest per point), per kernel, chains, gate floor 0.3.
HELD_OUT = (
    # (name, axis, fit coordinates, held-out phases)
    ("B at the main shapes (1, 64, 256 -> 8, 32, 128)", "B", (1, 64, 256), ("gdn_cal",)),
    ("B at the TP head counts (1, 256 -> 64)", "B", (1, 256), ("gdn_tp64", "gdn_cov")),
    ("T at the TP head counts (1, 2, 4, 9 -> 3, 5..8)", "T", (1, 2, 4, 9), ("gdn_tpT",)),
)
RUN_FILES = ("round6_gdn_*.csv", "round6_rerun_gdn_*.csv", "round7_gdn_*.csv")  # old -> new


def _point(r: dict) -> tuple:
    return (r["kernel"], int(r["Hv"]), int(r["Hk"]), int(r["dk"]), int(r["dv"]),
            r["state_dtype"], int(r["T"]), r["tree"], int(r["B"]))  # fmt: skip


def newest_points(results: Path, run_files: tuple[str, ...] = RUN_FILES) -> dict[tuple, dict]:
    """Timed serving-gate rows of every run, the newest per point (``run_files``: old -> new)."""
    out: dict[tuple, dict] = {}
    for pattern in run_files:
        for p in sorted(results.glob(pattern)):
            for r in timed(read(p)):
                if float(r.get("gate_floor") or 0.3) == 0.3:
                    out[_point(r)] = r
    return out


def held_out(results: Path, declared: tuple = HELD_OUT, new_files: str = "round7_gdn_*.csv",
             run_files: tuple[str, ...] = RUN_FILES) -> list[dict]:  # fmt: skip
    """The ``declared`` checks (default: round 7's HELD_OUT) on the rows of ``new_files``:
    one row per predicted point (measured, predicted, error); the lines go through the
    newest row per fit point of ``run_files``."""
    points = newest_points(results, run_files)
    new = [r for p in sorted(results.glob(new_files)) for r in timed(read(p))]
    out = []
    for name, axis, fit, phases, *only in declared:  # only: (model_shape, kernel) if given
        for r in new:
            if r["phase"] not in phases or r["tree"] != "chain":
                continue
            if only and (r["model_shape"] != only[0] or only[1:] and r["kernel"] != only[1]):
                continue
            key = _point(r)
            x = key[8] if axis == "B" else key[6]
            if x in fit:
                continue
            at = (lambda v: (*key[:8], v)) if axis == "B" else (lambda v: (*key[:6], v, *key[7:]))
            pts = [(v, float(points[at(v)]["p50_us"])) for v in fit if at(v) in points]
            pred = _lin([p[0] for p in pts], [p[1] for p in pts], x) if len(pts) > 1 else None
            if pred is None:
                continue
            meas = float(r["p50_us"])
            out.append({"check": name, "kernel": r["kernel"], "model_shape": r["model_shape"],
                        "T": key[6], "B": key[8], "measured_us": meas,
                        "predicted_us": round(pred, 2), "error": round(pred / meas - 1, 4)})  # fmt: skip
    return out


def held_out_table(checks: list[dict], declared: tuple = HELD_OUT) -> str:
    return error_table(checks, "check", [name for name, *_ in declared])


def fp8_table(step_rows: list[dict], committed: list[dict]) -> str:
    """moe_fp8 / gemm_fp8 p50 next to the bf16 row of the same class and M (this run's
    bf16 rows, else the packaged table's)."""
    bf16: dict[tuple, float] = {}
    for r in [*committed, *step_rows]:
        if r["op"] in ("moe", "gemm"):
            cls = (r["key"],) if r["op"] == "moe" else (int(float(r["n"])), int(float(r["k"])))
            bf16[(r["op"], *cls, int(float(r["m_tok"])))] = float(r["p50_us"])
    lines = ["| op | class | M | fp8 p50 us | bf16 p50 us | bf16 / fp8 |", "|---|---|---|---|---|---|"]
    for r in step_rows:
        if r["op"] not in ("moe_fp8", "gemm_fp8"):
            continue
        m = int(float(r["m_tok"]))
        if r["op"] == "moe_fp8":
            cls, ref = r["key"], bf16.get(("moe", r["key"], m))
        else:
            n, k = int(float(r["n"])), int(float(r["k"]))
            cls, ref = f"{n}x{k}", bf16.get(("gemm", n, k, m))
        fp8 = float(r["p50_us"])
        ratio = f"{ref / fp8:.2f}" if ref else ""
        lines.append(f"| {r['op']} | {cls} | {m} | {fp8:.1f} | {ref or '':} | {ratio} |")
    return "\n".join(lines)


def _sections(rows: list[dict], phase: str, what: str) -> None:
    sel = [r for r in rows if r["phase"] == phase]
    for shape in sorted({r["model_shape"] for r in sel}):
        sd = next(r["state_dtype"] for r in sel if r["model_shape"] == shape)
        for b in sorted({int(r["B"]) for r in sel if r["model_shape"] == shape}, reverse=True):
            print(f"\n### {what}: {shape} ({sd} state), B = {b}\n")
            print(side_by_side(sel, shape, b))


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--results", type=Path, required=True)
    ap.add_argument("--step", type=Path, default=None, help="round 7's step-operator CSV")
    args = ap.parse_args(argv)
    meta = json.loads((args.results / "round7_meta.json").read_text())
    print(f"copy bandwidth {meta.get('copy_gbps')} GB/s; checks_ok {meta.get('checks_ok')}; "
          f"phases {meta.get('phase_s')}")  # fmt: skip
    rows = [r for p in sorted(args.results.glob("round7_gdn_*.csv")) for r in read(p)]
    kc = [r for r in rows if r["phase"] == "gdn_kc"]
    for shape in sorted({r["model_shape"] for r in kc}):
        for b in sorted({int(r["B"]) for r in kc if r["model_shape"] == shape}, reverse=True):
            print(f"\n### kcode's variants, {shape}, B = {b} (same run)\n")
            print(variant_table(kc, shape, b))
            print(f"\n### Targets (defaults), {shape}, B = {b}\n")
            print(target_table(kc, shape, b))
    if kc:
        from .variants import best_rows

        print("\n### Fastest variant per cell that passes every check (variants.best_rows)\n")
        print("| shape | T | tree | B | family | best | best us (x floor) | default us | x |")
        print("|---|---|---|---|---|---|---|---|---|")
        for b in best_rows(kc):
            print(f"| {b['model_shape']} | {b['T']} | {b['tree']} | {b['B']} | {b['family']} | "
                  f"{b['best_kernel']} | {b['best_p50_us']} ({b['best_floor_ratio']}x) | "
                  f"{b['default_p50_us']} | {b['speedup_vs_default']} |")  # fmt: skip
    for phase, what in (("gdn_kc", "gdn_kc side by side"), ("gdn_cov", "coverage cells"),
                        ("gdn_tp64", "TP head counts, B = 64"), ("gdn_cal", "calibration batches"),
                        ("gdn_tpT", "TP head counts, T = 3, 5..8")):  # fmt: skip
        _sections(rows, phase, what)
    checks = held_out(args.results)
    if checks:
        print("\n### Held-out interpolation checks (declared before the call)\n")
        print(held_out_table(checks))
    if args.step is not None and args.step.is_file():
        import capsim.calibration as calibration

        with args.step.open(newline="") as fh:
            step = list(csv.DictReader(fh))
        data = Path(calibration.__file__).parent / "data" / "h200_model_step.csv"
        with data.open(newline="") as fh:
            committed = list(csv.DictReader(fh))
        print("\n### FP8 operators next to bf16 (same class, same M)\n")
        print(fp8_table(step, committed))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
