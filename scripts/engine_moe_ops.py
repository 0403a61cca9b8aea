"""vLLM 0.26's compiled MoE routing ops against capsim's Triton stand-ins, on the engine GPU.

capsim's step tables (kernels/bench/step/) run ``topk_softmax``, ``moe_align_block_size``,
``silu_and_mul`` (and ``moe_sum``, as torch.sum) as stand-ins (kernels/bench/step/standins.py)
for vLLM's C++/CUDA ops. This times both at the decode shapes of one preset, the way vLLM
0.26's Triton fused-MoE path calls them (router/fused_topk_router.py, experts/triton_moe.py,
moe_align_block_size.py, activation.py), and checks the stand-ins' outputs against vLLM's.

Timing: per (op, impl, tokens) one CUDA graph of ``--calls`` back-to-back calls on fixed
inputs (L2-warm, as in a step), warmed, replayed ``--replays`` times between CUDA events;
per-call time = replay time / calls (the graph-launch floor is amortised). Run on the device:

    PYTHONPATH=/tmp/capsim_engine/site python3 scripts/engine_moe_ops.py --out $OUT/moe_ops

``--dry-run`` checks the arguments and prints the shape plan on the CPU (no torch import).
"""

from __future__ import annotations

import argparse
import csv
import importlib.util
import io
import json
import os
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
TOKENS = (1, 2, 4, 8, 16, 32, 64, 128, 256, 512)
OPS = (
    "topk_softmax",
    "moe_align_block_size",
    "silu_and_mul_experts",
    "silu_and_mul_shared",
    "moe_sum",
)
IMPLS = dict.fromkeys(OPS, ("vllm", "standin"))
IMPLS["silu_and_mul_shared"] = ("vllm", "standin", "torch")  # SiluAndMul.forward_native
VLLM_CALLS = {  # as vLLM 0.26's Triton fused-MoE path calls them
    "topk_softmax": "vllm._custom_ops.topk_softmax(w, ids, tok_idx, logits, renormalize=True)",
    "moe_align_block_size": "vllm._custom_ops.moe_align_block_size(ids, E, BLOCK_SIZE_M, "
    "sorted_ids, expert_ids, num_tokens_post_pad, None)",
    "silu_and_mul": "torch.ops._C.silu_and_mul(out, x)",
    "moe_sum": "vllm._custom_ops.moe_sum(x, out)",
}
COLUMNS = (
    "op",
    "impl",
    "tokens",
    "p50_us",
    "min_us",
    "n_iters",
    "calls_per_graph",
    "shape",
    "block_size",
    "in_vllm_step",
    "check",
    "error",
)


def _fail(msg: str) -> None:
    print(f"engine_moe_ops: {msg}", file=sys.stderr)
    raise SystemExit(2)


def model_shape(name: str) -> dict[str, int]:
    """Router/expert shape of a capsim preset (capsim/models.py)."""
    sys.path.insert(0, str(REPO))
    from capsim.models import PRESETS

    if name not in PRESETS:
        _fail(f"--model={name!r}: not a capsim preset (choose from {sorted(PRESETS)})")
    m = PRESETS[name]
    return {
        "hidden": m.hidden_size,
        "experts": m.num_experts,
        "topk": m.num_experts_per_tok,
        "inter": m.moe_intermediate_size,
        "shared": m.shared_expert_intermediate_size,
        "moe_layers": m.num_gdn_layers + m.num_attn_layers,
    }


def uses_align(tokens: int, topk: int, experts: int) -> bool:
    """vLLM 0.26 (and 0.33) skip moe_align_block_size when tokens*topk*4 <= experts
    (fused_moe.py ``_prepare_expert_assignment``, naive_block_assignment)."""
    return tokens * topk * 4 > experts


def op_shape(op: str, n: int, s: dict[str, int]) -> str:
    return {
        "topk_softmax": f"logits[{n},{s['experts']}]bf16 k={s['topk']}",
        "moe_align_block_size": f"topk_ids[{n},{s['topk']}]i32 E={s['experts']}",
        "silu_and_mul_experts": f"x[{n * s['topk']},{2 * s['inter']}]bf16",
        "silu_and_mul_shared": f"x[{n},{2 * s['shared']}]bf16",
        "moe_sum": f"x[{n},{s['topk']},{s['hidden']}]bf16",
    }[op]


def plan(tokens: tuple[int, ...], ops: tuple[str, ...], s: dict[str, int]) -> list[dict]:
    return [
        {
            "op": op,
            "impl": impl,
            "tokens": n,
            "shape": op_shape(op, n, s),
            "in_vllm_step": int(
                op != "moe_align_block_size" or uses_align(n, s["topk"], s["experts"])
            ),
        }
        for op in ops
        for n in tokens
        for impl in IMPLS[op]
    ]


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--out", type=Path, help="output folder (CSV + meta JSON)")
    p.add_argument("--model", default="qwen3.5-35b-a3b")
    p.add_argument("--tokens", default=",".join(map(str, TOKENS)))
    p.add_argument("--ops", default=",".join(OPS))
    p.add_argument("--calls", type=int, default=50, help="op calls captured per graph")
    p.add_argument("--replays", type=int, default=30)
    p.add_argument("--budget-s", type=float, default=75.0, help="stop timing after this")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--dry-run", action="store_true")
    a = p.parse_args(argv)
    try:
        a.tokens = tuple(int(t) for t in a.tokens.split(","))
    except ValueError:
        _fail(f"--tokens={a.tokens!r}: comma-separated integers")
    if not a.tokens or min(a.tokens) < 1 or max(a.tokens) > 16384:
        _fail(f"--tokens={a.tokens!r}: each in 1..16384")
    a.ops = tuple(a.ops.split(","))
    bad = [o for o in a.ops if o not in OPS]
    if bad:
        _fail(f"--ops={','.join(bad)!r}: unknown (choose from {','.join(OPS)})")
    for f in ("calls", "replays"):
        if not 1 <= getattr(a, f) <= 10000:
            _fail(f"--{f}={getattr(a, f)}: must be in 1..10000")
    if a.budget_s <= 0:
        _fail(f"--budget-s={a.budget_s}: must be > 0")
    if not a.dry_run and a.out is None:
        _fail("--out: required unless --dry-run")
    return a


def load_standins():
    """kernels/bench/step/standins.py by path (it imports only torch and triton)."""
    path = REPO / "kernels/bench/step/standins.py"
    spec = importlib.util.spec_from_file_location("capsim_standins", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def load_vllm(errors: dict[str, str]):
    """vLLM's ops module (None if it fails to import); errors recorded, never raised."""
    import torch

    ops = None
    try:
        import vllm._custom_ops as ops  # loads _C_stable_libtorch and _moe_C (import_kernels)
    except Exception as e:
        errors["vllm._custom_ops"] = f"{type(e).__name__}: {e}"[:300]
        ops = _load_so_ops(errors)
    if ops is not None and not hasattr(torch.ops._C, "silu_and_mul"):
        errors["torch.ops._C.silu_and_mul"] = "not registered"
    return ops


def _load_so_ops(errors: dict[str, str]):
    """Fallback: vLLM's two libraries loaded by path (no vllm Python import), called with
    the same arguments as ``vllm._custom_ops`` passes them."""
    import types

    import torch

    try:
        for lib in ("_C_stable_libtorch", "_moe_C_stable_libtorch"):
            paths = [Path(d or ".") / "vllm" / f"{lib}.abi3.so" for d in sys.path]
            torch.ops.load_library(str(next(q for q in paths if q.is_file())))
        moe = torch.ops._moe_C
    except Exception as e:
        errors["vllm .so fallback"] = f"{type(e).__name__}: {e}"[:300]
        return None
    errors["vllm_ops_via"] = "torch.ops.load_library fallback"
    return types.SimpleNamespace(
        topk_softmax=lambda w, i, t, x, r: moe.topk_softmax(w, i, t, x, r, None),
        moe_align_block_size=moe.moe_align_block_size,
        moe_sum=lambda x, out: moe.moe_sum(x, out, None, None),
    )


def block_lookup(s: dict[str, int], gpu: str, errors: dict[str, str]):
    """BLOCK_SIZE_M by vLLM 0.26's rule (fused_moe.py get_moe_configs): its tuned file
    ``E=..,N=..,device_name=..json`` in the installed configs/ (nearest batch key) if
    present, else ``default_block``. Verified against vLLM's own function after timing."""
    name = "NVIDIA_H200" if "H200" in gpu else gpu.replace(" ", "_")
    fname = f"E={s['experts']},N={s['inter']},device_name={name}.json"
    try:
        import vllm

        path = Path(vllm.__file__).parent / "model_executor/layers/fused_moe/configs" / fname
        if path.is_file():
            tuned = {int(k): v for k, v in json.loads(path.read_text()).items() if k.isdigit()}
            errors["block_size_source"] = f"tuned file {fname}"
            return lambda n: int(tuned[min(tuned, key=lambda x: abs(x - n))]["BLOCK_SIZE_M"])
    except Exception as e:
        errors["block_size_lookup"] = f"{type(e).__name__}: {e}"[:300]
    errors["block_size_source"] = f"no tuned {fname}: default_block (get_default_config)"
    return default_block


def verify_blocks(s: dict[str, int], tokens: tuple[int, ...], block) -> dict:
    """{tokens: [ours, vLLM's try_get_optimal_moe_config]} or the import error."""
    try:
        from vllm.model_executor.layers.fused_moe.fused_moe import try_get_optimal_moe_config
    except Exception as e:
        return {"error": f"{type(e).__name__}: {e}"[:300]}
    w1 = (s["experts"], 2 * s["inter"], s["hidden"])
    w2 = (s["experts"], s["hidden"], s["inter"])
    return {
        n: [block(n), int(try_get_optimal_moe_config(w1, w2, s["topk"], None, n)["BLOCK_SIZE_M"])]
        for n in tokens
    }


def default_block(n: int) -> int:
    """BLOCK_SIZE_M restated from vLLM 0.26 fused_moe.py get_default_config (bf16, no tuned
    file for E=256,N=512 on the H200); used only when vLLM's own lookup fails."""
    return 16 if n <= 32 else 32 if n <= 96 else 64 if n <= 512 else 128


def time_graph(fn, calls: int, replays: int) -> tuple[float, float]:
    """(p50, min) µs per call of ``fn`` captured ``calls`` times in one CUDA graph."""
    import torch

    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        for _ in range(3):
            fn()
    torch.cuda.current_stream().wait_stream(side)
    torch.cuda.synchronize()
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        for _ in range(calls):
            fn()
    for _ in range(3):
        g.replay()
    torch.cuda.synchronize()
    samples = []
    for _ in range(replays):
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record()
        g.replay()
        b.record()
        b.synchronize()
        samples.append(a.elapsed_time(b) * 1e3 / calls)
    samples.sort()
    return samples[len(samples) // 2], samples[0]


def _align_check(outs: dict, n_flat: int, bs: int) -> str:
    (sv, ev, tv), (ss, es, ts) = outs["vllm"], outs["standin"]
    tot_v, tot_s = int(tv.item()), int(ts.item())
    nb = tot_v // bs
    same_e = bool((ev[:nb] == es[:nb]).all()) if tot_v == tot_s else False
    keys = []
    for sid, eid in ((sv, ev), (ss, es)):
        e = eid[:nb].repeat_interleave(bs).long()
        keys.append(sorted((e * (n_flat + 1) + sid[: nb * bs].long()).tolist()))
    same_ids = int(keys[0] == keys[1])
    return f"post_pad {tot_v}/{tot_s} expert_ids_equal={int(same_e)} ids_equal={same_ids}"


def make_case(op: str, n: int, s: dict, ops, sti, bs: int, gen, dev: str = "cuda"):
    """{impl: callable} on shared inputs, and a check(outs) -> str of the stand-in vs vLLM."""
    import torch
    import torch.nn.functional as F

    bf = torch.bfloat16
    e, k, h = s["experts"], s["topk"], s["hidden"]
    if op == "topk_softmax":
        x = torch.randn((n, e), device=dev, generator=gen).to(bf)
        w, i, t = (
            torch.empty((n, k), device=dev, dtype=d)
            for d in (torch.float32, torch.int32, torch.int32)
        )
        fns = {
            "vllm": lambda: (ops.topk_softmax(w, i, t, x, True), (w, i))[1],
            "standin": lambda: sti.topk_softmax(x, k),
        }

        def check(o):
            (wv, iv), (ws, is_) = o["vllm"], o["standin"]
            differ = int((iv.sort(1).values != is_.sort(1).values).any(1).sum().item())
            dw = (wv.sort(1, descending=True).values - ws.sort(1, descending=True).values).abs()
            # rows whose id sets differ at equal weights are ties of bf16 logits
            w_diff = dw.max().item()
            return f"ids_equal={int(differ == 0)} rows_differ={differ} max_abs_w_diff={w_diff:.3g}"

        return fns, check
    if op == "moe_align_block_size":
        ids = torch.rand((n, e), device=dev, generator=gen).topk(k, dim=1).indices.to(torch.int32)
        cap = ids.numel() + e * (bs - 1)
        cap = min(ids.numel() * bs, cap) if ids.numel() < e else cap
        bufs = {
            im: (
                torch.empty(cap, dtype=torch.int32, device=dev),
                torch.empty(-(-cap // bs), dtype=torch.int32, device=dev),
                torch.empty(1, dtype=torch.int32, device=dev),
            )
            for im in ("vllm", "standin")
        }
        fns = {
            "vllm": lambda: (
                ops.moe_align_block_size(ids, e, bs, *bufs["vllm"], None),
                bufs["vllm"],
            )[1],
            "standin": lambda: (
                sti.moe_align_block_size(ids, e, bs, *bufs["standin"]),
                bufs["standin"],
            )[1],
        }
        return fns, lambda o: _align_check(o, ids.numel(), bs)
    if op.startswith("silu_and_mul"):
        d = s["inter"] if op.endswith("experts") else s["shared"]
        x = torch.randn(
            (n * k if op.endswith("experts") else n, 2 * d), device=dev, generator=gen
        ).to(bf)
        yv, ys = (
            torch.empty((x.shape[0], d), device=dev, dtype=bf),
            torch.empty((x.shape[0], d), device=dev, dtype=bf),
        )
        fns = {
            "vllm": lambda: (torch.ops._C.silu_and_mul(yv, x), yv)[1],
            "standin": lambda: (sti.silu_and_mul(ys, x), ys)[1],
            "torch": lambda: F.silu(x[..., :d]) * x[..., d:],
        }
    else:  # moe_sum
        x = torch.randn((n, k, h), device=dev, generator=gen).to(bf)
        yv, ys = (
            torch.empty((n, h), device=dev, dtype=bf),
            torch.empty((n, h), device=dev, dtype=bf),
        )
        fns = {
            "vllm": lambda: (ops.moe_sum(x, yv), yv)[1],
            "standin": lambda: torch.sum(x, dim=1, out=ys),
        }
    return (
        fns,
        lambda o: (
            f"max_abs_diff={(o['vllm'].float() - o['standin'].float()).abs().max().item():.3g}"
        ),
    )


def run_case(op: str, n: int, s: dict, env: tuple, a: argparse.Namespace, gen) -> list[dict]:
    import torch

    ops, block, sti = env
    bs = block(n)
    base = {
        "op": op,
        "tokens": n,
        "shape": op_shape(op, n, s),
        "block_size": bs,
        "in_vllm_step": int(op != "moe_align_block_size" or uses_align(n, s["topk"], s["experts"])),
        "calls_per_graph": a.calls,
    }
    try:
        fns, check = make_case(op, n, s, ops, sti, bs, gen)
    except Exception as e:
        return [{**base, "impl": im, "error": f"{type(e).__name__}: {e}"[:200]} for im in IMPLS[op]]
    rows, outs = [], {}
    for im in IMPLS[op]:
        row = {**base, "impl": im}
        missing = {"vllm": ops is None, "standin": sti is None}.get(im, False)
        try:
            if missing:
                raise RuntimeError(f"{im} ops not loaded (see meta errors)")
            outs[im] = fns[im]()
            torch.cuda.synchronize()
            row["p50_us"], row["min_us"] = (
                round(v, 3) for v in time_graph(fns[im], a.calls, a.replays)
            )
            row["n_iters"] = a.calls * a.replays
        except Exception as e:
            row["error"] = f"{type(e).__name__}: {e}"[:200]
        rows.append(row)
    if "vllm" in outs and "standin" in outs:
        try:
            rows[1]["check"] = check(outs)
        except Exception as e:
            rows[1]["check"] = f"check failed: {type(e).__name__}: {e}"[:200]
    return rows


def versions() -> dict[str, str]:
    out = {"python": sys.version.split()[0]}
    for name in ("torch", "triton", "vllm"):
        try:
            out[name] = __import__(name).__version__
        except Exception as e:
            out[name] = f"unavailable: {type(e).__name__}"
    return out


def write_atomic(path: Path, text: str) -> None:
    tmp = path.with_suffix(path.suffix + ".tmp")
    tmp.write_text(text)
    os.replace(tmp, path)


def main(argv: list[str] | None = None) -> int:
    a = parse_args(argv)
    s = model_shape(a.model)
    if a.dry_run:
        for row in plan(a.tokens, a.ops, s):
            print(json.dumps(row))
        return 0
    import torch

    if not torch.cuda.is_available():
        _fail("no CUDA device (use --dry-run on the CPU)")
    t0, errors = time.time(), {}
    a.out.mkdir(parents=True, exist_ok=True)
    ops = load_vllm(errors)
    block = block_lookup(s, torch.cuda.get_device_name(0), errors)
    try:
        sti = load_standins()
    except Exception as e:
        sti, errors["standins"] = None, f"{type(e).__name__}: {e}"[:300]
    print(f"[moe_ops] loaded in {time.time() - t0:.1f} s; errors: {errors}", flush=True)
    gen, rows = torch.Generator(device="cuda").manual_seed(a.seed), []
    for op in a.ops:
        for n in a.tokens:
            if time.time() - t0 > a.budget_s:
                rows += [
                    {"op": op, "impl": im, "tokens": n, "error": "skipped: --budget-s"}
                    for im in IMPLS[op]
                ]
                continue
            rows += run_case(op, n, s, (ops, block, sti), a, gen)
            print(
                f"[moe_ops] {time.time() - t0:5.1f} s {op} N={n}: "
                + " ".join(
                    f"{r['impl']}={r.get('p50_us', 'ERR')}" for r in rows[-len(IMPLS[op]) :]
                ),
                flush=True,
            )
    checked = verify_blocks(s, a.tokens, block) if time.time() - t0 < a.budget_s else "skipped"
    print(f"[moe_ops] BLOCK_SIZE_M [ours, vLLM]: {checked}", flush=True)
    buf = io.StringIO()
    w = csv.DictWriter(buf, fieldnames=COLUMNS, lineterminator="\n")
    w.writeheader()
    w.writerows([{c: r.get(c, "") for c in COLUMNS} for r in rows])
    write_atomic(a.out / "moe_ops.csv", buf.getvalue())
    meta = {
        "date_utc": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "versions": versions(),
        "gpu": torch.cuda.get_device_name(0),
        "command": " ".join([Path(sys.argv[0]).name, *(argv or sys.argv[1:])]),
        "model": a.model,
        "shape": s,
        "errors": errors,
        "block_size_check": checked,
        "wall_s": round(time.time() - t0, 1),
        "timing": f"CUDA graph of {a.calls} calls, {a.replays} replays, per call = replay / calls",
        "vllm_calls": VLLM_CALLS,
    }
    write_atomic(a.out / "moe_ops_meta.json", json.dumps(meta, indent=1, sort_keys=True) + "\n")
    print(f"[moe_ops] done in {meta['wall_s']} s: {a.out / 'moe_ops.csv'}", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
