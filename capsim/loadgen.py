"""Send times like ``vllm bench serve`` (NOTES.md s2).

- concurrency C, rate inf: every request is released at t=0; a semaphore of C lets a
  request be sent only when one of the C in flight finishes (closed loop);
- rate r: gaps ~ Gamma(shape=burstiness, scale=1/(r*burstiness)), cumulative times
  rescaled so the last request goes out at exactly N/r (as vLLM 0.33 does);
  an optional max concurrency still gates sending;
- replay: the trace's own arrival offsets.
"""

from __future__ import annotations

import numpy as np

from capsim.config import LoadConfig


def release_times_s(
    load: LoadConfig,
    num_requests: int,
    rng: np.random.Generator,
    trace_arrival_s: np.ndarray | None,
) -> np.ndarray:
    """When each request becomes ready to send (before any concurrency gate)."""
    if load.mode == "concurrency":
        return np.zeros(num_requests, dtype=np.float64)
    if load.mode == "replay":
        if trace_arrival_s is None:
            raise ValueError("load.mode='replay': the workload has no arrival timestamps")
        arr = np.asarray(trace_arrival_s[:num_requests], dtype=np.float64)
        return arr - arr[0]
    rate = float(load.rate_req_per_s or 0.0)
    theta = 1.0 / (rate * load.burstiness)
    gaps = rng.gamma(shape=load.burstiness, scale=theta, size=num_requests)
    times = np.cumsum(gaps)
    target_end = num_requests / rate
    if times[-1] > 0:
        times = times * (target_end / times[-1])
    return times
