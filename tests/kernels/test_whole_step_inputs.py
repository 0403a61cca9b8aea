"""``VllmStepStack.step_fn``'s per-step inputs on CPU (nothing launched): the attention
metadata, the GDN layers' inputs, the logit / draft rows and the draft passes that the
returned closure runs with, for six step compositions (chains and trees, decodes,
prefill chunks, both mixed). Pinned by one digest taken from the code before
``step_fn`` was split into helpers (main 5b6e5c9, 2026-12-02)."""

from __future__ import annotations

import hashlib
import json

import torch
from capsim_kernels.bench.step import whole_step as ws

DIGEST_5B6E5C9 = "ebe16ac25835f8a1fe6241ee251f220ee06c1212071866ec652ba35564533511"


class _Shapes:
    hidden = 64


def _stack() -> ws.VllmStepStack:
    """A stack with no weights: ``step_fn`` only builds the step's inputs."""
    o = ws.VllmStepStack.__new__(ws.VllmStepStack)
    o.shp, o.dev, o.gen = _Shapes(), "cpu", torch.Generator().manual_seed(0)
    o.block, o.max_state_slots, o.mtp, o.layers = 16, 10_000, {}, []
    return o


def _plain(v):  # type: ignore[no-untyped-def]
    if isinstance(v, torch.Tensor):
        return ["T", str(v.dtype), list(v.shape), v.flatten().tolist()]
    if isinstance(v, dict):
        return {k: _plain(x) for k, x in sorted(v.items())}
    if isinstance(v, (list, tuple)):
        return [_plain(x) for x in v]
    if isinstance(v, (int, float, str, type(None), bool)):
        return v
    if hasattr(v, "__dict__"):
        return ["obj", type(v).__name__, {k: _plain(x) for k, x in sorted(vars(v).items())}]
    return ["obj", type(v).__name__, repr(v)]


POINTS = (
    ws.StepPoint(4, 100),
    ws.StepPoint(3, 500, tree=(2, 2, 1)),
    ws.StepPoint(0, 0, prefill=((64, 0), (32, 100))),
    ws.StepPoint(2, 40, prefill=((16, 0),)),
    ws.StepPoint(5, 33, depth=1),
    ws.StepPoint(2, 17, tree=(3, 2), prefill=((8, 8),)),
)


def test_step_inputs_are_unchanged() -> None:
    out = []
    for pt in POINTS:
        fn = _stack().step_fn(pt)
        cells = {
            name: c.cell_contents
            for name, c in zip(fn.__code__.co_freevars, fn.__closure__, strict=True)
            if name not in ("self", "draft")
        }
        out.append(_plain(cells))
    text = json.dumps(out, sort_keys=True)
    assert hashlib.sha256(text.encode()).hexdigest() == DIGEST_5B6E5C9
