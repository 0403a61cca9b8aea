"""Round 6 tables from round6_gdn_<phase>.csv, and their rows in the calibration schema.

    python -m capsim_kernels.bench.gdn.report6 --results kernels/results/h200 [--calibration]
    python -m capsim_kernels.bench.gdn.report6 --results kernels/results/h200 --run rerun

``--run rerun`` reads the second call's round6_rerun_gdn_*.csv (its B = 256 cells timed
what the first call lacked and kcode's variants with the defaults they are compared with;
the first call's rows fill the other B = 256 columns, marked "(1st)").

Prints the side-by-side tables (p50 us, x its floor, worst per-(request, head) error) per
(shape, B) and the target table of issue 19 (verify bandwidth fraction, deferred and
verify+commit floor ratios, speed-up over vLLM's store-all, worst error); with
``--calibration`` writes gdn_verify.csv (checks.COLUMNS, timed rows only) and meta.json
(checks_ok) next to it for ``capsim calibrate --build``.
"""

from __future__ import annotations

import argparse
import csv
import itertools
import json
from pathlib import Path

from ..timing import atomic_write, write_csv
from .checks import COLUMNS as CALIB_COLUMNS

ORDER = ("treewy_prep", "treewy_verify", "treewy_commit", "treewy_verify_commit",
         "fused_chain", "deferred", "replay", "storeall", "vllm_storeall",
         "vllm_decode")  # fmt: skip
# the TreeWY kernels whose committed state the target table's worst error covers
ERR_KERNELS = ("treewy_commit", "treewy_verify_commit", "fused_chain", "deferred", "replay")
SHORT = {"treewy_prep": "stage 1 alone", "treewy_verify": "verify", "treewy_commit": "commit",
         "treewy_verify_commit": "v+c",
         "fused_chain": "fused", "deferred": "deferred", "replay": "replay",
         "storeall": "capsim store-all (tuned)", "vllm_storeall": "vLLM store-all",
         "vllm_decode": "vLLM decode (T=1)"}  # fmt: skip


def variant_names(rows: list[dict]) -> list[str]:
    """kcode's launch variants present in ``rows`` (variants.py: <family>@<variant>)."""
    from .variants import VARIANT_KERNELS

    return [k.name for k in VARIANT_KERNELS
            if "@" in k.name and any(r["kernel"] == k.name for r in rows)]  # fmt: skip


def _short(k: str) -> str:
    fam, _, var = k.partition("@")
    return f"{SHORT.get(fam, fam)} [{var}]" if var else SHORT.get(k, k)


def read(path: Path) -> list[dict]:
    with path.open() as f:
        return list(csv.DictReader(f))


def timed(rows: list[dict]) -> list[dict]:
    return [r for r in rows if r.get("p50_us") not in (None, "")]


def _window_key(r: dict) -> tuple[int, int, str]:
    return (int(r["T"]), r["tree"] != "chain", r["tree"])


def side_by_side(rows: list[dict], shape: str, batch: int) -> str:
    """p50 us (x floor; worst per-(request, head) error) per window and kernel."""
    sel = [r for r in timed(rows) if r["model_shape"] == shape and int(r["B"]) == batch]
    kernels = [k for k in (*ORDER, *variant_names(sel)) if any(r["kernel"] == k for r in sel)]
    windows = sorted({(int(r["T"]), r["tree"]) for r in sel}, key=lambda w: (w[0], w[1] != "chain"))
    head = "| T | tree | " + " | ".join(_short(k) for k in kernels) + " |"
    lines = [head, "|" + "---|" * (2 + len(kernels))]
    for t, tree in windows:
        cells = []
        for k in kernels:
            hit = [r for r in sel if r["kernel"] == k and int(r["T"]) == t and r["tree"] == tree]
            if not hit:
                cells.append("")
                continue
            r = hit[0]
            err = r["err_max_req_head"] if r["err_max_req_head"] != "nan" else r["o_err"]
            mark = " (1st)" if r.get("_first_call") else ""
            cells.append(f"{float(r['p50_us']):.1f}{mark} ({float(r['floor_ratio']):.2f}x; {err})")
        lines.append(f"| {t} | {tree} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def _get(sel: list[dict], kernel: str, t: int, tree: str = "chain") -> dict | None:
    hit = [r for r in sel if r["kernel"] == kernel and int(r["T"]) == t and r["tree"] == tree]
    return hit[0] if hit else None


def variant_table(rows: list[dict], shape: str, batch: int = 256) -> str:
    """kcode's variants next to the default kernel of the same operator, same run: p50,
    floor ratio (verify: the fraction of copy bandwidth), speed-up over vLLM's store-all
    and worst per-(request, head) error."""
    sel = [r for r in timed(rows) if r["model_shape"] == shape and int(r["B"]) == batch]
    lines = ["| T | tree | operator | default us (x floor) | variant | variant us (x floor) "
             "| variant / default | vs vLLM store-all | variant worst err |",
             "|---|---|---|---|---|---|---|---|---|"]  # fmt: skip
    for name in variant_names(sel):
        base = name.partition("@")[0]
        for t, tree in sorted({(int(r["T"]), r["tree"]) for r in sel if r["kernel"] == name}):
            var, dflt = _get(sel, name, t, tree), _get(sel, base, t, tree)
            ref = _get(sel, "vllm_storeall", t, tree) or _get(sel, "storeall", t, tree)
            if var is None:
                continue

            def us(r):
                return f"{float(r['p50_us']):.1f} ({float(r['floor_ratio']):.2f}x)" if r else ""

            rel = f"{float(var['p50_us']) / float(dflt['p50_us']):.2f}" if dflt else ""
            vs = f"{float(ref['p50_us']) / float(var['p50_us']):.2f}x" if ref else ""
            err = var["err_max_req_head"] if var["err_max_req_head"] != "nan" else var["o_err"]
            lines.append(f"| {t} | {tree} | {_short(base)} | {us(dflt)} | {_short(name)} | "
                         f"{us(var)} | {rel} | {vs} | {err} |")  # fmt: skip
    return "\n".join(lines)


def target_table(rows: list[dict], shape: str, batch: int = 256) -> str:
    """Issue 19's targets per chain window at ``batch``: verify streams at >= 85% of copy
    bandwidth; verify+commit and deferred <= 1.25x their floors; the speed-up over vLLM's
    store-all; the worst per-(request, head) committed-state error of the TreeWY kernels."""
    sel = [r for r in timed(rows) if r["model_shape"] == shape and int(r["B"]) == batch]
    lines = [
        "| T | tree | verify BW fraction | v+c x floor | deferred x floor | vLLM store-all us "
        "| v+c vs vLLM | deferred vs vLLM | worst TreeWY err (req, head) |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for t, tree in sorted({(int(r["T"]), r["tree"]) for r in sel}):
        ver, vc, de = (_get(sel, k, t, tree) for k in ("treewy_verify", "treewy_verify_commit",
                                                        "deferred"))  # fmt: skip
        base = _get(sel, "vllm_storeall", t, tree) or _get(sel, "storeall", t, tree)
        errs = [float(r["err_max_req_head"]) for r in sel if int(r["T"]) == t
                and r["tree"] == tree and r["kernel"] in ERR_KERNELS
                and r["err_max_req_head"] != "nan"]  # fmt: skip

        def fmt(r, f):
            return f(r) if r is not None else ""

        def ratio(r, base=base):
            return f"{float(base['p50_us']) / float(r['p50_us']):.2f}x" if base and r else ""

        cells = (
            fmt(ver, lambda r: f"{1 / float(r['floor_ratio']):.0%}"),
            fmt(vc, lambda r: r["floor_ratio"]), fmt(de, lambda r: r["floor_ratio"]),
            fmt(base, lambda r: r["p50_us"]), ratio(vc), ratio(de),
            f"{max(errs):.2g}" if errs else "",
        )  # fmt: skip
        lines.append(f"| {t} | {tree} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def to_calibration(rows: list[dict], meta: dict, out: Path) -> int:
    """gdn_verify.csv (timed rows, calibration schema) and meta.json with checks_ok."""
    keep = [{c: r.get(c, "") for c in CALIB_COLUMNS} for r in timed(rows)]
    write_csv(out / "gdn_verify.csv", keep, CALIB_COLUMNS)
    payload = {k: meta.get(k) for k in ("command", "commit", "date_utc", "gpu", "torch", "triton",
                                        "timing", "checks", "copy_gbps", "checks_ok",
                                        "failed_checks", "contract_misses", "notes")}  # fmt: skip
    payload["source"] = "round6_gdn.csv (kernels/bench/gdn/round6.py), timed rows only"
    atomic_write(out / "meta.json", json.dumps(payload, indent=1))
    return len(keep)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--results", type=Path, required=True)
    ap.add_argument("--calibration", action="store_true")
    ap.add_argument("--run", choices=("first", "rerun"), default="first")
    args = ap.parse_args(argv)
    if args.run == "rerun":
        return report_rerun(args.results)
    rows = [r for p in sorted(args.results.glob("round6_gdn_*.csv")) for r in read(p)]
    meta = json.loads((args.results / "round6_meta.json").read_text())
    shapes = sorted({r["model_shape"] for r in rows if r["phase"] == "gdn_main"})
    extra = [r for r in rows if r["phase"] not in ("gdn_main",)]
    rows = [r for r in rows if r["phase"] == "gdn_main"]
    for shape in shapes:
        for b in sorted({int(r["B"]) for r in rows if r["model_shape"] == shape}):
            print(f"\n### {shape}, B = {b}\n")
            print(side_by_side(rows, shape, b))
        top = max(int(r["B"]) for r in rows if r["model_shape"] == shape)
        print(f"\n### Targets, {shape}, B = {top}\n")
        print(target_table(rows, shape, top))
    gates = [r for r in extra if r["phase"] == "gdn_main_gates09"]
    if gates:
        print("\n### Slow gates (a in [0.9, 1)), worst per-(request, head) error\n")
        for r in gates:
            print(f"- {r['kernel']} {r['model_shape']} T={r['T']} B={r['B']}: "
                  f"{r['err_max_req_head']} (p50 {r.get('p50_us') or '-'} us)")  # fmt: skip
    if args.calibration:
        n = to_calibration(rows + [r for r in extra if r["phase"] == "gdn_tp"], meta,
                           args.results)  # fmt: skip
        print(f"\n{n} timed rows -> {args.results / 'gdn_verify.csv'}")
    return 0


def merged_rerun(results: Path) -> list[dict]:
    """The rerun's gdn_main rows, plus the first call's B = 256 rows of kernels the rerun
    did not time there (marked ``_first_call``)."""
    new = [r for p in sorted(results.glob("round6_rerun_gdn_*.csv")) for r in read(p)]
    new = [r for r in new if r["phase"] in ("gdn_main", "gdn_kc")]
    # gdn_kc's defaults and gdn_main's rows of one (kernel, cell) are the same measurement
    # method in the same run: the first one timed is kept
    seen: set = set()
    dedup = []
    for r in new:
        key = (r["kernel"], r["model_shape"], r["T"], r["tree"], r["B"])
        if key not in seen or not r.get("p50_us"):
            seen.add(key)
            dedup.append(r)
    new = dedup
    have = {(r["kernel"], r["model_shape"], r["T"], r["tree"], r["B"]) for r in timed(new)}
    old = [r for p in sorted(results.glob("round6_gdn_main.csv")) for r in read(p)]
    fill = [
        {**r, "_first_call": True}
        for r in timed(old)
        if r["phase"] == "gdn_main"
        and (r["kernel"], r["model_shape"], r["T"], r["tree"], r["B"]) not in have
    ]
    return new + fill


# the rerun's held-out checks of the step model's two interpolation rules, declared before
# the call (2026-12-01 23:19 UTC): along B, lines through B = 1, 64, 256 predict the
# gdn_cal batches 8, 32, 128; along T, lines through T = 1, 2, 4, 9 (the TP phase's first
# windows) predict T = 3, 5, 6, 7, 8 at every measured B. Main shapes, chains, fp32.
FIT_B, HELD_B = (1, 64, 256), (8, 32, 128)
FIT_T, HELD_T = (1, 2, 4, 9), (3, 5, 6, 7, 8)


def _lin(xs: list[float], ys: list[float], x: float) -> float | None:
    pts = sorted(zip(xs, ys, strict=True))
    for (x0, y0), (x1, y1) in itertools.pairwise(pts):
        if x0 <= x <= x1:
            return y0 + (y1 - y0) * (x - x0) / (x1 - x0)
    return None


def interp_check(rows: list[dict]) -> list[dict]:
    """(kernel, shape, axis, point, measured us, predicted us, error) of the declared
    held-out points (FIT_B / HELD_B, FIT_T / HELD_T)."""
    out = []
    t_rows = [
        r for r in timed(rows) if r["tree"] == "chain" and float(r.get("gate_floor") or 0.3) == 0.3
    ]
    by: dict[tuple, dict] = {}
    for r in t_rows:
        by.setdefault((r["kernel"], r["model_shape"], int(r["T"]), int(r["B"])), r)
    for (kern, shape, t, b), r in sorted(by.items()):
        if b in HELD_B:
            fit = [(bb, float(by[kern, shape, t, bb]["p50_us"])) for bb in FIT_B
                   if (kern, shape, t, bb) in by]  # fmt: skip
            axis, x = "B", b
        elif t in HELD_T:
            fit = [(tt, float(by[kern, shape, tt, b]["p50_us"])) for tt in FIT_T
                   if (kern, shape, tt, b) in by]  # fmt: skip
            axis, x = "T", t
        else:
            continue
        pred = _lin([f[0] for f in fit], [f[1] for f in fit], x) if len(fit) > 1 else None
        if pred is None:
            continue
        meas = float(r["p50_us"])
        out.append({"kernel": kern, "model_shape": shape, "axis": axis, "T": t, "B": b,
                    "measured_us": meas, "predicted_us": round(pred, 2),
                    "error": round(pred / meas - 1, 4)})  # fmt: skip
    return out


def error_table(checks: list[dict], key: str, groups) -> str:  # type: ignore[no-untyped-def]
    """Median (upper middle) and max |error| per (``key`` value in ``groups`` order, kernel)."""
    lines = [f"| {key} | kernel | n | median abs err | max abs err |", "|---|---|---|---|---|"]
    for group in groups:
        for kern in sorted({c["kernel"] for c in checks if c[key] == group}):
            e = sorted(abs(c["error"]) for c in checks if c[key] == group
                       and c["kernel"] == kern)  # fmt: skip
            lines.append(f"| {group} | {_short(kern)} | {len(e)} | {e[len(e) // 2]:.1%} | "
                         f"{e[-1]:.1%} |")  # fmt: skip
    return "\n".join(lines)


def interp_summary(checks: list[dict]) -> str:
    """Median and max |error| per (axis, kernel)."""
    return error_table(checks, "axis", ("B", "T"))


def report_rerun(results: Path) -> int:
    rows = merged_rerun(results)
    meta = json.loads((results / "round6_rerun_meta.json").read_text())
    print(f"copy bandwidth {meta.get('copy_gbps')} GB/s; checks_ok {meta.get('checks_ok')}")
    for shape in sorted({r["model_shape"] for r in rows}):
        for b in sorted({int(r["B"]) for r in rows if r["model_shape"] == shape}, reverse=True):
            print(f"\n### {shape}, B = {b}\n")
            print(side_by_side(rows, shape, b))
        print(f"\n### Targets, {shape}, B = 256\n")
        print(target_table(rows, shape, 256))
        var = set(variant_names(rows))
        for b in sorted({int(r["B"]) for r in rows if r["kernel"] in var
                         and r["model_shape"] == shape}, reverse=True):  # fmt: skip
            print(f"\n### kcode's variants, {shape}, B = {b}\n")
            print(variant_table(rows, shape, b))
    every = [r for p in sorted(results.glob("round6_rerun_gdn_*.csv")) for r in read(p)]
    for phase, what in (("gdn_cal", "calibration batches"), ("gdn_tp", "TP head counts")):
        sel = [r for r in every if r["phase"] == phase]
        for shape in sorted({r["model_shape"] for r in sel}):
            for b in sorted({int(r["B"]) for r in sel if r["model_shape"] == shape}):
                sd = next(r["state_dtype"] for r in sel if r["model_shape"] == shape)
                print(f"\n### {what}: {shape} ({sd} state), B = {b}\n")
                print(side_by_side(sel, shape, b))
    checks = interp_check([r for r in every if r["phase"] in ("gdn_main", "gdn_cal")])
    if checks:
        print("\n### Held-out interpolation checks (declared before the call)\n")
        print(interp_summary(checks))
    gates = [r for r in every if r["phase"] == "gdn_main_gates09"]
    if gates:
        print("\n### Slow gates (a in [0.9, 1)), worst per-(request, head) error\n")
        for r in gates:
            print(f"- {r['kernel']} {r['model_shape']} T={r['T']} B={r['B']}: "
                  f"{r['err_max_req_head']} (p50 {r.get('p50_us') or '-'} us)")  # fmt: skip
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
