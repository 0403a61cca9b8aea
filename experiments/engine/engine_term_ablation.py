"""POST-HOC ablation of the engine terms (seen the predict runs: NOT a prediction, nothing
shipped or asserted from it): which term of `--engine-overhead measured-h200-vllm0.26`
makes each loaded run's error. Variants drop one term at a time: delta = 0; PIECEWISE host
= 0; the eager host line flattened to its value at 2560 tokens (the fit points' midpoint).
Every variant runs vLLM 0.26's async scheduling, as the table does (PLAN.md 2026-12-02 01:57).

    PYTHONPATH=. python3 experiments/engine/engine_term_ablation.py   # -> engine_term_ablation.md
"""

from __future__ import annotations

import os
from dataclasses import replace
from pathlib import Path

from capsim.cost import engine_overhead as ov
from capsim.cost.factory import build_step_time_model
from capsim.gpus import get_gpu
from capsim.live import engine_oos as eo
from capsim.models import get_model
from capsim.simulate import simulate

HERE = Path(__file__).resolve().parent
RUNS = (
    "g090_k3_rand_c16",
    "g090_k3_rand_c64",
    "g060_k3_rand_c64",
    "g060_k3_sg_c256",
    "g090_k0_rand_c64",
    "g090_k0_rand_c256",
    # calls 6-7 (2026-12-02; predict runs, ablated after their table was computed)
    "g090_k1_rand_c64",
    "g090m16_k3_rand_c64",
    "g090m16_k3_rand_c256",
    "g090m16_k3_sg_c64",
)


def variants() -> dict[str, ov.EngineOverheadFit]:
    f = ov.MEASURED_H200_VLLM026
    flat = f.eager_host_s + f.eager_host_s_per_tok * 2560
    return {
        "as fitted": f,
        "delta = 0": replace(f, delta_s=0.0),
        "PIECEWISE host = 0": replace(f, piecewise_host_s=0.0),
        "eager host flat": replace(f, eager_host_s=flat, eager_host_s_per_tok=0.0),
    }


def main() -> int:
    lines = [
        "# Engine terms, post-hoc ablation (not a prediction; see the script's docstring)",
        "",
        "| run | variant | out tok/s err % | TTFT mean err % | TPOT mean err % |",
        "|---|---|---|---|---|",
    ]
    for run in RUNS:
        r = eo.load_run(HERE / "runs" / run)
        cfg = eo.sim_config(r, engine_overhead=eo.ENGINE_OVERHEAD)
        built = build_step_time_model(
            cfg, get_model(cfg.model), get_gpu(cfg.gpu), async_period=False
        )
        assert isinstance(built, ov.HostBoundStepTime)
        m = r.metrics
        for name, fit in variants().items():
            cost = ov.HostBoundStepTime(built.base, fit, built.descs)
            s = simulate(cfg, workload=eo.request_table(r), cost=cost).summary
            errs = (
                s["output_throughput_tok_per_s"] / m["throughput_tok_per_s"] - 1,
                1e3 * s["ttft_mean_s"] / m["ttft_mean_ms"] - 1,
                1e3 * s["tpot_mean_s"] / m["tpot_mean_ms"] - 1,
            )
            lines.append(
                f"| {run} | {name} | " + " | ".join(f"{100 * e:+.1f}" for e in errs) + " |"
            )
    text = "\n".join(lines) + "\n"
    tmp = HERE / "engine_term_ablation.md.tmp"
    tmp.write_text(text)
    os.replace(tmp, HERE / "engine_term_ablation.md")
    print(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
