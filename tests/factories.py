"""Keyword factories for tiny, hand-checkable scenarios."""

from __future__ import annotations

import numpy as np

from capsim.core.kv_manager import KVCacheManager, PoolLayout
from capsim.core.request import Request
from capsim.core.scheduler import Scheduler, SchedulerConfig
from capsim.cost.base import BatchShape
from capsim.traces.table import RequestTable


class ConstantStepTime:
    """Every step takes ``step_s`` seconds (a test double for the cost seam)."""

    def __init__(self, step_s: float = 0.01) -> None:
        self.step_s = step_s
        self.shapes: list[BatchShape] = []

    def step_time_s(self, shape: BatchShape) -> float:
        self.shapes.append(shape)
        return self.step_s

    def describe(self) -> dict[str, object]:
        return {"kind": "constant", "step_s": self.step_s}


def create_scheduler(
    *,
    num_blocks: int = 11,
    block_size_tok: int = 4,
    num_gdn_groups: int = 0,
    gdn_slots_per_request: int = 1,
    lookahead_tok: int = 0,
    max_num_seqs: int = 8,
    max_num_batched_tokens: int = 64,
    num_spec_tok: int = 0,
    async_scheduling: bool = False,
) -> Scheduler:
    kv = KVCacheManager(
        PoolLayout(
            block_size_tok=block_size_tok,
            num_blocks=num_blocks,
            num_gdn_groups=num_gdn_groups,
            gdn_slots_per_request=gdn_slots_per_request,
            lookahead_tok=lookahead_tok,
        )
    )
    return Scheduler(
        SchedulerConfig(
            max_num_seqs=max_num_seqs,
            max_num_batched_tokens=max_num_batched_tokens,
            num_spec_tok=num_spec_tok,
            async_scheduling=async_scheduling,
        ),
        kv,
    )


def create_requests(prompts: list[int], outputs: list[int]) -> list[Request]:
    return [
        Request(req_id=f"r{i}", prompt_tok=p, max_output_tok=o, index=i)
        for i, (p, o) in enumerate(zip(prompts, outputs, strict=True))
    ]


def synthetic_table(n: int, seed: int = 0, prompt=(50, 1000), output=(20, 400)) -> RequestTable:  # type: ignore[no-untyped-def]
    rng = np.random.default_rng(seed)
    return RequestTable(
        name="synthetic-test",
        prompt_tok=rng.integers(prompt[0], prompt[1], n),
        output_tok=rng.integers(output[0], output[1], n),
    )


def reference_paths(monkeypatch) -> None:  # type: ignore[no-untyped-def]
    """Every scheduler and engine built from now on takes the reference paths: the
    sequential running loop (``Scheduler.vectorized = False``) and one step per engine
    iteration (``EngineSim.decode_runs = False``)."""
    from capsim.core.scheduler import Scheduler
    from capsim.engine import EngineSim

    sched_init, engine_init = Scheduler.__init__, EngineSim.__init__

    def sequential(self, *a, **kw):  # type: ignore[no-untyped-def]
        sched_init(self, *a, **kw)
        self.vectorized = False

    def step_by_step(self, *a, **kw):  # type: ignore[no-untyped-def]
        engine_init(self, *a, **kw)
        self.decode_runs = False

    monkeypatch.setattr(Scheduler, "__init__", sequential)
    monkeypatch.setattr(EngineSim, "__init__", step_by_step)


def run_keeping_engine(monkeypatch, cfg, **kw):  # type: ignore[no-untyped-def]
    """``simulate(cfg, **kw)`` and the ``EngineSim`` it ran, as it stands after the run
    (to count what a finished run still holds)."""
    import capsim.engine as engine_mod
    from capsim.simulate import simulate

    seen = {}
    real_run = engine_mod.EngineSim.run

    def run(self):  # type: ignore[no-untyped-def]
        real_run(self)
        seen["sim"] = self

    monkeypatch.setattr(engine_mod.EngineSim, "run", run)
    res = simulate(cfg, **kw)
    return res, seen["sim"]


def one_line_error(res, *needles: str) -> str:  # type: ignore[no-untyped-def]
    """A CLI run's answer to bad input (a click ``Result``): a non-zero exit, no traceback,
    one ``Error:`` line and it is the last line, naming every needle. Returns that line."""
    assert res.exit_code != 0, res.output
    assert res.exception is None or isinstance(res.exception, SystemExit), repr(res.exception)
    assert "Traceback" not in res.output, res.output
    errors = [ln for ln in res.output.splitlines() if ln.startswith("Error:")]
    assert len(errors) == 1, res.output
    tail = res.output[res.output.index("Error:") :].strip()
    assert "\n" not in tail, res.output
    for n in needles:
        assert n in tail, (n, tail)
    return tail


def decode_shape(reqs: int, k: int, context_tok: int = 1024) -> BatchShape:
    """A decode-only batch: ``reqs`` requests at ``context_tok`` each, ``1 + k`` query tokens."""
    return BatchShape(
        num_decode_req=reqs,
        query_tok_per_decode=1 + k,
        decode_context_tok=np.full(reqs, context_tok, np.int64),
        prefill_new_tok=np.zeros(0, np.int64),
        prefill_computed_tok=np.zeros(0, np.int64),
    )


def prefill_shape(tok: int, k: int = 3) -> BatchShape:
    """One request's first prefill chunk of ``tok`` tokens (nothing computed), no decodes."""
    return BatchShape(
        num_decode_req=0,
        query_tok_per_decode=1 + k,
        decode_context_tok=np.zeros(0, np.int64),
        prefill_new_tok=np.array([tok]),
        prefill_computed_tok=np.array([0]),
    )
