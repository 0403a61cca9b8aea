"""One open-loop simulate point for the memory measurement of docs/reliability.md.

Usage: /usr/bin/time -v python3 scripts/rss_point.py N [exact|streaming] [caching]
(sharegpt on B200, 60 requests/s, seed 0: the default deployment, prefix caching off
unless ``caching`` is given; prints the summary's request count, steps and p99 TTFT so
the run can be checked).
"""

from __future__ import annotations

import sys

from capsim.config import EngineConfig, LoadConfig, SimConfig, SpecDecodeConfig
from capsim.simulate import simulate


def main() -> None:
    n = int(sys.argv[1])
    mode = sys.argv[2] if len(sys.argv) > 2 else "default"
    if mode not in ("default", "exact", "streaming"):
        raise SystemExit(f"mode={mode!r}: choose default, exact or streaming")
    caching = sys.argv[3:] == ["caching"]
    if sys.argv[3:] and not caching:
        raise SystemExit(f"{sys.argv[3]!r}: the third argument can only be 'caching'")
    cfg = SimConfig(
        model="qwen3.5-35b-a3b",
        gpu="b200",
        engine=EngineConfig(enable_prefix_caching=caching),
        spec=SpecDecodeConfig(),
        workload="sharegpt",
        load=LoadConfig(mode="rate", rate_req_per_s=60.0, num_requests=n),
        seed=0,
    )
    streaming = None if mode == "default" else mode == "streaming"
    s = simulate(cfg, streaming=streaming).summary
    print(n, mode, s["num_requests"], s["num_steps"], s["ttft_p99_s"], s["itl_p99_s"])


if __name__ == "__main__":
    main()
