"""Per-step log of a real vLLM engine core on a GPU (vLLM 0.26, async scheduling).

Loaded only through PYTHONPATH when the engine runner is asked for a step log
(``ServerSpec.step_log``); every interpreter vLLM spawns imports it. When
``CAPSIM_STEP_LOG`` names a file, the engine core appends one JSON line per batch whose
output the scheduler consumed (``Scheduler.update_from_output``):

    t_sched_s, t_done_s (time.perf_counter of schedule() returning and of the output being
    consumed), t_unix_s, num_tok, num_req, num_decode_req, num_prefill_tok, decode_ctx_tok,
    num_spec_tok, running, waiting, free_blocks, usage, num_preempted, num_new_req

With async scheduling vLLM keeps up to two batches in flight, so the step *period* is the
gap between consecutive ``t_done_s`` and a batch's latency is ``t_done_s - t_sched_s``.
While the file named by ``CAPSIM_STEP_LOG_OFF`` exists nothing is measured or written (the
runner creates it for a bench with ``bench.step_log = false``: the same server then serves
paired runs with and without the log). vLLM's behaviour is unchanged: the real methods are
wrapped and called. Written for vLLM
0.26.0's ``vllm/v1/core/sched/scheduler.py`` (``schedule``, ``update_from_output``,
``_preempt_request``); a sitecustomize later on sys.path is still executed.
"""

import importlib.abc
import importlib.util
import json
import os
import sys
import time

_PATH = os.environ.get("CAPSIM_STEP_LOG")
_OFF = os.environ.get("CAPSIM_STEP_LOG_OFF")
_TARGET = "vllm.v1.core.sched.scheduler"


def _stats(sched, out):
    n_dec = n_pre_tok = ctx = 0
    for rid, n in out.num_scheduled_tokens.items():
        req = sched.requests.get(rid)
        if req is None:
            continue
        before = req.num_computed_tokens - n
        if before >= req.num_tokens - 1:
            n_dec += 1
            ctx += before
        else:
            n_pre_tok += n
    pool = sched.kv_cache_manager.block_pool
    return {
        "num_tok": int(out.total_num_scheduled_tokens),
        "num_req": len(out.num_scheduled_tokens),
        "num_decode_req": n_dec,
        "num_prefill_tok": n_pre_tok,
        "decode_ctx_tok": ctx,
        "num_spec_tok": sum(len(v) for v in out.scheduled_spec_decode_tokens.values()),
        "running": len(sched.running),
        "waiting": len(sched.waiting),
        "free_blocks": int(pool.get_num_free_blocks()),
        "usage": float(pool.get_usage()),
        "num_preempted": getattr(sched, "_capsim_preempted", 0),
        "num_new_req": len(out.scheduled_new_reqs),
    }


def _patch(mod):
    scheduler_cls = mod.Scheduler
    orig_schedule = scheduler_cls.schedule
    orig_update = scheduler_cls.update_from_output
    orig_preempt = scheduler_cls._preempt_request
    fh = open(_PATH, "a", buffering=1)  # noqa: SIM115 - lives as long as the process

    def _preempt_request(self, *a, **k):
        self._capsim_preempted = getattr(self, "_capsim_preempted", 0) + 1
        return orig_preempt(self, *a, **k)

    def schedule(self, *a, **k):
        self._capsim_preempted = 0
        out = orig_schedule(self, *a, **k)
        if _OFF and os.path.exists(_OFF):
            return out
        pending = self.__dict__.setdefault("_capsim_pending", {})
        if out.total_num_scheduled_tokens:
            pending[id(out)] = (time.perf_counter(), _stats(self, out))
        return out

    def update_from_output(self, scheduler_output, *a, **k):
        res = orig_update(self, scheduler_output, *a, **k)
        got = self.__dict__.get("_capsim_pending", {}).pop(id(scheduler_output), None)
        if got is not None:
            t_sched, stats = got
            row = {
                "t_sched_s": t_sched,
                "t_done_s": time.perf_counter(),
                "t_unix_s": time.time(),
                **stats,
            }
            fh.write(json.dumps(row) + "\n")
        return res

    scheduler_cls.schedule = schedule
    scheduler_cls.update_from_output = update_from_output
    scheduler_cls._preempt_request = _preempt_request


class _Finder(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path, target=None):
        if name != _TARGET:
            return None
        sys.meta_path.remove(self)
        try:
            spec = importlib.util.find_spec(name)
        finally:
            sys.meta_path.insert(0, self)
        if spec is None or spec.loader is None:
            return None
        orig_exec = spec.loader.exec_module

        def exec_module(module, _orig=orig_exec):
            _orig(module)
            _patch(module)

        spec.loader.exec_module = exec_module
        return spec


def _chain_next_sitecustomize():
    """Run the sitecustomize this one shadows (the next one on sys.path), if any."""
    here = os.path.dirname(os.path.abspath(__file__))
    for entry in sys.path:
        cand = os.path.join(entry or ".", "sitecustomize.py")
        if os.path.abspath(entry or ".") != here and os.path.isfile(cand):
            with open(cand) as f:
                exec(compile(f.read(), cand, "exec"), {"__name__": "sitecustomize_next"})
            return


if _PATH:
    sys.meta_path.insert(0, _Finder())
_chain_next_sitecustomize()
