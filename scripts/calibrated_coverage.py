"""Which deployments the calibrated step model prices on the H200: every preset x TP
1/2/4/8 x weights (bf16, fp8) x commit mode x MTP chain depth k = 0..8.

Each cell: the memory plan first (a deployment that does not fit is refused by it), then
``CalibratedStepTime.from_config``; prints one line per (model, tp, weights, commit, answer)
with the depths that share it: OK (measured windows), OK (T interp) (a window between
measured ones, linear in T, labelled in ``describe()``), or the one-line refusal.
Usage: python scripts/calibrated_coverage.py [--max-k 8]
"""

from __future__ import annotations

import argparse
from collections import defaultdict
from dataclasses import replace

from capsim.config import EngineConfig, SpecDecodeConfig
from capsim.cost.calibrated import CalibratedStepTime
from capsim.gpus import GPUS
from capsim.memory.memory_plan import plan_memory
from capsim.memory.term_lookup import measured_term
from capsim.models import PRESETS

COMMITS = ("storeall", "reconstruct", "deferred", "replay")


def answer(model, tp: int, spec: SpecDecodeConfig) -> str:
    gpu = GPUS["H200"]
    try:
        plan_memory(model, gpu, EngineConfig(tp=tp), spec, lookup=measured_term)
    except ValueError as exc:
        return "MEMORY: " + str(exc).split(" for ")[0]
    try:
        desc = CalibratedStepTime.from_config(model, gpu, tp, spec).describe()
    except ValueError as exc:
        return "REFUSED: " + str(exc)
    return "OK (T interp)" if desc.get("gdn_window_interpolation") else "OK"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--max-k", type=int, default=8)
    args = ap.parse_args(argv)
    for name in sorted(PRESETS):
        for tp in (1, 2, 4, 8):
            for quant in ("none", "fp8"):
                model = replace(PRESETS[name], quantization=quant)
                groups: dict[tuple[str, str], list[int]] = defaultdict(list)
                for commit in COMMITS:
                    for k in range(args.max_k + 1):
                        if k == 0 and commit != "storeall":
                            continue  # no speculation: no commit mode
                        spec = SpecDecodeConfig(num_spec_tok=k, commit=commit)
                        groups[commit, answer(model, tp, spec)].append(k)
                weights = "bf16" if quant == "none" else quant
                for (commit, ans), ks in groups.items():
                    print(f"{name} tp={tp} {weights} {commit} k={ks}: {ans}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
