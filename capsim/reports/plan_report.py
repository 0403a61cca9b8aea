"""A plan's directory -> ``plan.html``: one self-contained page (images inlined).

Reads ``plan.json`` and ``candidates.parquet`` (and ``day.csv`` when present), never
simulates. Every number on the page comes from those files.
"""

from __future__ import annotations

import base64
import html
import json
from pathlib import Path
from typing import Any

import pandas as pd

from capsim.reports.build import CSS, png_bytes
from capsim.reports.plan_figures import (
    figure_advice,
    figure_cost_vs_throughput,
    figure_cost_vs_ttft,
    figure_day,
)
from capsim.sweep.store import atomic_write_bytes


def _table(rows: list[dict[str, Any]] | pd.DataFrame, cols: list[str] | None = None) -> str:
    df = pd.DataFrame(rows)
    if df.empty:
        return "<p class='note'>(none)</p>"
    if cols:
        df = df[[c for c in cols if c in df]]
    return df.to_html(index=False, border=0, float_format=lambda v: f"{v:.4g}", na_rep="-")


def _img(fig: Any, title: str) -> str:
    b64 = base64.b64encode(png_bytes(fig)).decode()
    t = html.escape(title)
    return f"<h2>{t}</h2><img alt='{t}' src='data:image/png;base64,{b64}'>"


def _answer_html(best: dict[str, Any] | None, primary: str) -> str:
    """The headline paragraph: the cheapest fleet, or that none meets the SLO."""
    if best:
        return (
            f"<p><b>Cheapest ({html.escape(primary)} step times):</b> {best['replicas']} x "
            f"{html.escape(best['gpu'])} TP{best['tp']} [{html.escape(best['spec'])}] = "
            f"{best['num_gpus']} GPUs, ${best['fleet_usd_per_h']:.2f}/h at list prices, "
            f"${best['usd_per_mtok']:.3f} per million output tokens. At the operating point "
            f"p99 TTFT {best['op_ttft_p99_s'] * 1e3:.0f} ms, mean TPOT "
            f"{best['op_tpot_mean_s'] * 1e3:.1f} ms, each replica at "
            f"{best['load_frac_of_capacity']:.0%} of its SLO capacity (mean KV use "
            f"{best['op_mean_kv_usage']:.0%})"
            f"; steady-state check: {best['steady']}.</p>"
        )
    return f"<p><b>No configuration priced by {html.escape(primary)} meets the SLO.</b></p>"


def _fleet_check_parts(d: Path) -> list[str]:
    """The fleet-check section, if the plan ran one."""
    parts: list[str] = []
    fc_path = d / "fleet_check.json"
    if fc_path.exists():
        fc = json.loads(fc_path.read_text())
        parts.append(
            "<h2>Fleet check (replicas + router simulated jointly)</h2><p class='note'>"
            f"{fc['replicas']} replicas behind {html.escape(str(fc['router']))} at "
            f"{fc['fleet_req_per_s']:g} req/s on one clock: p99 TTFT "
            f"{(fc['ttft_p99_s'] or 0) * 1e3:.0f} ms, mean TPOT "
            f"{(fc['tpot_mean_s'] or 0) * 1e3:.1f} ms (one replica at the operating point "
            f"predicted "
            f"{(fc['predicted_op_ttft_p99_s'] or 0) * 1e3:.0f} ms); SLO misses: "
            f"{html.escape(fc['misses'] or 'none')}.</p>"
        )
    return parts


def _day_parts(d: Path) -> list[str]:
    """The day-of-traffic figure and summary, if the plan simulated a day."""
    parts: list[str] = []
    day_csv = d / "day.csv"
    if day_csv.exists():
        day = pd.read_csv(day_csv)
        summ = json.loads((d / "day.json").read_text())
        parts.append(_img(figure_day(day, summ.get("label", "")), "A day of traffic"))
        parts.append(f"<p class='note'>{html.escape(json.dumps(summ))}</p>")
    return parts


def build_plan_report(plan_dir: Path | str) -> Path:
    d = Path(plan_dir)
    ans = json.loads((d / "plan.json").read_text())
    df = pd.read_parquet(d / "candidates.parquet")
    primary = ans["step_time_primary"]
    best = ans["cheapest"]
    fr_ttft = pd.DataFrame(ans["frontier_cost_vs_ttft"])
    fr_thr = pd.DataFrame(ans["frontier_cost_vs_throughput"])
    if not fr_thr.empty:
        fr_thr = fr_thr.merge(df[["cand_id", "max_throughput_tok_per_s"]], on="cand_id", how="left")
    c = ans["counts"]
    tr = ans["traffic"]
    head = (
        f"{html.escape(ans['model'])} on {html.escape(tr['workload'])} at "
        f"{tr['rate_req_per_s']:.4g} req/s (burstiness {tr['burstiness']:.3g}); SLO "
        f"{html.escape(ans['slo'])}; headroom {ans['headroom_frac']:.0%}; seed {ans['seed']}"
    )
    answer = _answer_html(best, primary)
    gpu_lines = "; ".join(f"{g}: step times {v}" for g, v in sorted(ans["gpu_step_times"].items()))
    parts = [
        "<!DOCTYPE html><html lang='en'><head><meta charset='utf-8'>",
        "<meta name='viewport' content='width=device-width, initial-scale=1'>",
        f"<title>capsim plan</title><style>{CSS}</style></head><body>",
        "<h1>capsim plan: cheapest fleet meeting the SLO</h1>",
        f"<p class='note'>{head}</p>",
        answer,
        f"<p class='note'>{c['total']} candidates: {c['ok']} ok, {c['infeasible']} infeasible, "
        f"{c['refused']} refused, {c['pruned']} pruned by the cost floor; {c['simulated']} "
        f"searched with {c['num_sims']} simulations; {c['roofline_fallback']} priced by the "
        f"roofline fallback (hollow markers; not comparable with calibrated rows). "
        f"{html.escape(gpu_lines)}. Prices: {html.escape(ans['prices_are'])}.</p>",
        _img(
            figure_cost_vs_ttft(df, fr_ttft, best, primary, _ttft_target(ans)), "Cost vs p99 TTFT"
        ),
        _img(figure_cost_vs_throughput(df, fr_thr, primary), "Cost vs throughput"),
        "<h2>Pareto frontier: cost vs p99 TTFT</h2>",
        _table(ans["frontier_cost_vs_ttft"]),
        _img(figure_advice(pd.DataFrame(ans["speculation_advice"])), "Speculation advice"),
        _table(
            ans["speculation_advice"],
            [
                "load_frac",
                "fleet_req_per_s",
                "spec",
                "best_cand_id",
                "replicas",
                "num_gpus",
                "fleet_usd_per_h",
                "extra_usd_per_h",
                "best",
                "capacity_is_bound",
            ],
        ),
    ]
    parts += _fleet_check_parts(d)
    parts += _day_parts(d)
    parts += [
        "<h2>Prices used</h2>",
        _table(list(ans["prices"].values())),
        "<h2>Every candidate that was not searched, and why</h2>",
        _table(df[df["status"] != "ok"], ["cand_id", "status", "reason", "step_time_note"]),
        "</body></html>",
    ]
    out = d / "plan.html"
    atomic_write_bytes(out, "\n".join(parts).encode())
    return out


def _ttft_target(ans: dict[str, Any]) -> float | None:
    for part in ans["slo"].split(", "):
        if part.startswith("ttft_p99<="):
            return float(part.split("<=")[1].rstrip("ms")) / 1e3
    return None
