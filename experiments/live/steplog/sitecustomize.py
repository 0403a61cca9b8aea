"""Per-step log of vLLM's engine core, for `capsim live` (loaded only via PYTHONPATH).

vLLM's CPU platform starts the engine core with multiprocessing "spawn", so a patch made
in the launching process would not reach it; a ``sitecustomize`` on PYTHONPATH is
imported by every spawned interpreter. When ``CAPSIM_STEP_LOG`` names a file, the engine
core process appends one JSON line per ``EngineCore.step`` that ran a batch:

    t_unix_s, step_s, num_tok, num_req, num_decode_req, num_prefill_tok,
    decode_ctx_tok (sum), running, waiting, free_blocks, usage, num_preempted, num_spec_tok,
    new_req_ids (requests scheduled for the first time, in scheduling order)

Nothing is changed in vLLM's behaviour: the real methods are wrapped and called.
"""

import importlib.abc
import importlib.util
import json
import os
import sys
import time

_PATH = os.environ.get("CAPSIM_STEP_LOG")


def _patch_scheduler(mod):
    Scheduler = mod.Scheduler
    orig_schedule = Scheduler.schedule
    orig_preempt = Scheduler._preempt_request

    def _preempt_request(self, request, *a, **k):
        self._capsim_preempted = getattr(self, "_capsim_preempted", 0) + 1
        return orig_preempt(self, request, *a, **k)

    def schedule(self, *a, **k):
        self._capsim_preempted = 0
        out = orig_schedule(self, *a, **k)
        n_dec = n_pre_tok = ctx = 0
        for rid, n in out.num_scheduled_tokens.items():
            req = self.requests.get(rid)
            if req is None:
                continue
            before = req.num_computed_tokens - n
            if before >= req.num_tokens - 1:
                n_dec += 1
                ctx += before
            else:
                n_pre_tok += n
        pool = self.kv_cache_manager.block_pool
        self._capsim_stats = {
            "num_tok": int(out.total_num_scheduled_tokens),
            "num_req": len(out.num_scheduled_tokens),
            "num_decode_req": n_dec,
            "num_prefill_tok": n_pre_tok,
            "decode_ctx_tok": ctx,
            "num_spec_tok": sum(len(v) for v in out.scheduled_spec_decode_tokens.values()),
            "running": len(self.running),
            "waiting": len(self.waiting),
            "free_blocks": int(pool.get_num_free_blocks()),
            "usage": float(pool.get_usage()),
            "num_preempted": self._capsim_preempted,
            # first admissions, in order (ids carry the client's X-Request-Id)
            "new_req_ids": [r.req_id for r in out.scheduled_new_reqs],
        }
        return out

    Scheduler.schedule = schedule
    Scheduler._preempt_request = _preempt_request


def _patch_core(mod):
    EngineCore = mod.EngineCore
    orig_step = EngineCore.step
    fh = open(_PATH, "a", buffering=1)  # noqa: SIM115 - lives as long as the process

    def step(self, *a, **k):
        t_unix = time.time()
        t0 = time.perf_counter()
        res = orig_step(self, *a, **k)
        dt = time.perf_counter() - t0
        stats = getattr(self.scheduler, "_capsim_stats", None)
        if stats is not None:
            self.scheduler._capsim_stats = None
            fh.write(json.dumps({"t_unix_s": t_unix, "step_s": dt, **stats}) + "\n")
        return res

    EngineCore.step = step


_TARGETS = {"vllm.v1.core.sched.scheduler": _patch_scheduler, "vllm.v1.engine.core": _patch_core}


class _Finder(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path, target=None):
        if name not in _TARGETS:
            return None
        sys.meta_path.remove(self)
        try:
            spec = importlib.util.find_spec(name)
        finally:
            sys.meta_path.insert(0, self)
        if spec is None or spec.loader is None:
            return None
        loader = spec.loader
        orig_exec = loader.exec_module

        def exec_module(module, _orig=orig_exec, _name=name):
            _orig(module)
            _TARGETS[_name](module)

        loader.exec_module = exec_module
        return spec


if _PATH:
    sys.meta_path.insert(0, _Finder())
