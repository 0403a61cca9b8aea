"""Fleet results for fixed seeds (request frame and step hashes, summaries), one line per
case, for comparing two checkouts (``scripts/identity/outputs.sh``)."""

import hashlib

import pandas as pd

from capsim.config import EngineConfig, LoadConfig, SimConfig, SpecDecodeConfig
from capsim.fleet.sim import simulate_fleet


def _sha(frame: pd.DataFrame) -> str:
    values = pd.util.hash_pandas_object(frame, index=True).values
    return hashlib.sha256(values.tobytes()).hexdigest()


for wl, eng, router, reps, n in [
    ("sharegpt", EngineConfig(enable_prefix_caching=False), "round_robin", 3, 600),
    ("shared-prefix", EngineConfig(enable_prefix_caching=True), "prefix_affinity", 3, 600),
    (
        "sharegpt",
        EngineConfig(gmu=0.62, max_num_seqs=64, enable_prefix_caching=False),
        "least_outstanding",
        2,
        800,
    ),
    ("sharegpt", EngineConfig(enable_prefix_caching=False), "round_robin", 1, 400),
]:
    cfg = SimConfig(
        model="qwen3.5-35b-a3b",
        gpu="b200",
        engine=eng,
        spec=SpecDecodeConfig(),
        workload=wl,
        load=LoadConfig(mode="rate", rate_req_per_s=40.0, num_requests=n),
        seed=4,
    )
    r = simulate_fleet(cfg, reps, router)
    steps = [_sha(s)[:16] for s in r.steps]
    print(wl, router, reps, _sha(r.requests), steps, list(r.requests.columns))
    print(repr(list(r.summary.items())), repr(r.replica_summaries))
