"""The same configuration served on different machines (and one paired run on one machine):
how far the real engine's own numbers move between runs, read after each run's comparison
(PLAN.md 2026-12-03 16:30: a spread, not a fit). Writes repeatability.md next to this file.

    PYTHONPATH=. python3 experiments/engine/repeatability.py
"""

from __future__ import annotations

import json
import os
import re
from pathlib import Path

import numpy as np
import pandas as pd

HERE = Path(__file__).resolve().parent
# (group, what, runs): runs of one server configuration and one bench configuration
GROUPS: tuple[tuple[str, str, tuple[str, ...]], ...] = (
    (
        "k2_sg_c64",
        "k=2, gmu 0.9, ShareGPT-like 512 prompts, 64 clients (four machines)",
        ("g090_k2_sg_c64", "g090_k2_sg_c64_r2", "g090_k2_sg_c64_r3", "g090_k2_sg_c64_r4"),
    ),
    (
        "k2_rand_c16",
        "k=2, gmu 0.9, random 1024/256, 16 clients (two machines)",
        ("g090_k2_rand_c16", "g090_k2_rand_c16_r2"),
    ),
    (
        "k2_sg_r12",
        "k=2, gmu 0.9, ShareGPT-like 400 prompts, Poisson 12/s (two machines)",
        ("g090_k2_sg_r12", "g090_k2_sg_r12_r2"),
    ),
    (
        "k0_pc_sp_c64",
        "k=0, gmu 0.9, prefix caching, 16 shared 2,048-token system prompts, 64 clients (two "
        "machines)",
        ("g090_k0_pc_sp_c64", "g090_k0_pc_sp_c64_r2"),
    ),
    (
        "k3_m16k_sg_c64",
        "k=3, gmu 0.9, max_num_batched_tokens 16384, ShareGPT-like 512 prompts, 64 clients",
        ("g090m16_k3_sg_c64", "g090m16_k3_sg_c64_r2"),
    ),
    (
        "k3_rand_c1",
        "k=3, gmu 0.9, random 1024/256, one client (the _r2 run at max_num_batched_tokens "
        "16384, which a one-request decode does not reach)",
        ("g090_k3_rand_c1", "g090_k3_rand_c1_steps", "g090m16_k3_rand_c1_r2"),
    ),
    (
        "k1_rand_c1",
        "k=1, gmu 0.9, random 1024/256, one client, one server (step log on / paused)",
        ("g090_k1_rand_c1", "g090_k1_rand_c1_nolog"),
    ),
)
METRICS: tuple[tuple[str, str], ...] = (
    ("output_throughput", "out tok/s"),
    ("mean_tpot_ms", "TPOT mean ms"),
    ("mean_ttft_ms", "TTFT mean ms"),
    ("p99_ttft_ms", "TTFT p99 ms"),
)
# issue 21's thresholds on the same metrics (throughput and TPOT 10%, TTFT 20%, p99 TTFT 30%)
THRESHOLD_PCT: dict[str, float] = {
    "output_throughput": 10.0,
    "mean_tpot_ms": 10.0,
    "mean_ttft_ms": 20.0,
    "p99_ttft_ms": 30.0,
}


def run_calls(manifest: dict) -> dict[str, tuple[str, str]]:
    """run name -> (call, boot_id prefix) from the manifest's `ran` lists and device logs."""
    out: dict[str, tuple[str, str]] = {}
    for c in manifest["calls"]:
        log = c.get("device_log")
        boot = "-"
        if log and (HERE / log).exists():
            hit = re.search(r"boot_id ([0-9a-f]{8})", (HERE / log).read_text())
            boot = hit.group(1) if hit else "-"
        elif "boot_id" in c.get("note", ""):
            hit = re.search(r"boot_id ([0-9a-f]{8})", c["note"])
            boot = hit.group(1) if hit else "-"
        for r in c.get("ran", []):
            name = r.split(" ")[0]
            if "(files lost)" not in r:
                out[name] = (str(c["call"]), boot)
    return out


def step_medians_ms(run_dir: Path) -> dict[str, float]:
    """Median sched-to-sched period by dispatch mode (pure decode / mixed <= 512 tokens /
    above: FULL / PIECEWISE / eager on the H200, step_diagnostic.md), NaN without a step log."""
    f = run_dir / "steps.csv"
    if not f.exists():
        return {m: float("nan") for m in ("full", "piecewise", "eager")}
    s = pd.read_csv(f)
    per_ms = s["t_sched_s"].diff().shift(-1) * 1e3
    mode = np.where(
        s["num_prefill_tok"] == 0, "full", np.where(s["num_tok"] <= 512, "piecewise", "eager")
    )
    return {m: float(per_ms[mode == m].median()) for m in ("full", "piecewise", "eager")}


def table(
    runs_root: Path = HERE / "runs", manifest_path: Path = HERE / "manifest.json"
) -> pd.DataFrame:
    calls = run_calls(json.loads(manifest_path.read_text()))
    rows = []
    for group, _, runs in GROUPS:
        for run in runs:
            d = runs_root / run
            summ = json.loads((d / "bench_summary.json").read_text())
            call, boot = calls.get(run, ("-", "-"))
            row = {"group": group, "run": run, "call": call, "boot_id": boot}
            row.update({k: float(summ[k]) for k, _ in METRICS})
            row.update({f"step_{m}_ms": v for m, v in step_medians_ms(d).items()})
            rows.append(row)
    return pd.DataFrame(rows)


def spreads(df: pd.DataFrame) -> pd.DataFrame:
    """Per group and metric: (max / min - 1) in percent, NaN with fewer than two values."""
    cols = [k for k, _ in METRICS] + ["step_full_ms", "step_piecewise_ms", "step_eager_ms"]
    g = df.groupby("group", sort=False)[cols]
    out = 100 * (g.max() / g.min() - 1)
    return out.where(g.count() >= 2).round(1)


def markdown(df: pd.DataFrame) -> str:
    sp = spreads(df)
    lines = [
        "# The real engine against itself: one configuration on several machines",
        "",
        "Generated by `repeatability.py` from the committed runs (no GPU); read after each run's",
        "comparison with capsim was written (PLAN.md 2026-12-03 16:30): a spread, not a fit.",
        "step medians: sched-to-sched period by dispatch mode (pure decode = FULL graph,",
        "mixed <= 512 tokens = PIECEWISE, above = eager; `step_diagnostic.md`), '-' without a step log.",
        "",
        "| group | run | call | boot_id | out tok/s | TPOT mean ms | TTFT mean ms | TTFT p99 ms "
        "| FULL ms | PIECEWISE ms | eager ms |",
        "|" + "---|" * 11,
    ]

    def f(v: float, nd: int = 1) -> str:
        return "-" if not np.isfinite(v) else f"{v:.{nd}f}"

    for r in df.itertuples():
        lines.append(
            f"| {r.group} | {r.run} | {r.call} | {r.boot_id} | {r.output_throughput:.0f} | "
            f"{r.mean_tpot_ms:.2f} | {r.mean_ttft_ms:.0f} | {r.p99_ttft_ms:.0f} | "
            f"{f(r.step_full_ms)} | {f(r.step_piecewise_ms)} | {f(r.step_eager_ms)} |"
        )
    lines += [
        "",
        "Spread, max / min - 1 in % (issue 21's threshold for capsim's error on the same metric):",
        "",
        "| group | what | out tok/s (10%) | TPOT mean (10%) | TTFT mean (20%) | TTFT p99 (30%) "
        "| FULL | PIECEWISE | eager |",
        "|" + "---|" * 9,
    ]
    what = {g: w for g, w, _ in GROUPS}
    for g, r in sp.iterrows():
        lines.append(
            f"| {g} | {what[g]} | {f(r.output_throughput)} | {f(r.mean_tpot_ms)} | "
            f"{f(r.mean_ttft_ms)} | {f(r.p99_ttft_ms)} | {f(r.step_full_ms)} | "
            f"{f(r.step_piecewise_ms)} | {f(r.step_eager_ms)} |"
        )
    return "\n".join(lines) + "\n"


def main() -> None:
    body = markdown(table())
    out = HERE / "repeatability.md"
    tmp = out.with_name(out.name + ".tmp")
    tmp.write_text(body + NOTES)
    os.replace(tmp, out)
    print(body)


NOTES = """
## What it says

- Loaded runs move more between machines than issue 21's thresholds allow capsim: the k=2 ShareGPT-like 64-client run
  gave 2768, 2924 and 2106 tok/s on three machines (39% spread), mean TPOT 22.2 / 20.5 / 28.5 ms. The step log says
  where: the GPU-bound pure-decode (FULL graph) step is the same on every machine (19.5-20.2 ms median), the host-bound
  PIECEWISE and eager steps are not (54-59 ms vs 84 ms, 112-121 vs 169 ms on the third). The third run also lost
  ~1 s to a fused_moe JIT compile on its first batch (its first 63 requests' TTFT ~1.48 s against ~0.5 s on the other
  machines: `jit_warnings.txt`), which sets its TTFT p99.
- The third machine is not uniformly slow: its k=4 run 6 minutes earlier (call 30, `g090_k4_sg_c64`) had PIECEWISE
  62.8 ms and eager 129 ms medians, in line with the other machines. The host-bound step varies run to run, not only
  machine to machine.
- One request (host-bound FULL-graph decode at k >= 1): the k=3 one-request TPOT moved 2.55-3.16 ms (24%) across
  three machines, its FULL step 8.1-9.7 ms; the paired k=1 runs on one server (step log on / paused) agree within
  5.4%.
- So a capsim prediction of a loaded run is only checkable to about the spread of the real engine: one run per
  configuration can pass or miss issue 21's 10% thresholds by the machine it lands on. The out-of-sample table keeps
  each run's verdict as measured; no constant is refitted on these repeats.
- Session 13 (calls 40-42, one machine, boot 5498de22): the fourth k=2 64-client run sits between (2383 tok/s, TPOT
  25.8 ms; FULL 18.6 ms, the fastest FULL step of the four, so the GPU-bound step moves ~9% too). On that one machine
  the host-bound medians moved with the workload: PIECEWISE 65.9 ms (k=2 ShareGPT-like c64), 61.1 (k=2 Poisson 12/s),
  77.1 (k=0 shared prefixes c64); eager 136.4, 126.7, 166.1 ms. The k=0 shared-prefix c64 run gave 1230 tok/s on
  session 12's machine and 1010 on this one (PIECEWISE 55.5 vs 77.1 ms, eager 116.9 vs 166.1 ms), while the k=2
  random c16 and Poisson runs repeated within 1-3% in throughput across two machines. A per-machine host constant
  cannot carry this (`host_fit_study.md`, the pre-registered block).
"""

if __name__ == "__main__":
    main()
