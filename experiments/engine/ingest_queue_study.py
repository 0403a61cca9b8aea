"""The API server's ingest queue (PLAN.md 2026-12-04 22:28, rule written before fitting; every
run here had been seen: a study, the shipped model unchanged).

Request i reaches the scheduler at max(send_i + r, reach_(i-1) + a + b * prompt_tok_i). a and b:
least squares of the real fill time per request (``burst_study.step_log_burst``) on the burst's
mean prompt tokens over the seven FIT runs named in the rule. Every other closed-loop predict run
of burst_study.md is simulated by the async column's model with and without the queue.

    PYTHONPATH=. python3 experiments/engine/ingest_queue_study.py
writes ingest_queue_study.csv and .md next to this file (atomic writes).
"""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pandas as pd

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from arrival_replay_study import count_rows, run_rows  # noqa: E402
from burst_study import simulate_in_send_order, step_log_burst  # noqa: E402
from host_fit_study import _atomic  # noqa: E402

from capsim.live.engine_oos import RealRun, load_run, within  # noqa: E402

FIT_RUNS: tuple[str, ...] = (
    "g090_k2_sg_c64",
    "g090_k2_sg_c64_r2",
    "g090_k2_sg_c64_r3",
    "g090_k2_sg_c64_r4",
    "g090m16_k3_sg_c64",
    "g090_k0_rand_c64",
    "g090_k1_rand_c64",
)
METRICS: tuple[tuple[str, str], ...] = (
    ("burst_ttft_ms", "burst TTFT mean ms"),
    ("ttft_mean_ms", "TTFT mean ms"),
    ("ttft_p99_ms", "TTFT p99 ms"),
    ("throughput_tok_per_s", "out tok/s"),
    ("tpot_mean_ms", "TPOT mean ms"),
)


def fit(runs_root: Path = HERE / "runs") -> tuple[float, float, pd.DataFrame]:
    """(a seconds, b seconds per token, the fit rows)."""
    rows = []
    for name in FIT_RUNS:
        run = load_run(runs_root / name)
        c = int(run.bench["max_concurrency"])
        fill_s, _ = step_log_burst(runs_root / name, c)
        prompt = float(run.requests["input_len"].to_numpy()[:c].mean())
        rows.append({"run": name, "concurrency": c, "burst_prompt_tok": prompt,
                     "fill_ms_per_req": 1e3 * fill_s / c})  # fmt: skip
    df = pd.DataFrame(rows)
    b, a = np.polyfit(df["burst_prompt_tok"], df["fill_ms_per_req"], 1)
    return 1e-3 * float(a), 1e-3 * float(b), df


def simulate_metrics(run: RealRun, data_root: Path, a_s: float, b_s: float) -> dict[str, float]:
    ttft, s = simulate_in_send_order(run, data_root, a_s, b_s)
    c = int(run.bench["max_concurrency"])
    return {
        "burst_ttft_ms": 1e3 * ttft[:c].mean(),
        "ttft_mean_ms": 1e3 * s["ttft_mean_s"],
        "ttft_p99_ms": 1e3 * s["ttft_p99_s"],
        "throughput_tok_per_s": s["output_throughput_tok_per_s"],
        "tpot_mean_ms": 1e3 * s["tpot_mean_s"],
    }


def study(
    burst: pd.DataFrame, oos: pd.DataFrame, a_s: float, b_s: float, runs_root: Path = HERE / "runs"
) -> pd.DataFrame:
    rows = []
    data = runs_root.parent / "data"
    for name in burst["run"]:
        if name in FIT_RUNS:
            continue
        run = load_run(runs_root / name)
        real = run.requests["ttft_s"].to_numpy(np.float64)
        c = int(run.bench["max_concurrency"])
        o = oos[oos["run"] == name].set_index("metric")["real"]
        want = {"burst_ttft_ms": 1e3 * real[:c].mean(), **{m: float(o[m]) for m, _ in METRICS[1:]}}
        off = simulate_metrics(run, data, 0.0, 0.0)
        on = simulate_metrics(run, data, a_s, b_s)
        for metric, _ in METRICS:
            rows.append({"run": name, "metric": metric, "real": want[metric],
                         "without": off[metric], "with_queue": on[metric]})  # fmt: skip
    df = pd.DataFrame(rows)
    for col in ("without", "with_queue"):
        df[f"err_{col}_pct"] = 100.0 * (df[col] - df["real"]) / df["real"]
        df[f"pass_{col}"] = [
            within(m, r, p) if m != "burst_ttft_ms" else abs(p - r) <= 0.2 * r
            for m, r, p in zip(df["metric"], df["real"], df[col], strict=True)
        ]
    return df


def markdown(df: pd.DataFrame, a_s: float, b_s: float, fits: pd.DataFrame) -> str:
    short = dict(METRICS)
    n = df["run"].nunique()
    lines = [
        "# The API server's ingest queue (a study)",
        "",
        "PLAN.md 2026-12-04 22:28 (rule before fitting; every run seen; the shipped model and "
        "out_of_sample.md unchanged). Request i reaches the scheduler at max(send + r, previous "
        f"reach + a + b x prompt tokens); FIT on {', '.join(FIT_RUNS)}: a = {1e3 * a_s:.2f} ms, "
        f"b = {1e6 * b_s:.2f} us per token. Regenerate: "
        "`PYTHONPATH=. python3 experiments/engine/ingest_queue_study.py`.",
        "",
        "| fit run | C | burst prompt tok | fill ms / request |",
        "|---|---|---|---|",
        *(
            f"| {r.run} | {r.concurrency} | {r.burst_prompt_tok:.0f} | {r.fill_ms_per_req:.2f} |"
            for r in fits.itertuples()
        ),
        "",
        f"Over the other {n} closed-loop predict runs, within issue 21's thresholds (burst TTFT: "
        "20%), without / with the queue:",
        "",
        "| metric | without | with the queue | closer with the queue |",
        "|---|---|---|---|",
    ]
    lines += count_rows(df, METRICS, "without", "with_queue")
    x = {m: df[df["metric"] == m] for m, _ in METRICS}
    gain = {m: int(v["pass_with_queue"].sum()) - int(v["pass_without"].sum()) for m, v in x.items()}
    lines += [
        "",
        "Reading: the queue moves the burst's own mean TTFT within 20% on "
        f"{gain['burst_ttft_ms']:+d} runs, but the run-level metrics by "
        f"{gain['ttft_mean_ms']:+d} (mean TTFT), "
        f"{gain['ttft_p99_ms']:+d} (p99 TTFT), {gain['throughput_tok_per_s']:+d} (throughput) and "
        f"{gain['tpot_mean_ms']:+d} (TPOT): spreading the arrivals is part of the burst, not what "
        "sets the p99 misses; the fit rows include g090_k2_sg_c64_r3's stalled start as the rule "
        "named them (no refit). The queue stays off; a pre-registered device test decides.",
    ]
    lines += ["", "| run | metric | real | without | err % | with the queue | err % |",
              "|---|---|---|---|---|---|---|"]  # fmt: skip
    lines += run_rows(df, short, "without", "with_queue")
    return "\n".join(lines) + "\n"


def main() -> None:
    a_s, b_s, fits = fit()
    oos = pd.read_csv(HERE / "out_of_sample.csv")
    df = study(pd.read_csv(HERE / "burst_study.csv"), oos, a_s, b_s)
    _atomic(HERE / "ingest_queue_study.csv", df.to_csv(index=False))
    _atomic(HERE / "ingest_queue_study.md", markdown(df, a_s, b_s, fits))
    print(markdown(df, a_s, b_s, fits))


if __name__ == "__main__":
    main()
