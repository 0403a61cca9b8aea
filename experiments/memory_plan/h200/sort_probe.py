"""Peak CUDA memory of torch.sort over a [rows, vocab] fp32 tensor, and of the PyTorch-native
top-k/top-p sequence V1 samplers before vLLM 0.12 warm up on (issue 25, session 10).

Plain PyTorch, no vLLM: the allocator's peak (torch.cuda.max_memory_allocated) over what is
live before the call, in bytes per (row, vocab entry). The top-k/top-p sequence is this
project's own rendering of what 0.9.2 / 0.10.2 ``apply_top_k_top_p`` does (sort ascending,
top-k mask from a gathered threshold, softmax + in-place cumsum, top-p mask, scatter back),
with the dummy run's arguments (top_k = vocab - 1, top_p = 0.9). Prints a Markdown table and
writes sort_probe.json to $OUT (or the working directory).

    python3 experiments/memory_plan/h200/sort_probe.py
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import torch


def _peak_over(fn, *live: torch.Tensor) -> int:
    torch.cuda.synchronize()
    base = torch.cuda.memory_allocated()
    torch.cuda.reset_peak_memory_stats()
    out = fn(*live)
    torch.cuda.synchronize()
    peak = torch.cuda.max_memory_allocated() - base
    del out
    torch.cuda.empty_cache()
    return peak


def _sort(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    return x.sort(dim=-1, descending=False)


def _native_topk_topp(logits_bf16: torch.Tensor) -> torch.Tensor:
    x = logits_bf16.to(torch.float32)
    vals, idx = x.sort(dim=-1, descending=False)
    rows, vocab = vals.shape
    k = torch.full((rows,), vocab - 1, device=x.device, dtype=torch.long)
    thresh = vals.gather(1, (vocab - k).unsqueeze(1))
    vals.masked_fill_(vals < thresh, -float("inf"))
    probs = vals.softmax(dim=-1)
    torch.cumsum(probs, dim=-1, out=probs)
    p = torch.full((rows,), 0.9, device=x.device)
    top_p = probs <= 1 - p.unsqueeze(1)
    top_p[:, -1] = False
    vals.masked_fill_(top_p, -float("inf"))
    return vals.scatter(dim=-1, index=idx, src=vals)


def main() -> int:
    if not torch.cuda.is_available():
        print("sort_probe: no CUDA device", file=sys.stderr)
        return 2
    out_dir = Path(os.environ.get("OUT", "."))
    rows_out = []
    for vocab, padded in ((151936, 151936), (248320, 248320)):
        for rows in (64, 1024):
            x = torch.randn(rows, vocab, device="cuda", dtype=torch.float32)
            sort_b = _peak_over(_sort, x)
            del x
            torch.cuda.empty_cache()
            lg = torch.randn(rows, padded, device="cuda", dtype=torch.bfloat16)
            path_b = _peak_over(_native_topk_topp, lg)
            del lg
            torch.cuda.empty_cache()
            n = rows * vocab
            rows_out.append(
                {
                    "vocab": vocab,
                    "rows": rows,
                    "sort_peak_bytes": sort_b,
                    "sort_bytes_per_entry": round(sort_b / n, 3),
                    "native_path_peak_bytes": path_b,
                    "native_path_bytes_per_entry": round(path_b / n, 3),
                }
            )
    meta = {
        "torch": torch.__version__,
        "cuda": torch.version.cuda,
        "gpu": torch.cuda.get_device_name(0),
        "rows": rows_out,
    }
    print(f"torch {meta['torch']} CUDA {meta['cuda']} on {meta['gpu']}")
    print("| vocab | rows | torch.sort peak over input, B/entry | native top-k/top-p peak over bf16 logits, B/entry |")
    print("|---|---|---|---|")
    for r in rows_out:
        print(f"| {r['vocab']} | {r['rows']} | {r['sort_bytes_per_entry']} | {r['native_path_bytes_per_entry']} |")
    (out_dir / "sort_probe.json").write_text(json.dumps(meta, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
