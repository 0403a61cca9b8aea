"""How the real engine and capsim group new requests into steps (a diagnostic on seen runs, no
fit; session 13).

For every run with a step log and an async-column prediction: the steps that carry prefill
tokens, split by how many new requests each admits (vLLM's step log `num_new_req`, capsim's
`num_admitted`), and the steps by CUDA-graph mode (pure decode = FULL, mixed <= 512 tokens =
PIECEWISE, above = eager; as `step_diagnostic.py`). A mixed step costs 60-170 ms on the real
engine against ~20 ms for a FULL one, so a simulator that admits the same requests in more,
smaller groups runs more expensive steps.

    PYTHONPATH=. python3 experiments/engine/admission_grouping.py
writes admission_grouping.csv and admission_grouping.md next to this file (atomic writes).
"""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pandas as pd

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from host_band_study import predict_runs  # noqa: E402
from host_fit_study import _atomic  # noqa: E402

from capsim.cost.factory import build_step_time_model  # noqa: E402
from capsim.gpus import get_gpu  # noqa: E402
from capsim.live.client_roundtrip import FIT_RUNS as ROUND_TRIP_FIT_RUNS  # noqa: E402
from capsim.live.engine_oos import ENGINE_OVERHEAD, load_run, request_table, sim_config  # noqa: E402
from capsim.simulate import simulate  # noqa: E402


def _modes(prefill_tok: pd.Series, tok: pd.Series) -> dict[str, int]:
    m = np.where(prefill_tok == 0, "full", np.where(tok <= 512, "piecewise", "eager"))
    return {k: int((m == k).sum()) for k in ("full", "piecewise", "eager")}


def _side(prefill_tok: pd.Series, tok: pd.Series, new: pd.Series) -> dict[str, int]:
    pre = prefill_tok > 0
    return {
        **_modes(prefill_tok, tok),
        "prefill_steps": int(pre.sum()),
        "admit_0": int((pre & (new == 0)).sum()),
        "admit_1": int((pre & (new == 1)).sum()),
        "admit_2plus": int((pre & (new >= 2)).sum()),
    }


def client_offset_s(sends_s: np.ndarray, t_sched_s: np.ndarray, new_req: np.ndarray) -> float:
    """The shift d (engine clock - client clock) that best lines up the client's cumulative sends
    before each schedule (send + d < t_sched) with the engine's cumulative admissions: 10 ms
    steps over +-60 s, then 0.5 ms steps around the best. An alignment of two clocks, not a
    model constant."""
    cum = np.cumsum(new_req)

    def err(d: float) -> float:
        return float(np.abs(np.searchsorted(sends_s, t_sched_s - d, side="right") - cum).mean())

    coarse = min(np.arange(-6000, 6001) * 1e-2, key=err)
    return float(min(coarse + np.arange(-20, 21) * 5e-4, key=err))


def client_binned(run_dir: Path) -> dict[str, float]:
    """The real engine's steps re-filled from the client side: each send admitted at the first
    schedule after send + d (``client_offset_s``); steps admitting one request and two or more."""
    req = pd.read_csv(run_dir / "requests.csv")
    st = pd.read_csv(run_dir / "steps.csv")
    sends = np.sort(req["start_s"].to_numpy())
    ts, new = st["t_sched_s"].to_numpy(), st["num_new_req"].to_numpy()
    d = client_offset_s(sends, ts, new)
    per_step = np.bincount(np.searchsorted(ts, sends + d, side="left"), minlength=len(ts))
    return {
        "client_offset_ms": round(1e3 * d, 1),
        "client_admit_1": int((per_step == 1).sum()),
        "client_admit_2plus": int((per_step >= 2).sum()),
    }


def run_row(run_dir: Path) -> dict[str, object]:
    run = load_run(run_dir)
    cfg = sim_config(run, None, ENGINE_OVERHEAD, None)
    cost = build_step_time_model(cfg, cfg.model_spec(), get_gpu(cfg.gpu), async_period=True)
    st = simulate(cfg, workload=request_table(run, run_dir.parent.parent / "data"), cost=cost).steps
    real = pd.read_csv(run_dir / "steps.csv")
    r = _side(real["num_prefill_tok"], real["num_tok"], real["num_new_req"])
    c = _side(st["num_prefill_tok"], st["num_scheduled_tok"], st["num_admitted"])
    return {"run": run_dir.name, **{f"real_{k}": v for k, v in r.items()},
            **{f"capsim_{k}": v for k, v in c.items()}, **client_binned(run_dir)}  # fmt: skip


def table(runs_root: Path = HERE / "runs") -> pd.DataFrame:
    # the async column's predict runs and the client round trip's four fit runs (session 14:
    # they are fit runs of that column now, still the diagnostic's closed-loop k = 2 machines)
    wanted = predict_runs(runs_root.parent / "out_of_sample.csv") | set(ROUND_TRIP_FIT_RUNS)
    rows = [
        run_row(d)
        for d in sorted(runs_root.iterdir())
        if d.name in wanted and (d / "steps.csv").exists()
    ]
    return pd.DataFrame(rows)


def markdown(df: pd.DataFrame) -> str:
    tot = df.drop(columns=["run", "client_offset_ms"]).sum().astype(int)
    lines = [
        "# New requests per step: real engine vs capsim (diagnostic on seen runs, no fit)",
        "",
        "Steps with prefill tokens by new requests admitted (0 = a continued chunk), and all steps by "
        "CUDA-graph mode, real / capsim (async column's configuration). Regenerate: "
        "`PYTHONPATH=. python3 experiments/engine/admission_grouping.py`.",
        "",
        f"Over {len(df)} runs with a step log (the async column's predict runs and the client "
        "round trip's 4 fit runs): prefill steps real "
        f"{tot.real_prefill_steps} / "
        f"capsim {tot.capsim_prefill_steps} "
        f"({100 * (tot.capsim_prefill_steps / tot.real_prefill_steps - 1):+.1f}%); steps admitting "
        f"one request {tot.real_admit_1} / {tot.capsim_admit_1}; two or more "
        f"{tot.real_admit_2plus} / {tot.capsim_admit_2plus}; PIECEWISE {tot.real_piecewise} / "
        f"{tot.capsim_piecewise}; eager {tot.real_eager} / {tot.capsim_eager}.",
        "",
        "The client side: each real run's sends (`requests.csv` start times) admitted at the first "
        "schedule after send + d, d the shift that best lines up the two clocks' cumulative counts "
        "(an alignment, not a model constant): steps admitting one / two or more requests "
        f"{tot.client_admit_1} / {tot.client_admit_2plus} against the step log's "
        f"{tot.real_admit_1} / {tot.real_admit_2plus}. The step log's grouping is the client's send "
        "times cut by the engine's schedules, so it is set by when the clients see their "
        "requests end.",
        "",
        "| run | prefill steps | admit 0 | admit 1 | admit >= 2 | FULL | PIECEWISE | eager | "
        "client d ms | client admit 1 / >= 2 |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in df.itertuples():
        cells = [
            f"{getattr(r, 'real_' + k)} / {getattr(r, 'capsim_' + k)}"
            for k in ("prefill_steps", "admit_0", "admit_1", "admit_2plus", "full", "piecewise",
                      "eager")
        ]  # fmt: skip
        client = f"{r.client_offset_ms:+.1f} | {r.client_admit_1} / {r.client_admit_2plus}"
        lines.append(f"| {r.run} | " + " | ".join(cells) + f" | {client} |")
    return "\n".join(lines) + "\n"


def main() -> None:
    df = table()
    _atomic(HERE / "admission_grouping.csv", df.to_csv(index=False))
    _atomic(HERE / "admission_grouping.md", markdown(df))
    print("\n\n".join(markdown(df).split("\n\n")[2:4]))


if __name__ == "__main__":
    main()
