"""Read vLLM's Prometheus ``/metrics`` text and sample it during a run."""

from __future__ import annotations

import re
import threading
import time
import urllib.request
from dataclasses import dataclass, field

# Gauges and counters sampled during a run (names as vLLM 0.32 exports them,
# shared/LIVE_VLLM.md s4). The counter of preemptions lags (s6.3): compare final totals.
SAMPLED: dict[str, str] = {
    "vllm:num_requests_running": "running",
    "vllm:num_requests_waiting": "waiting",
    "vllm:kv_cache_usage_perc": "kv_usage",
    "vllm:num_preemptions_total": "preemptions",
    "vllm:generation_tokens_total": "generation_tok",
}


# counters also kept per label value by parse_metrics: {metric: label}
PER_LABEL: dict[str, str] = {"vllm:spec_decode_num_accepted_tokens_per_pos_total": "position"}


def parse_metrics(text: str) -> dict[str, float]:
    """Sum each metric over its label sets: ``{name: value}`` (histogram series kept as
    ``name_bucket`` etc.; the metrics in PER_LABEL also per label value, as
    ``name=value``). Lines that are comments or malformed are skipped."""
    out: dict[str, float] = {}
    for line in text.splitlines():
        if not line or line.startswith("#"):
            continue
        head, _, value = line.rpartition(" ")
        if not head:
            continue
        name = head.split("{", 1)[0]
        try:
            v = float(value)
        except ValueError:
            continue
        out[name] = out.get(name, 0.0) + v
        if name in PER_LABEL:  # also kept per value of its label: "name=value"
            m = re.search(PER_LABEL[name] + r'="([^"]*)"', head)
            if m:
                key = f"{name}={m.group(1)}"
                out[key] = out.get(key, 0.0) + v
    return out


def fetch_metrics(url: str, timeout_s: float = 5.0) -> dict[str, float]:
    with urllib.request.urlopen(url.rstrip("/") + "/metrics", timeout=timeout_s) as r:
        return parse_metrics(r.read().decode())


@dataclass(slots=True)
class MetricsSampler:
    """Samples ``/metrics`` every ``period_s`` on a background thread until ``stop()``."""

    url: str
    period_s: float = 0.1
    t0: float = 0.0
    samples: list[dict[str, float]] = field(default_factory=list)
    _stop: threading.Event = field(default_factory=threading.Event)
    _thread: threading.Thread | None = None

    def __post_init__(self) -> None:
        if not self.period_s > 0:
            raise ValueError(f"sampler.period_s={self.period_s} must be > 0")

    def _run(self) -> None:
        while not self._stop.is_set():
            t = time.perf_counter() - self.t0
            try:
                m = fetch_metrics(self.url)
            except OSError:
                m = None
            if m is not None:
                row = {"t_s": t}
                row |= {short: m.get(name, float("nan")) for name, short in SAMPLED.items()}
                self.samples.append(row)
            self._stop.wait(self.period_s)

    def start(self, t0: float) -> None:
        self.t0 = t0
        self._thread = threading.Thread(target=self._run, name="metrics-sampler", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=10)
