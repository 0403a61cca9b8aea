"""The fast paths give exactly the reference path's results.

Fast: the running batch scheduled at once (``Scheduler.vectorized``) and runs of
decode-only steps planned at once (``EngineSim.decode_runs``, ``core/decode_run.py``),
through finishes once nothing is left to send (the drain).
Reference: the sequential running loop, one step per engine iteration. Every request
timestamp, every step row and every summary number must be identical.
"""

from __future__ import annotations

import dataclasses
import math

import pandas as pd
import pytest
from factories import reference_paths, synthetic_table

from capsim.config import EngineConfig, LoadConfig, SimConfig, SpecDecodeConfig
from capsim.core import decode_run, scheduler
from capsim.simulate import simulate
from capsim.traces.table import RequestTable


def _cfg(workload: str, *, gmu: float = 0.9, n: int = 300, conc: int = 128, **kw) -> SimConfig:  # type: ignore[no-untyped-def]
    spec = kw.pop("spec", SpecDecodeConfig(commit="storeall"))
    load = kw.pop("load", LoadConfig(concurrency=conc, num_requests=n))
    # prefix caching off unless a case asks (vLLM 0.33's default turns it on)
    engine = kw.pop("engine", EngineConfig(gmu=gmu, enable_prefix_caching=False))
    return SimConfig(
        workload=workload,
        engine=engine,
        spec=spec,
        load=load,
        step_time="calibrated",
        **{"gpu": "B200", **kw},  # the published GPU these cases were sized on
    )


CASES: dict[str, SimConfig] = {
    # sync: the cool-down drains through finishes (async holds a finished request's blocks
    # one step, so its runs stop before each finish)
    "sharegpt-c256": _cfg(
        "sharegpt",
        n=600,
        conc=256,
        engine=EngineConfig(gmu=0.9, async_scheduling=False, enable_prefix_caching=False),
    ),
    "sharegpt-c256-async": _cfg(
        "sharegpt",
        n=600,
        conc=256,
        engine=EngineConfig(gmu=0.9, async_scheduling=True, enable_prefix_caching=False),
    ),
    "deferred": _cfg("spec-bench", spec=SpecDecodeConfig(commit="deferred"), conc=32),
    "tree-2,2,1": _cfg(
        "sharegpt", spec=SpecDecodeConfig(commit="reconstruct", tree_widths=(2, 2, 1)), conc=64
    ),
    "preemption-gmu0.6": _cfg("synthetic-generation-heavy", gmu=0.6, n=320, conc=256),
    "prefix-caching": _cfg(
        "shared-prefix", engine=EngineConfig(gmu=0.6, enable_prefix_caching=True), conc=64
    ),
    # prefix caching on: hits on a shared system prompt, preemptions and evictions in a
    # small pool, turns restarting from checkpoints with pending blocks, chunked prefills
    "prefix-caching-small-pool": _cfg(
        "sharegpt+sys=4,2500",
        engine=EngineConfig(enable_prefix_caching=True, num_gpu_blocks_override=150),
        n=160,
        conc=48,
    ),
    "prefix-caching-multiturn-deferred": _cfg(
        "sharegpt-multiturn+sys=2,2500",
        engine=EngineConfig(enable_prefix_caching=True),
        spec=SpecDecodeConfig(commit="deferred"),
        n=200,
        conc=24,
    ),
    "prefix-caching-chunked-no-spec": dataclasses.replace(
        _cfg(
            "sharegpt",
            engine=EngineConfig(
                enable_prefix_caching=True, max_num_batched_tokens=512, max_num_seqs=64
            ),
            n=120,
            conc=32,
        ),
        spec=SpecDecodeConfig(num_spec_tok=0),
    ),
    "no-speculation": dataclasses.replace(
        _cfg("sharegpt", conc=16, n=64), spec=SpecDecodeConfig(num_spec_tok=0), step_time="roofline"
    ),
    "open-loop": _cfg(
        "burstgpt-standin",
        gmu=0.75,
        load=LoadConfig(mode="rate", rate_req_per_s=16.0, num_requests=200),
    ),
}


def _reference_paths(monkeypatch: pytest.MonkeyPatch) -> None:
    reference_paths(monkeypatch)


def _count_runs(monkeypatch: pytest.MonkeyPatch) -> list[tuple[int, int, int]]:
    """(planned steps, steps with unlimited free blocks, requests finished in the run) of
    every decode run planned."""
    runs: list[tuple[int, int, int]] = []
    plan = decode_run.plan_decode_run

    def counting(cols, slots, draws, lim, *a):  # type: ignore[no-untyped-def]
        run = plan(cols, slots, draws, lim, *a)
        if run is not None:
            roomy = plan(cols, slots, draws, dataclasses.replace(lim, free_blocks=1 << 40), *a)
            finished = int((run.finish_step < run.num_steps).sum())
            runs.append((run.num_steps, roomy.num_steps if roomy else 0, finished))
        return run

    monkeypatch.setattr(scheduler, "plan_decode_run", counting)
    return runs


def _assert_same(fast, ref) -> None:  # type: ignore[no-untyped-def]
    pd.testing.assert_frame_equal(fast.requests, ref.requests, check_exact=True)
    pd.testing.assert_frame_equal(fast.steps, ref.steps, check_exact=True)
    assert fast.summary.keys() == ref.summary.keys()
    for key, a in fast.summary.items():
        b = ref.summary[key]
        same = a == b or (isinstance(a, float) and math.isnan(a) and math.isnan(b))
        assert same, f"summary {key}: fast {a!r} != reference {b!r}"


@pytest.mark.parametrize("case", sorted(CASES))
def test_fast_paths_equal_reference(monkeypatch: pytest.MonkeyPatch, case: str) -> None:
    cfg = CASES[case]
    runs = _count_runs(monkeypatch)
    fast = simulate(cfg)
    assert runs, "the scenario never plans a decode-only run"
    if case == "sharegpt-c256":  # the cool-down drains in runs that finish requests
        assert sum(f for _, _, f in runs) > 100
    with monkeypatch.context() as m:
        _reference_paths(m)
        ref = simulate(cfg)
    _assert_same(fast, ref)
    if case in ("preemption-gmu0.6", "prefix-caching-small-pool"):
        assert fast.summary["num_preemptions"] > 0
    if case.startswith("prefix-caching-") and "chunked" not in case:
        assert fast.summary["prefix_cache_hits_tok"] > 0


def test_run_cut_by_the_pool(monkeypatch: pytest.MonkeyPatch) -> None:
    """Six long requests in a pool that cannot hold their growth: a planned run stops
    before the step that would preempt, and the preemptions still happen as step by step."""
    table = RequestTable(name="t", prompt_tok=[1000] * 6, output_tok=[3000] * 6)
    cfg = SimConfig(
        gpu="B200",
        engine=EngineConfig(gmu=0.9, num_gpu_blocks_override=80, enable_prefix_caching=False),
        spec=SpecDecodeConfig(commit="storeall"),
        load=LoadConfig(concurrency=6, num_requests=6),
        step_time="calibrated",
    )
    runs = _count_runs(monkeypatch)
    fast = simulate(cfg, workload=table)
    assert any(n < roomy for n, roomy, _ in runs), "no run was cut by the pool"
    assert fast.summary["num_preemptions"] > 0
    with monkeypatch.context() as m:
        _reference_paths(m)
        ref = simulate(cfg, workload=table)
    _assert_same(fast, ref)


def test_varied_lengths_small_budget(monkeypatch: pytest.MonkeyPatch) -> None:
    """Mixed prompts and outputs, a 2,048-token budget (chunked prefill every step)."""
    table = synthetic_table(120, seed=3, prompt=(20, 5000), output=(5, 700))
    cfg = SimConfig(
        gpu="B200",
        engine=EngineConfig(gmu=0.6, max_num_batched_tokens=2048, enable_prefix_caching=False),
        spec=SpecDecodeConfig(commit="reconstruct"),
        load=LoadConfig(concurrency=48, num_requests=120),
        seed=9,
    )
    runs = _count_runs(monkeypatch)
    fast = simulate(cfg, workload=table)
    assert runs
    with monkeypatch.context() as m:
        _reference_paths(m)
        ref = simulate(cfg, workload=table)
    _assert_same(fast, ref)


@pytest.mark.parametrize("num_rows", [0, 1, 2, 3, 17, 1000, 17400])
@pytest.mark.parametrize("seed", [0, 1, 12345])
def test_inlined_shuffle_is_random_shuffle(num_rows: int, seed: int) -> None:
    import random

    from capsim.traces.sampling import vllm_shuffled_order

    ref = list(range(num_rows))
    random.Random(seed).shuffle(ref)
    assert vllm_shuffled_order(num_rows, seed) == ref


def _rows_one_by_one(path, ints, floats) -> list[dict]:
    import csv

    from capsim.calibration.tables import _typed

    with path.open(newline="") as fh:
        return [_typed(r, ints, floats, "ref") for r in csv.DictReader(fh)]


@pytest.mark.parametrize(
    "role, ints, floats",
    [
        ("model_step", "OP_INT_FIELDS", "OP_FLOAT_FIELDS"),
        ("gdn_verify", "GDN_INT_FIELDS", "GDN_FLOAT_FIELDS"),
        ("model_step_validation", "VAL_INT_FIELDS", None),
    ],
)
def test_column_typed_rows_match_row_by_row(role: str, ints: str, floats: str | None) -> None:
    from capsim.calibration import tables as T

    i_f = getattr(T, ints)
    f_f = getattr(T, floats) if floats else ("p50_us",)
    path = T.DATA_DIR / f"h200_{role}.csv"
    fast, ref = T.read_rows(path, i_f, f_f), _rows_one_by_one(path, i_f, f_f)
    assert [list(r.items()) for r in fast] == [list(r.items()) for r in ref]
    assert [[type(v) for v in r.values()] for r in fast] == [
        [type(v) for v in r.values()] for r in ref
    ]


@pytest.mark.parametrize(
    "body, where",
    [
        ("a,b\n1,2\n3,x\n", "row 3: column b='x' is not a number"),
        ("a,b\n1,2\n3,-1\n", "row 3: column b='-1' must be finite"),
        ("a,b\n1,2\nnan,1\n", "row 3: column a='nan' is not an int"),
        ("a,b\n1,2\ninf,1\n", None),
    ],
)
def test_column_typing_falls_back_to_row_errors(tmp_path, body: str, where: str | None) -> None:
    from capsim.calibration.tables import read_rows

    path = tmp_path / "t.csv"
    path.write_text(body)
    # as before the column path: int(float('inf')) raises OverflowError from the row path
    with pytest.raises(ValueError if where else OverflowError) as err:
        read_rows(path, ("a",), ("b",))
    if where is not None:
        assert where in str(err.value)


def test_request_many_is_the_constructor_per_row() -> None:
    from capsim.core.request import Request

    prompt, out, seg = [5, 1, 300], [2, 9, 1], (None, ((7, 4),), None)
    many = Request.many(prompt, out, seg)
    one = [
        Request(req_id=f"r{i}", prompt_tok=p, max_output_tok=o, index=i, segments=s)
        for i, (p, o, s) in enumerate(zip(prompt, out, seg, strict=True))
    ]
    for a, b in zip(many, one, strict=True):
        assert {k: getattr(a, k) for k in Request.__slots__} == {
            k: getattr(b, k) for k in Request.__slots__
        }
        assert list(a._own.items()) == list(b._own.items())


def test_request_many_names_the_first_bad_row() -> None:
    from capsim.core.request import Request

    with pytest.raises(ValueError, match=r"request r1: max_output_tok=0 must be >= 1"):
        Request.many([3, 4, 0], [1, 0, 5], (None, None, None))


@pytest.mark.parametrize(
    "spec, tp, gpu, model",
    [
        (SpecDecodeConfig(commit="storeall"), 1, "H200", "qwen3.5-35b-a3b"),
        (SpecDecodeConfig(commit="reconstruct"), 1, "B200", "qwen3.5-35b-a3b"),
        (SpecDecodeConfig(num_spec_tok=4, tree_widths=(2, 2, 1)), 1, "H200", "qwen3.5-35b-a3b"),
        (SpecDecodeConfig(commit="storeall"), 8, "H200", "qwen3.5-397b-a17b"),  # all-reduce
    ],
)
def test_memoised_step_price_is_the_reference_price(spec, tp: int, gpu: str, model: str) -> None:  # type: ignore[no-untyped-def]
    import numpy as np

    from capsim.cost.base import BatchShape
    from capsim.cost.factory import build_step_time_model
    from capsim.gpus import get_gpu
    from capsim.models import get_model

    cfg = SimConfig(
        workload="sharegpt",
        model=model,
        engine=EngineConfig(tp=tp),
        spec=spec,
        gpu=gpu,
        step_time="calibrated",
    )
    cost = build_step_time_model(cfg, get_model(cfg.model), get_gpu(cfg.gpu))
    rng = np.random.default_rng(0)
    w = spec.window_tok
    checked = 0
    for _ in range(400):  # repeated counts hit the memo, varied contexts miss nothing
        r_dec = int(rng.integers(0, 9)) * 16
        n_chunks = int(rng.integers(0, 3))
        shape = BatchShape(
            num_decode_req=r_dec,
            query_tok_per_decode=w,
            decode_context_tok=rng.integers(1, 6000, r_dec),
            prefill_new_tok=rng.integers(1, 2, n_chunks) * int(rng.choice([64, 512])),
            prefill_computed_tok=rng.integers(0, 3000, n_chunks),
        )
        if r_dec == 0 and n_chunks == 0:
            continue
        try:
            ref = cost._price(shape, None, True)
        except ValueError:
            continue
        assert cost.step_time_s(shape) == ref
        checked += 1
    assert checked > 300
