"""Host-cost band study (experiments/engine/PLAN.md 2026-12-04 04:23, rule fixed before computing;
every run here had been seen: a study, not a blind prediction).

For every predict run of out_of_sample.md (async column) on a known machine: the host costs
measured on the OTHER machines (`host_fit_study.machine_fit`, one fit run per machine), a fast
file (least PIECEWISE, least eager) and a slow file (largest of each), both on the registered
FULL-graph terms and kernel excess; the run simulated with each. The real value is inside when
it lies between the two predictions.

    PYTHONPATH=. python3 experiments/engine/host_band_study.py
writes host_band_study.csv and host_band_study.md next to this file (atomic writes).
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

from host_fit_study import METRICS, _atomic, machine_fit, machines, write_fit  # noqa: E402

from capsim.cost.engine_period import AsyncPeriodFit, get_async_period  # noqa: E402
from capsim.live.engine_oos import ENGINE_OVERHEAD, load_run, simulate_run  # noqa: E402


def predict_runs(oos_csv: Path = HERE / "out_of_sample.csv") -> set[str]:
    df = pd.read_csv(oos_csv)
    return set(df[df["role_engine"] == "predict"]["run"])


def _band_files(
    fits: dict[str, AsyncPeriodFit], leave_out: str, base: AsyncPeriodFit, tmp: Path
) -> tuple[Path, Path, list[str]]:
    others = {b: f for b, f in fits.items() if b != leave_out}
    pw = [f.piecewise_host_s for f in others.values()]
    eager = [f.eager_host_s for f in others.values()]
    out = []
    for tag, pick in (("fast", min), ("slow", max)):
        fit = dataclasses.replace(
            base,
            name=f"band-{tag}-without-{leave_out}",
            piecewise_host_s=pick(pw),
            eager_host_s=pick(eager),
            fit_runs=tuple(sorted(f.fit_runs[0] for f in others.values())),
            source=f"{tag} end of the host costs of {len(others)} machines (host_band_study)",
        )
        out.append(write_fit(tmp / f"{fit.name}.json", fit))
    return out[0], out[1], sorted(others)


def study(
    runs_root: Path = HERE / "runs", manifest_path: Path = HERE / "manifest.json"
) -> pd.DataFrame:
    manifest = json.loads(manifest_path.read_text())
    base = get_async_period(ENGINE_OVERHEAD)
    by_boot = machines(manifest, runs_root)
    fits: dict[str, AsyncPeriodFit] = {}
    for boot, runs in by_boot.items():
        _, fit = machine_fit(runs_root, boot, runs, base)
        if fit is not None:
            fits[boot] = fit
    wanted = predict_runs(runs_root.parent / "out_of_sample.csv")
    data = runs_root.parent / "data"
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for boot, runs in by_boot.items():
            fast, slow, _ = _band_files(fits, boot, base, Path(tmp))
            band = json.loads(fast.read_text()), json.loads(slow.read_text())
            for r in (r for r in runs if r in wanted):
                run = load_run(runs_root / r)
                lo = simulate_run(run, engine_overhead=str(fast), data_root=data)
                hi = simulate_run(run, engine_overhead=str(slow), data_root=data)
                for m, _ in METRICS:
                    real, a, b = run.metrics[m], lo[m], hi[m]
                    rows.append(
                        {
                            "run": r,
                            "boot_id": boot,
                            "metric": m,
                            "fast_piecewise_ms": round(1e3 * band[0]["piecewise_host_s"], 3),
                            "slow_piecewise_ms": round(1e3 * band[1]["piecewise_host_s"], 3),
                            "fast_eager_ms": round(1e3 * band[0]["eager_host_s"], 3),
                            "slow_eager_ms": round(1e3 * band[1]["eager_host_s"], 3),
                            "real": real,
                            "fast": a,
                            "slow": b,
                            "inside": bool(min(a, b) <= real <= max(a, b)),
                            "width_pct": 100 * abs(b - a) / real,
                        }
                    )
    return pd.DataFrame(rows)


def markdown(df: pd.DataFrame) -> str:
    short = dict(METRICS)
    lines = [
        "# Host-cost band (a study on seen runs; rule fixed in PLAN.md 2026-12-04 04:23)",
        "",
        "Each predict run simulated at the fast and the slow end of the host costs measured on the "
        "other machines (PIECEWISE / eager from `host_fit_study`'s fit runs; FULL terms registered). "
        "Inside: the real value lies between the two predictions. "
        "Regenerate: `PYTHONPATH=. python3 experiments/engine/host_band_study.py`.",
        "",
        f"Over {df['run'].nunique()} predict runs on {df['boot_id'].nunique()} machines:",
        "",
        "| metric | runs | inside the band | median band width % |",
        "|---|---|---|---|",
    ]
    for m, name in METRICS:
        x = df[df["metric"] == m]
        lines.append(
            f"| {name} | {len(x)} | {int(x['inside'].sum())} | {x['width_pct'].median():.1f} |"
        )
    lines += [
        "",
        "| run | machine | metric | real | fast | slow | inside |",
        "|---|---|---|---|---|---|---|",
    ]
    for r in df.itertuples():
        lines.append(
            f"| {r.run} | {r.boot_id} | {short[r.metric]} | {r.real:.4g} | {r.fast:.4g} | "
            f"{r.slow:.4g} | {'yes' if r.inside else 'NO'} |"
        )
    return "\n".join(lines) + "\n"


def main() -> None:
    df = study()
    _atomic(HERE / "host_band_study.csv", df.to_csv(index=False, float_format="%.6g"))
    _atomic(HERE / "host_band_study.md", markdown(df))
    print(markdown(df).split("\n\n")[2])
    print(markdown(df).split("\n\n")[3])


if __name__ == "__main__":
    main()
