"""Recording during a run, and the reductions vLLM / ``vllm bench serve`` report.

Definitions (VLLM.md s5): TTFT = send -> first token; E2EL = send -> last token;
TPOT = (E2EL - TTFT) / (output_tok - 1) for output_tok > 1; ITL per streamed chunk
(one chunk per step that emitted tokens, so ITL ~ step time under speculation);
output throughput = output tokens / benchmark duration (t=0 to the last finish);
kv_cache_usage = 1 - free / (num_blocks - 1), sampled every step; peaks = max of samples.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

STEP_COLUMNS: tuple[str, ...] = (
    "t_start_s",
    "step_s",
    "num_running",
    "num_waiting",
    "num_scheduled_tok",
    "num_prefill_tok",
    "num_decode_req",
    "num_free_blocks",
    "kv_usage",
    "num_preempted",
    "num_admitted",
    "num_emitted_tok",
)


class StepRecorder:
    """Append-only per-step columns (plain lists; converted once at the end)."""

    def __init__(self) -> None:
        self.cols: dict[str, list[float]] = {c: [] for c in STEP_COLUMNS}
        self.itl_s: list[float] = []

    def record(self, **values: float) -> None:
        for c in STEP_COLUMNS:
            self.cols[c].append(values[c])

    def frame(self) -> pd.DataFrame:
        df = pd.DataFrame(self.cols)
        for c in STEP_COLUMNS:
            if c.startswith("num_"):
                df[c] = df[c].astype(np.int64)
        return df


def _stats(prefix: str, values: np.ndarray) -> dict[str, float]:
    if values.size == 0:
        return {
            f"{prefix}_mean_s": float("nan"),
            f"{prefix}_median_s": float("nan"),
            f"{prefix}_p99_s": float("nan"),
        }
    return {
        f"{prefix}_mean_s": float(values.mean()),
        f"{prefix}_median_s": float(np.median(values)),
        f"{prefix}_p99_s": float(np.percentile(values, 99)),
    }


def summarize(requests: pd.DataFrame, steps: pd.DataFrame, itl_s: np.ndarray) -> dict[str, float]:
    """Scalar metrics of one run."""
    duration = float(requests["finish_s"].max()) if len(requests) else 0.0
    out_tok = int(requests["output_tok"].sum())
    in_tok = int(requests["prompt_tok"].sum())
    summary: dict[str, float] = {
        "num_requests": len(requests),
        "duration_s": duration,
        "total_output_tok": out_tok,
        "output_throughput_tok_per_s": out_tok / duration if duration > 0 else float("nan"),
        "total_token_throughput_tok_per_s": (out_tok + in_tok) / duration
        if duration > 0
        else float("nan"),
        "request_throughput_req_per_s": len(requests) / duration if duration > 0 else float("nan"),
    }
    summary |= _stats("ttft", requests["ttft_s"].to_numpy())
    tpot = requests["tpot_s"].dropna().to_numpy()
    summary |= _stats("tpot", tpot)
    summary |= _stats("itl", itl_s)
    summary |= _stats("e2el", requests["e2el_s"].to_numpy())
    summary |= _stats("queue", (requests["first_scheduled_s"] - requests["send_s"]).to_numpy())
    if len(steps):
        summary["peak_kv_usage"] = float(steps["kv_usage"].max())
        summary["mean_kv_usage"] = float(
            np.average(steps["kv_usage"], weights=steps["step_s"].clip(lower=1e-12))
        )
        summary["peak_running"] = int(steps["num_running"].max())
        summary["peak_waiting"] = int(steps["num_waiting"].max())
        summary["num_steps"] = len(steps)
    summary["num_preemptions"] = int(requests["num_preemptions"].sum())
    return summary
