"""Same-machine host calibration study (experiments/engine/PLAN.md 2026-12-04 02:03, rule fixed
before computing; every run here had been seen, so this is not a blind prediction).

Per machine (a device log's boot_id): the FIT run is the first run in call order whose step
log has >= 20 PIECEWISE and >= 20 eager steps; ``capsim engine host-fit`` on it gives that
machine's PIECEWISE / eager host costs. Every other predict run of out_of_sample.md on that
machine is simulated with the machine's fit and with the registered fit
(``measured-h200-vllm0.26``); throughput, mean TPOT, mean and p99 TTFT against issue 21's
thresholds.

    PYTHONPATH=. python3 experiments/engine/host_fit_study.py
writes host_fit_study.csv and host_fit_study.md next to this file (atomic writes).
"""

from __future__ import annotations

import dataclasses
import json
import sys
import tempfile
from pathlib import Path

import pandas as pd

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from repeatability import run_calls  # noqa: E402

from capsim.cost.engine_period import AsyncPeriodFit, get_async_period  # noqa: E402
from capsim.live.engine_oos import ENGINE_OVERHEAD, load_run, simulate_run, within  # noqa: E402
from capsim.live.engine_period_fit import FIT_RUNS, fit_machine_host  # noqa: E402

# Calls whose machines were registered as an out-of-sample test of this rule before they ran
# (PLAN.md 2026-12-04 02:11: calls 40-42, g090_k2_sg_c64_r4 the fit run).
FIRST_PREREGISTERED_CALL = 40

METRICS: tuple[tuple[str, str], ...] = (
    ("throughput_tok_per_s", "out tok/s"),
    ("tpot_mean_ms", "TPOT mean ms"),
    ("ttft_mean_ms", "TTFT mean ms"),
    ("ttft_p99_ms", "TTFT p99 ms"),
)


def machines(manifest: dict, runs_root: Path) -> dict[str, list[str]]:
    """boot_id -> serving runs (with a run folder) in call order; unknown machines dropped."""
    out: dict[str, list[str]] = {}
    for run, (_call, boot) in sorted(run_calls(manifest).items(), key=lambda x: int(x[1][0])):
        if boot != "-" and (runs_root / run / "bench_summary.json").exists():
            out.setdefault(boot, []).append(run)
    # run_calls keeps dict order within a call; sort by the call, then the manifest's order
    order = {r: i for i, r in enumerate(_ran_order(manifest))}
    return {b: sorted(rs, key=lambda r: order.get(r, 1 << 30)) for b, rs in out.items()}


def _ran_order(manifest: dict) -> list[str]:
    return [r.split(" ")[0] for c in manifest["calls"] for r in c.get("ran", [])]


def machine_fit(
    runs_root: Path, boot: str, runs: list[str], base: AsyncPeriodFit
) -> tuple[str | None, AsyncPeriodFit | None]:
    """(fit run, fit) of a machine: its first run with enough PIECEWISE and eager steps."""
    for r in runs:
        if not (runs_root / r / "steps.csv").exists():
            continue
        try:
            return r, fit_machine_host([runs_root / r], base, name=f"host-{boot}")
        except ValueError:
            continue
    return None, None


def write_fit(path: Path, fit: AsyncPeriodFit) -> Path:
    """A host-fit file ``--engine-overhead`` reads, on the registered base."""
    doc = {**dataclasses.asdict(fit), "fit_runs": list(fit.fit_runs), "base": ENGINE_OVERHEAD}
    path.write_text(json.dumps(doc))
    return path


def study(
    runs_root: Path = HERE / "runs", manifest_path: Path = HERE / "manifest.json"
) -> pd.DataFrame:
    manifest = json.loads(manifest_path.read_text())
    calls = run_calls(manifest)
    base = get_async_period(ENGINE_OVERHEAD)
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for boot, runs in machines(manifest, runs_root).items():
            fit_run, fit = machine_fit(runs_root, boot, runs, base)
            if fit is None:
                continue
            path = write_fit(Path(tmp) / f"host-{boot}.json", fit)
            for r in runs:
                if r == fit_run or r in FIT_RUNS:
                    continue
                run = load_run(runs_root / r)
                data = runs_root.parent / "data"
                reg = simulate_run(run, engine_overhead=ENGINE_OVERHEAD, data_root=data)
                own = simulate_run(run, engine_overhead=str(path), data_root=data)
                for m, _ in METRICS:
                    real = run.metrics[m]
                    rows.append(
                        {
                            "boot_id": boot,
                            "fit_run": fit_run,
                            "piecewise_host_ms": round(1e3 * fit.piecewise_host_s, 3),
                            "eager_host_ms": round(1e3 * fit.eager_host_s, 3),
                            "run": r,
                            "preregistered": int(calls[r][0]) >= FIRST_PREREGISTERED_CALL,
                            "metric": m,
                            "real": real,
                            "registered": reg[m],
                            "err_registered_pct": 100 * (reg[m] / real - 1),
                            "pass_registered": bool(within(m, real, reg[m])),
                            "machine_fit": own[m],
                            "err_machine_pct": 100 * (own[m] / real - 1),
                            "pass_machine": bool(within(m, real, own[m])),
                        }
                    )
    return pd.DataFrame(rows)


def _pass_table(df: pd.DataFrame) -> list[str]:
    """Per metric: runs, and how many pass issue 21's threshold with each fit."""
    lines = ["| metric | runs | registered | machine fit |", "|---|---|---|---|"]
    for m, name in METRICS:
        x = df[df["metric"] == m]
        reg, own = int(x["pass_registered"].sum()), int(x["pass_machine"].sum())
        lines.append(f"| {name} | {len(x)} | {reg} | {own} |")
    return lines


def markdown(df: pd.DataFrame) -> str:
    short = dict(METRICS)
    fits = df.drop_duplicates("boot_id")[
        ["boot_id", "fit_run", "piecewise_host_ms", "eager_host_ms"]
    ]
    lines = [
        "# Same-machine host calibration "
        "(a study on seen runs; rule fixed in PLAN.md 2026-12-04 02:03)",
        "",
        "Per machine the first run with >= 20 PIECEWISE and >= 20 eager steps is the fit run "
        "(`capsim engine host-fit`); the machine's other predict runs are simulated with its fit "
        "and with the registered `measured-h200-vllm0.26` (PIECEWISE 70.5 ms, eager 144.2 ms). "
        "Regenerate: `PYTHONPATH=. python3 experiments/engine/host_fit_study.py`.",
        "",
        "| machine (boot_id) | fit run | PIECEWISE ms | eager ms |",
        "|---|---|---|---|",
        *(
            f"| {f.boot_id} | {f.fit_run} | {f.piecewise_host_ms:.1f} | {f.eager_host_ms:.1f} |"
            for f in fits.itertuples()
        ),
        "",
        "Within issue 21's thresholds (registered fit / machine's own fit), over "
        f"{df['run'].nunique()} runs:",
        "",
        *_pass_table(df),
    ]
    pre = df[df["preregistered"]]
    if len(pre):
        lines += [
            "",
            f"Pre-registered out-of-sample test (calls >= {FIRST_PREREGISTERED_CALL}, PLAN.md "
            f"2026-12-04 02:11, fit run and predicted runs named before they ran), over "
            f"{pre['run'].nunique()} runs:",
            "",
            *_pass_table(pre),
        ]
    lines += [
        "",
        "| run | machine | metric | real | registered | err % | machine fit | err % |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for r in df.itertuples():
        lines.append(
            f"| {r.run} | {r.boot_id} | {short[r.metric]} | {r.real:.4g} | {r.registered:.4g} | "
            f"{r.err_registered_pct:+.1f} | {r.machine_fit:.4g} | {r.err_machine_pct:+.1f} |"
        )
    return "\n".join(lines) + "\n"


def _atomic(path: Path, text: str) -> None:
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(text)
    tmp.replace(path)


def main() -> None:
    df = study()
    _atomic(HERE / "host_fit_study.csv", df.to_csv(index=False, float_format="%.6g"))
    _atomic(HERE / "host_fit_study.md", markdown(df))
    print(markdown(df).split("\n\n")[3])


if __name__ == "__main__":
    main()
