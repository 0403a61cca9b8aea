"""Record vLLM's own scheduler, step by step, for one scenario (run in the live venv).

    .venv-live/bin/python experiments/live/trace_vllm.py SCENARIO.json OUT.json

The engine core runs in this process (``VLLM_ENABLE_V1_MULTIPROCESSING=0``); the real
``Scheduler.schedule`` / ``update_from_output`` / ``_preempt_request`` are wrapped (not
changed) to record, for every scheduler step:

    running, waiting, free_blocks (after schedule), scheduled {req: tokens},
    spec {req: drafts scheduled}, preempted [req], admitted [req], emitted {req: tokens},
    finished [req], group_blocks [blocks held per KV-cache group], t_start_s, step_s

Requests arrive by *loop iteration* (``arrival_step``): before iteration i, the requests
whose arrival_step == i are added; then ``LLMEngine.step()`` runs. An iteration in which
the scheduler has no request does not call ``schedule()`` (``EngineCore.step``), so it is
recorded as ``{"iter": i, "idle": true}``. Scenario JSON (written by capsim.live.scenarios)::

    {"name": ..., "model_dir": ..., "engine": {block_size, num_gpu_blocks, max_num_seqs,
     max_num_batched_tokens, max_model_len, enable_chunked_prefill},
     "speculative_config": null | {...}, "requests": [{req_id, prompt_tok, output_tok,
     arrival_step, prompt_ids?}]}

The output JSON also carries what vLLM derived at start-up: the KV-cache groups (spec
kind, block size, number of layers, num_speculative_blocks), num_blocks, the scheduler's
block size, num_lookahead_tokens, async scheduling, the vLLM version, the MambaSpec state
dtypes, the resolved mamba_ssm_cache_dtype and whether the CPU has AVX-512 BF16.
"""

from __future__ import annotations

import json
import os
import sys
import time
import traceback
from pathlib import Path

os.environ.setdefault("VLLM_ENABLE_V1_MULTIPROCESSING", "0")
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("VLLM_NO_USAGE_STATS", "1")
os.environ.setdefault("VLLM_CPU_KVCACHE_SPACE", "1")


def _ext(req_id: str) -> str:
    """vLLM appends '-<8 hex>' to request ids (input_processor.assign_request_id)."""
    return req_id.rsplit("-", 1)[0] if "-" in req_id else req_id


def _prompt_ids(req: dict, vocab: int, seed: int) -> list[int]:
    """Distinct pseudo-random prompts (no prefix sharing) unless the scenario gives ids."""
    if req.get("prompt_ids"):
        return list(req["prompt_ids"])
    import random

    rng = random.Random(f"{seed}:{req['req_id']}")
    # ids 3.. avoid bos/eos/pad (0, 1, 2 in the tiny tokenizer)
    return [rng.randrange(3, vocab) for _ in range(int(req["prompt_tok"]))]


def _group_info(kv_cfg) -> list[dict]:
    groups = []
    for g in kv_cfg.kv_cache_groups:
        spec = g.kv_cache_spec
        groups.append(
            {
                "kind": type(spec).__name__,
                "block_size": int(spec.block_size),
                "num_layers": len(g.layer_names),
                "page_size_bytes": int(spec.page_size_bytes),
                "num_speculative_blocks": int(getattr(spec, "num_speculative_blocks", 0) or 0),
                # MambaSpec: the state tensors' dtypes, e.g. ["bfloat16", "float32"]
                "dtypes": [str(d).removeprefix("torch.") for d in getattr(spec, "dtypes", ())],
            }
        )
    return groups


def _prefix_stats(kv) -> list[int]:
    """Cumulative (queries, hits) token counters of the prefix cache, or [] when off."""
    st = getattr(kv, "prefix_cache_stats", None)
    if st is None:
        return []
    _prefix_totals[0] += int(st.queries)
    _prefix_totals[1] += int(st.hits)
    kv.prefix_cache_stats = type(st)()
    return list(_prefix_totals)


_prefix_totals = [0, 0]


def _engine_kwargs(scenario: dict) -> dict:
    """``LLM(**kwargs)`` for the scenario's engine (eager, seed 0, stats on)."""
    eng = scenario["engine"]
    kwargs = {
        "model": scenario["model_dir"],
        "dtype": "bfloat16",
        "max_model_len": int(eng["max_model_len"]),
        "block_size": int(eng["block_size"]),
        "num_gpu_blocks_override": int(eng["num_gpu_blocks"]),
        "max_num_seqs": int(eng["max_num_seqs"]),
        "max_num_batched_tokens": int(eng["max_num_batched_tokens"]),
        "enable_chunked_prefill": bool(eng.get("enable_chunked_prefill", True)),
        "enable_prefix_caching": bool(eng.get("enable_prefix_caching", False)),
        "enforce_eager": True,
        "seed": 0,
        "disable_log_stats": False,
    }
    if eng.get("mamba_ssm_cache_dtype"):
        kwargs["mamba_ssm_cache_dtype"] = str(eng["mamba_ssm_cache_dtype"])
    if scenario.get("speculative_config"):
        kwargs["speculative_config"] = scenario["speculative_config"]
    return kwargs


def _facts(scenario: dict, core, vllm_version: str) -> dict:  # type: ignore[no-untyped-def]
    """What vLLM derived at start-up (module docstring)."""
    import torch

    sched = core.scheduler
    vllm_cfg = core.vllm_config
    spec_cfg = vllm_cfg.speculative_config
    return {
        "scenario": scenario,
        "vllm_version": vllm_version,
        "pool_num_gpu_blocks": int(sched.kv_cache_manager.block_pool.num_gpu_blocks),
        "scheduler_block_size": int(sched.block_size),
        "groups": _group_info(sched.kv_cache_config),
        "num_lookahead_tokens": int(sched.num_lookahead_tokens),
        "num_spec_tokens": int(getattr(sched, "num_spec_tokens", 0) or 0),
        "spec_method": getattr(spec_cfg, "method", None) if spec_cfg else None,
        "async_scheduling": bool(vllm_cfg.scheduler_config.async_scheduling),
        "max_model_len": int(vllm_cfg.model_config.max_model_len),
        # vLLM's CPU platform resets an "auto" SSM cache dtype to float32 only on a CPU
        # with AVX-512 BF16 (platforms/cpu.py), so the host decides the GDN state page
        "cpu_avx512_bf16": bool(torch.cpu._is_avx512_bf16_supported()),
        "mamba_ssm_cache_dtype": str(vllm_cfg.cache_config.mamba_ssm_cache_dtype),
    }


class _Recorder:
    """Wraps (does not change) the scheduler's ``schedule`` / ``update_from_output`` /
    ``_preempt_request`` / ``_free_request`` and appends one dict per scheduler step to
    ``steps``."""

    def __init__(self, sched, steps: list[dict]) -> None:  # type: ignore[no-untyped-def]
        self.sched = sched
        self.kv = sched.kv_cache_manager
        self.pool = self.kv.block_pool
        self.managers = self.kv.coordinator.single_type_managers
        self.steps = steps
        self.cur: dict = {}
        self.preempted_now: list[str] = []
        # requests that finish are dropped from sched.requests inside update_from_output;
        # remember their output length just before they are freed.
        self.done_len: dict[str, int] = {}
        self.orig_schedule = sched.schedule
        self.orig_update = sched.update_from_output
        self.orig_preempt = sched._preempt_request
        self.orig_free = sched._free_request
        sched.schedule = self.schedule
        sched.update_from_output = self.update
        sched._preempt_request = self.preempt
        sched._free_request = self.free_request

    def preempt(self, request, *a, **k):  # type: ignore[no-untyped-def]
        self.preempted_now.append(_ext(request.request_id))
        return self.orig_preempt(request, *a, **k)

    def free_request(self, request, *a, **k):  # type: ignore[no-untyped-def]
        self.done_len[request.request_id] = request.num_output_tokens
        return self.orig_free(request, *a, **k)

    def schedule(self, *a, **k):  # type: ignore[no-untyped-def]
        sched = self.sched
        self.preempted_now.clear()
        waiting_before = {r.request_id for r in sched.waiting}
        t0 = time.perf_counter()
        out = self.orig_schedule(*a, **k)
        admitted = [_ext(r.request_id) for r in sched.running if r.request_id in waiting_before]
        self.cur.clear()
        self.cur.update(
            t_start_s=t0,
            running=len(sched.running),
            waiting=len(sched.waiting),
            free_blocks=int(self.pool.get_num_free_blocks()),
            scheduled={_ext(r): int(n) for r, n in out.num_scheduled_tokens.items()},
            spec={_ext(r): len(v) for r, v in out.scheduled_spec_decode_tokens.items()},
            preempted=list(self.preempted_now),
            admitted=admitted,
            # prefix-cache hit of each admitted request: what it had computed before
            # its first chunk (num_computed_tokens already includes the chunk here)
            cached={
                _ext(r.request_id): int(r.num_computed_tokens)
                - int(out.num_scheduled_tokens.get(r.request_id, 0))
                for r in sched.running
                if r.request_id in waiting_before
            },
            prefix_stats=_prefix_stats(self.kv),
            group_blocks=[sum(len(b) for b in m.req_to_blocks.values()) for m in self.managers],
            out_before={_ext(r.request_id): r.num_output_tokens for r in sched.running},
        )
        return out

    def update(self, scheduler_output, model_runner_output, *a, **k):  # type: ignore[no-untyped-def]
        res = self.orig_update(scheduler_output, model_runner_output, *a, **k)
        t1 = time.perf_counter()
        cur = self.cur
        before = cur.pop("out_before", {})
        emitted, finished = {}, []
        for rid_int in scheduler_output.num_scheduled_tokens:
            rid = _ext(rid_int)
            req = self.sched.requests.get(rid_int)
            # a request that finished was freed in this update: use its recorded length
            n_after = self.done_len.get(rid_int) if req is None else req.num_output_tokens
            if n_after is not None and n_after - before.get(rid, 0) > 0:
                emitted[rid] = int(n_after - before.get(rid, 0))
            if req is None or req.is_finished():
                finished.append(rid)
        cur.update(emitted=emitted, finished=finished, step_s=t1 - cur["t_start_s"])
        self.steps.append(dict(cur))
        return res


def _drive(engine, scenario: dict, vocab: int, steps: list[dict]) -> tuple[list[dict], float]:  # type: ignore[no-untyped-def]
    """Add each request before its arrival iteration and step the engine until every
    request finished; returns the idle iterations and the wall time."""
    from vllm import SamplingParams
    from vllm.inputs import TokensPrompt

    reqs = sorted(scenario["requests"], key=lambda r: (int(r.get("arrival_step", 0)), r["req_id"]))
    pending = list(reqs)
    iters: list[dict] = []
    it = 0
    max_iters = int(scenario.get("max_iters", 100_000))
    t_begin = time.perf_counter()
    while pending or engine.has_unfinished_requests():
        while pending and int(pending[0].get("arrival_step", 0)) <= it:
            r = pending.pop(0)
            params = SamplingParams(
                max_tokens=int(r["output_tok"]), ignore_eos=True, temperature=0.0
            )
            ids = _prompt_ids(r, vocab, int(scenario.get("seed", 0)))
            engine.add_request(r["req_id"], TokensPrompt(prompt_token_ids=ids), params)
        n_before = len(steps)
        engine.step()
        if len(steps) == n_before:
            iters.append({"iter": it, "idle": True})
        else:
            steps[-1]["iter"] = it
        it += 1
        if it > max_iters:
            raise RuntimeError(f"scenario {scenario['name']}: exceeded max_iters={max_iters}")
    wall_s = time.perf_counter() - t_begin
    for s in steps:
        s["t_start_s"] -= t_begin
    return iters, wall_s


def run(scenario: dict, partial: dict | None = None) -> dict:
    """Run the scenario; ``partial["steps"]`` holds the steps recorded so far (kept when
    the engine fails mid-run, e.g. a CPU kernel error under speculative decoding)."""
    from vllm import LLM
    from vllm import __version__ as vllm_version

    llm = LLM(**_engine_kwargs(scenario))
    engine = llm.llm_engine
    core = engine.engine_core.engine_core
    facts = _facts(scenario, core, vllm_version)
    if partial is not None:
        partial["facts"] = facts
    steps: list[dict] = []
    if partial is not None:
        partial["steps"] = steps
    _Recorder(core.scheduler, steps)
    vocab = int(core.vllm_config.model_config.get_vocab_size())
    iters, wall_s = _drive(engine, scenario, vocab, steps)
    return {
        **facts,
        "num_preemptions": sum(len(s["preempted"]) for s in steps),
        "wall_s": wall_s,
        "steps": steps,
        "idle_iters": iters,
    }


def main() -> int:
    if len(sys.argv) != 3:
        print(__doc__, file=sys.stderr)
        return 2
    scenario = json.loads(Path(sys.argv[1]).read_text())
    out = Path(sys.argv[2])
    partial: dict = {}
    try:
        result = run(scenario, partial)
    except Exception as exc:  # a scenario vLLM cannot run is a result too (e.g. MTP)
        result = {
            "scenario": scenario,
            "error": f"{type(exc).__name__}: {exc}",
            "traceback": traceback.format_exc()[-4000:],
            "partial_steps": partial.get("steps", []),
            **{k: v for k, v in partial.get("facts", {}).items() if k != "scenario"},
        }
    tmp = out.with_suffix(".tmp")
    tmp.write_text(json.dumps(result))
    tmp.rename(out)
    print(f"wrote {out}: " + (result.get("error") or f"{len(result['steps'])} steps"))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
