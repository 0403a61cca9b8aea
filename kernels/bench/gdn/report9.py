"""Round 9 tables from round9_gdn_<phase>.csv (round6.py --plan r9).

    python -m capsim_kernels.bench.gdn.report9 --results kernels/results/h200

Prints: the session-5 stream variants side by side with the incumbents and vLLM's
store-all (gdn_kc, same run; report8.kc_table), the issue-19 target table at 35B TP1 fp32
T = 4 B = 256, and the two decision rules declared before the call
(kernels/gdn_verify/NOTES.md section 12, board 2026-12-02 07:57 UTC) evaluated on the
run's rows.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from .report6 import read, timed
from .report8 import kc_table, load_round
from .variants import _passes, family

__all__ = ["DEFERRED_CANDIDATES", "RULES9", "VERIFY_CANDIDATES", "VERIFY_LIMITS", "decide",
           "print_round", "targets"]

DEFERRED_CANDIDATES = ("deferred@pipe_u", "deferred@pipe_w", "deferred@pipe_x")
VERIFY_CANDIDATES = ("treewy_verify@pipe_v", "treewy_verify@pipe_x")
STEP_FAMILIES = ("treewy_verify_commit", "deferred")


def _p50(rows: list[dict], kernel: str, t: int, b: int) -> float | None:
    for r in timed(rows):
        if r["kernel"] == kernel and int(r["T"]) == t and int(r["B"]) == b and r["tree"] == "chain":
            return float(r["p50_us"])
    return None


def _rows_pass(rows: list[dict], kernel: str) -> bool:
    mine = [r for r in rows if r["kernel"] == kernel]
    return bool(mine) and all(r.get("p50_us") and _passes(r, None) for r in mine)


def _ref_p50(rows: list[dict], ref, t: int, b: int) -> float | None:
    """p50 of ``ref`` at (T, B): a kernel name, or a tuple of names (the fastest of them)."""
    got = [x for x in (_p50(rows, k, t, b) for k in ((ref,) if isinstance(ref, str) else ref))
           if x is not None]  # fmt: skip
    return min(got) if got else None


def _ref_label(ref) -> str:
    return ref if isinstance(ref, str) else f"min({', '.join(ref)})"


def _rule(rows: list[dict], cand: str, limits) -> tuple:
    """(holds, reasons): p50(cand, T, B) <= factor x p50(ref, T, B) for every limit
    (T, B, ref, factor), and every row of cand passes its checks."""
    reasons = []
    for t, b, ref, factor in limits:
        got, want = _p50(rows, cand, t, b), _ref_p50(rows, ref, t, b)
        if got is None or want is None:
            reasons.append(f"T={t} B={b}: not measured")
        elif got > factor * want:
            reasons.append(f"T={t} B={b}: {got:.1f} > {factor:g} x {_ref_label(ref)} {want:.1f}")
    if not _rows_pass(rows, cand):
        reasons.append("a row failed its checks or was not timed")
    return not reasons, reasons


# Round 9's rules (NOTES.md section 12): rule -> (candidates, limits (T, B, reference, factor))
_PIPE_R = "treewy_verify@pipe_r"
VERIFY_LIMITS = ((4, 256, _PIPE_R, 0.97), (2, 256, _PIPE_R, 0.97), (9, 256, _PIPE_R, 1.01),
                 (4, 64, _PIPE_R, 1.01))  # fmt: skip
RULES9 = {
    "deferred": (DEFERRED_CANDIDATES, (
        (4, 256, ("deferred", "deferred@pipe_s"), 0.95), (2, 256, "deferred", 1.0),
        (9, 256, "deferred", 1.0), (4, 64, "deferred", 1.02))),
    "verify": (VERIFY_CANDIDATES, VERIFY_LIMITS),
}  # fmt: skip


def decide(rows: list[dict], rules: dict = RULES9) -> dict:
    """The declared rules: {'deferred': (winner or None, lines), 'verify': (...)}; a rule
    holds for a candidate when every limit holds and its rows pass; the fastest at T = 4
    B = 256 of those wins."""
    kc = [r for r in rows if r["phase"] == "gdn_kc"]
    out = {}
    for name, (cands, limits) in rules.items():
        lines, ok = [], []
        for c in cands:
            holds, why = _rule(kc, c, limits)
            lines.append(f"{c}: {'HOLDS' if holds else 'not met'}" + (f" ({'; '.join(why)})"
                                                                      if why else ""))
            if holds:
                ok.append(c)
        best = min(ok, key=lambda c: _p50(kc, c, 4, 256)) if ok else None
        out[name] = (best, lines)
    return out


def targets(rows: list[dict]) -> list[tuple[str, str]]:
    """Issue 19's target table at 35B TP1 fp32 T = 4 B = 256 (fastest passing row per
    family, this run): (quantity, value)."""
    kc = [r for r in timed(rows) if r["phase"] == "gdn_kc" and int(r["T"]) == 4
          and int(r["B"]) == 256 and _passes(r, None)]  # fmt: skip

    def best(fam: str) -> dict | None:
        cand = [r for r in kc if family(r["kernel"]) == fam]
        return min(cand, key=lambda r: float(r["p50_us"])) if cand else None

    out = []
    v, vc, d = best("treewy_verify"), best("treewy_verify_commit"), best("deferred")
    vllm = next((float(r["p50_us"]) for r in kc if r["kernel"] == "vllm_storeall"), None)
    if v:
        out.append(("verify stream, fraction of copy bandwidth (target >= 0.85)",
                    f"{1 / float(v['floor_ratio']):.2f} ({v['kernel']}, {float(v['p50_us']):.1f} us)"))
    for name, r, goal in (("verify+commit", vc, "1.25"), ("deferred", d, "1.25")):
        if r:
            out.append((f"{name}, x its floor (target <= {goal})",
                        f"{float(r['floor_ratio']):.3f} ({r['kernel']}, {float(r['p50_us']):.1f} us)"))
    steps = [r for r in (vc, d) if r]
    if steps and vllm:
        top = min(steps, key=lambda r: float(r["p50_us"]))
        out.append(("fastest full TreeWY step vs vLLM store-all (target >= 2.5x)",
                    f"{vllm / float(top['p50_us']):.2f}x ({top['kernel']}; vLLM {vllm:.1f} us)"))
    errs = [float(r["err_max_req_head"]) for r in timed(rows) if r["phase"] == "gdn_kc"
            and r["state_dtype"] == "float32" and r.get("err_max_req_head") not in ("", "nan")]
    if errs:
        out.append(("worst per-(request, head) fp32 state error, gdn_kc (contract <= 1e-6)",
                    f"{max(errs):.2e}"))
    return out


def print_round(rows: list[dict], label: str, rules: dict) -> None:
    """The side-by-side table, the targets and the decision rules of one round's rows."""
    print("\n### gdn_kc side by side (35B TP1 fp32, same run)\n")
    print(kc_table(rows))
    print(f"\n### Issue 19 targets (T = 4, B = 256)\n\n| quantity | {label} |\n|---|---|")
    for name, value in targets(rows):
        print(f"| {name} | {value} |")
    print("\n### Decision rules (declared before the call)\n")
    for name, (best, lines) in decide(rows, rules).items():
        print(f"- {name}: " + (f"**{best}**" if best else "no change"))
        for line in lines:
            print(f"  - {line}")


def main(argv: list[str] | None = None, tag: str = "round9", rules: dict = RULES9,
         doc: str | None = None) -> int:
    ap = argparse.ArgumentParser(description=(doc or __doc__).splitlines()[0])
    ap.add_argument("--results", type=Path, required=True)
    args = ap.parse_args(argv)
    print_round(load_round(args.results, tag), tag.replace("round", "round "), rules)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
