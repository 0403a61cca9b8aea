"""Streaming-path summaries for fixed seeds, one line per case (every value's repr, key
order kept), for comparing two checkouts (``scripts/identity/outputs.sh``)."""

from capsim.config import EngineConfig, LoadConfig, SimConfig, SpecDecodeConfig
from capsim.simulate import simulate

PC = EngineConfig(enable_prefix_caching=True)
# caching pinned off where a case had the old default (vLLM 0.33's default turns it on)
OFF = EngineConfig(enable_prefix_caching=False)
CASES = [
    ("sharegpt", "b200", {"mode": "rate", "rate_req_per_s": 60.0}, OFF, 3000),
    (
        "sharegpt",
        "h200",
        {"mode": "concurrency", "concurrency": 300},
        EngineConfig(gmu=0.62, max_num_seqs=256, enable_prefix_caching=False),
        2000,
    ),
    ("shared-prefix", "b200", {"mode": "concurrency", "concurrency": 64}, PC, 1500),
    ("sharegpt", "b200", {"mode": "rate", "rate_req_per_s": 30.0}, PC, 1500),
    ("sharegpt-multiturn", "b200", {"mode": "concurrency", "concurrency": 32}, OFF, 800),
    ("sharegpt-multiturn", "b200", {"mode": "concurrency", "concurrency": 32}, PC, 800),
    ("azure-code", "b200", {"mode": "replay"}, OFF, 1500),
]
for wl, gpu, load, eng, n in CASES:
    cfg = SimConfig(
        model="qwen3.5-35b-a3b",
        gpu=gpu,
        engine=eng,
        spec=SpecDecodeConfig(),
        workload=wl,
        load=LoadConfig(num_requests=n, **load),
        seed=7,
    )
    s = simulate(cfg, streaming=True).summary
    print(wl, gpu, load, n, repr(list(s.items())))
