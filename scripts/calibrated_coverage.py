"""Which deployments the calibrated step model prices on the H200: every preset x TP
1/2/4/8 x weights (bf16, fp8) x commit mode x MTP chain depth k = 0..8.

Each cell: the memory plan first (a deployment that does not fit is refused by it), then
``CalibratedStepTime.from_config``, then one step with a prefill chunk of the engine's token
budget (``--prefill-tok``, vLLM's default max_num_batched_tokens 8192 for the H200: a
deployment whose prefill tables stop short of it refuses every real workload); prints one
line per (model, tp, weights, commit, answer) with the depths that share it: OK (measured
windows), OK (T interp) (a window between measured ones, linear in T, labelled in
``describe()``), or the one-line refusal. ``--summary``: one line per (model, tp, weights)
with the depths priced per commit mode (the matrix in docs/calibration.md).
Usage: python scripts/calibrated_coverage.py [--max-k 8] [--prefill-tok 8192] [--summary]
"""

from __future__ import annotations

import argparse
from collections import defaultdict
from dataclasses import replace

import numpy as np

from capsim.config import EngineConfig, SpecDecodeConfig
from capsim.cost.base import BatchShape
from capsim.cost.calibrated import CalibratedStepTime
from capsim.gpus import GPUS
from capsim.memory.memory_plan import plan_memory
from capsim.memory.term_lookup import measured_term
from capsim.models import PRESETS

COMMITS = ("storeall", "reconstruct", "deferred", "replay")


def _prefill_step(spec: SpecDecodeConfig, prefill_tok: int) -> BatchShape:
    """One decode request (context 1024) next to one prefill chunk of ``prefill_tok``."""
    return BatchShape(
        num_decode_req=1, query_tok_per_decode=spec.window_tok,
        decode_context_tok=np.array([1024], dtype=np.int64),
        prefill_new_tok=np.array([prefill_tok], dtype=np.int64),
        prefill_computed_tok=np.array([0], dtype=np.int64),
    )  # fmt: skip


def answer(model, tp: int, spec: SpecDecodeConfig, prefill_tok: int = 8192) -> str:
    gpu = GPUS["H200"]
    try:
        plan_memory(model, gpu, EngineConfig(tp=tp), spec, lookup=measured_term)
    except ValueError as exc:
        return "MEMORY: " + str(exc).split(" for ")[0]
    try:
        cost = CalibratedStepTime.from_config(model, gpu, tp, spec)
        desc = cost.describe()
    except ValueError as exc:
        return "REFUSED: " + str(exc)
    if prefill_tok:
        try:
            cost.step_time_s(_prefill_step(spec, prefill_tok))
        except ValueError as exc:
            return f"REFUSED (prefill chunk {prefill_tok} tok): " + str(exc)
    return "OK (T interp)" if desc.get("gdn_window_interpolation") else "OK"


def _short(ans: str) -> str:
    """The summary's word for an answer."""
    if ans.startswith("OK"):
        return "ok"
    if ans.startswith("MEMORY"):
        return "memory"
    return "prefill" if ans.startswith("REFUSED (prefill") else "refused"


def summary_line(name: str, tp: int, weights: str, groups: dict) -> str:
    """One line: per commit mode the depths priced, else the kind of refusal."""
    parts = []
    for commit in COMMITS:
        ok = sorted(k for (c, ans), ks in groups.items() if c == commit and ans.startswith("OK")
                    for k in ks)  # fmt: skip
        kinds = sorted({_short(ans) for (c, ans) in groups if c == commit} - {"ok"})
        ks = f"k={ok[0]}..{ok[-1]}" if ok and ok == list(range(ok[0], ok[-1] + 1)) else f"k={ok}"
        parts.append(f"{commit} " + (ks if ok else "-") + (f" ({'/'.join(kinds)})" if kinds else ""))
    return f"{name} tp={tp} {weights}: " + "; ".join(parts)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--max-k", type=int, default=8)
    ap.add_argument("--prefill-tok", type=int, default=8192, help="0: no prefill check")
    ap.add_argument("--summary", action="store_true")
    args = ap.parse_args(argv)
    counts = {"ok": 0, "memory": 0, "refused": 0, "prefill": 0}
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
                        groups[commit, answer(model, tp, spec, args.prefill_tok)].append(k)
                weights = "bf16" if quant == "none" else quant
                for (_, ans), ks in groups.items():
                    counts[_short(ans)] += len(ks)
                if args.summary:
                    print(summary_line(name, tp, weights, groups))
                    continue
                for (commit, ans), ks in groups.items():
                    print(f"{name} tp={tp} {weights} {commit} k={ks}: {ans}")
    total = sum(counts.values())
    print(f"cells (model, tp, weights, commit, k): {total}; priced {counts['ok']}; refused by "
          f"the memory plan {counts['memory']}; refused by the step model {counts['refused']}"
          f" (+ {counts['prefill']} refused at a {args.prefill_tok}-token prefill chunk)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
