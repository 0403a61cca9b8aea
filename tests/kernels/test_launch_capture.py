"""The host side of ``treewy_stream.launch_window`` and ``treewy_small.launch_small``,
pinned without running a kernel: every launch they make (which function, its positional
operands by name, its keywords, the grid) is recorded with the downstream launches
stubbed, for each dispatch path (single launch, pipe small, pipe stream with and without
the hoisted pending, persistent, the split stream: verify, fused commit, deferred, replay,
W = 40), and compared with a digest taken before the functions were split (session 4).
The operands are named by identity (inputs by name, tensors made inside in order of first
sight), so a swapped or re-made operand changes the digest."""

from __future__ import annotations

import dataclasses
import hashlib
import json

import torch
from capsim_kernels.gdn_verify import treewy_small, treewy_stream
from capsim_kernels.gdn_verify._jit import dot_precision
from capsim_kernels.gdn_verify.policy import DEFAULT_POLICY, PipeConfig
from gdn_testing import make_window

NO_SMALL = dataclasses.replace(DEFAULT_POLICY, single_launch=False)


class _Names:
    def __init__(self, named: dict) -> None:
        self.by_id = {id(t): n for n, t in named.items()}

    def __call__(self, x):  # type: ignore[no-untyped-def]
        if isinstance(x, torch.Tensor):
            if id(x) not in self.by_id:
                self.by_id[id(x)] = f"new{len(self.by_id)}{tuple(x.shape)}{x.dtype}"
            return self.by_id[id(x)]
        if isinstance(x, tuple | list):
            return [self(y) for y in x]
        if isinstance(x, dict):
            return {k: self(v) for k, v in x.items()}
        if hasattr(x, "fn") or callable(x):
            return getattr(x, "__name__", type(x).__name__)
        return repr(x)


def _inputs(w: int, batch: int = 2, pending_w: int = 0, dim: int = 32) -> dict:
    parent = tuple(range(-1, w - 1))
    win = make_window(parent=parent, batch=batch, dk=dim, dv=dim)
    named = {"q": win.q, "k": win.k, "v": win.v, "log_gate": win.log_gate, "beta": win.beta,
             "pool": win.pool, "slot": win.slot, "parent": win.parent}  # fmt: skip
    if pending_w:
        pw = make_window(parent=tuple(range(-1, pending_w - 1)), batch=batch, seed=1)
        named |= {"pk": pw.k, "pvt": pw.v.float(), "pg": pw.log_gate, "pparent": pw.parent,
                  "paccepted": torch.zeros(batch, dtype=torch.int32)}  # fmt: skip
    named |= {"accepted": torch.zeros(batch, dtype=torch.int32),
              "k_out": win.k.clone(), "g_out": win.log_gate.clone(),
              "flush": torch.ones(batch, dtype=torch.int32)}  # fmt: skip
    return named


def _pending(t: dict) -> tuple:
    return (t["pk"], t["pvt"], t["pg"], t["pparent"], t["paccepted"])


def _window_calls(monkeypatch, t: dict, **kw) -> list:  # type: ignore[no-untyped-def]
    names = _Names(t)
    calls: list = []
    mats = (torch.zeros(1), torch.zeros(2))
    cols = (torch.zeros(3), torch.zeros(4))
    names.by_id |= {id(mats[0]): "mat0", id(mats[1]): "mat1", id(cols[0]): "col0",
                    id(cols[1]): "col1"}  # fmt: skip

    def stub(name: str, ret=None):  # type: ignore[no-untyped-def]
        def f(*args, **kwargs):  # type: ignore[no-untyped-def]
            calls.append([name, names(list(args)), names(kwargs)])
            return ret(kwargs) if ret else None

        return f

    def prep_ret(kwargs):  # type: ignore[no-untyped-def]
        return (mats, cols, "hoisted") if "pending" in kwargs else (mats, cols)

    for fn in ("launch_small", "launch_pipe_small", "launch_pipe_stream",
               "launch_persistent_stream", "launch_split"):  # fmt: skip
        monkeypatch.setattr(treewy_stream, fn, stub(fn))
    monkeypatch.setattr(treewy_stream, "launch_prep", stub("launch_prep", prep_ret))
    o, vt = treewy_stream.launch_window(
        t["q"], t["k"], t["v"], t["log_gate"], t["beta"], t["pool"], t["slot"], t["parent"],
        **kw,
    )  # fmt: skip
    calls.append(["return", names(o), names(vt)])
    return calls


def _window_cases(monkeypatch) -> dict:  # type: ignore[no-untyped-def]
    pipe = PipeConfig()
    cases = {}
    t = _inputs(4)
    cases["small"] = _window_calls(monkeypatch, t, scale=None, store_vt=True)
    cases["split_verify"] = _window_calls(monkeypatch, t, scale=0.3, store_vt=True, policy=NO_SMALL)
    cases["split_no_vt"] = _window_calls(
        monkeypatch, t, scale=None, store_vt=False, policy=NO_SMALL
    )
    cases["split_fused"] = _window_calls(
        monkeypatch, t, scale=None, store_vt=False, accepted=t["accepted"], policy=NO_SMALL
    )
    t = _inputs(4, pending_w=3)
    kw = {"pending": _pending(t), "k_out": t["k_out"], "g_out": t["g_out"]}
    cases["split_deferred"] = _window_calls(
        monkeypatch, t, scale=None, store_vt=True, policy=NO_SMALL, **kw
    )
    cases["split_replay"] = _window_calls(
        monkeypatch, t, scale=None, store_vt=False, policy=NO_SMALL, replay_flush=t["flush"], **kw
    )
    cases["small_deferred"] = _window_calls(monkeypatch, t, scale=None, store_vt=True, **kw)
    for name, p in {
        "pipe_small": dataclasses.replace(pipe, fused_window=True),
        "pipe_stream": pipe,
        "pipe_stage1": dataclasses.replace(pipe, pending_in_stage1=True, maxnreg=128),
    }.items():
        pol = dataclasses.replace(NO_SMALL, pipe_verify=p, pipe_deferred=p)
        cases[name] = _window_calls(monkeypatch, t, scale=None, store_vt=True, policy=pol)
        cases[name + "_deferred"] = _window_calls(
            monkeypatch, t, scale=None, store_vt=True, policy=pol, **kw
        )
    t = _inputs(4)
    pol = dataclasses.replace(NO_SMALL, persistent_ctas_per_sm=2)
    cases["persistent"] = _window_calls(monkeypatch, t, scale=None, store_vt=True, policy=pol)
    t = _inputs(40)
    cases["w40"] = _window_calls(monkeypatch, t, scale=None, store_vt=True)
    vt = torch.empty(t["v"].shape, dtype=torch.float32)
    out = torch.empty_like(t["v"])
    cases["w40_given_out"] = _window_calls(
        monkeypatch, t | {"vt": vt, "out": out}, scale=None, store_vt=True, vt=vt, out=out
    )
    return cases


class _Kernel:
    def __init__(self, calls: list, names: _Names) -> None:
        self.calls, self.names = calls, names

    def __getitem__(self, grid):  # type: ignore[no-untyped-def]
        def launch(*args, **kwargs):  # type: ignore[no-untyped-def]
            self.calls.append([list(grid), self.names(list(args)), self.names(kwargs)])

        return launch


def _small_calls(monkeypatch, t: dict, **kw) -> list:  # type: ignore[no-untyped-def]
    names = _Names(t)
    calls: list = []
    monkeypatch.setattr(treewy_small, "treewy_small_kernel", _Kernel(calls, names))
    prec = dot_precision(t["pool"].dtype, t["q"].dtype, None, "cpu")
    o = torch.empty_like(t["v"])
    names.by_id[id(o)] = "o"
    treewy_small.launch_small(
        t["q"], t["k"], t["v"], t["log_gate"], t["beta"], t["pool"], t["slot"], t["parent"],
        num_heads=(t["q"].shape[2], t["v"].shape[2]), scale=0.25, o=o, prec=prec, **kw,
    )  # fmt: skip
    return calls


def _small_cases(monkeypatch) -> dict:  # type: ignore[no-untyped-def]
    cases = {}
    t = _inputs(4)
    cases["verify"] = _small_calls(monkeypatch, t, vt=None)
    cases["verify_vt"] = _small_calls(monkeypatch, t, vt=t["k_out"])
    cases["fused"] = _small_calls(monkeypatch, t, vt=None, accepted=t["accepted"])
    cases["config"] = _small_calls(
        monkeypatch, t, vt=None, config={"block_v": 16, "early_s": True, "num_warps": 8}
    )
    t = _inputs(12, pending_w=5)
    kw = {"pending": _pending(t), "k_out": t["k_out"], "g_out": t["g_out"]}
    cases["deferred_w12"] = _small_calls(monkeypatch, t, vt=None, **kw)
    cases["replay"] = _small_calls(monkeypatch, t, vt=None, replay_flush=t["flush"], **kw)
    t = _inputs(4, batch=16385, dim=4)  # 65,540 programs: two grid chunks
    cases["two_chunks"] = _small_calls(monkeypatch, t, vt=None)
    return cases


def _digest(cases: dict) -> str:
    return hashlib.sha256(json.dumps(cases, sort_keys=True).encode()).hexdigest()[:16]


def test_launch_window_paths(monkeypatch) -> None:  # type: ignore[no-untyped-def]
    cases = _window_cases(monkeypatch)
    first = {name: [c[0] for c in calls] for name, calls in cases.items()}
    assert first == {
        "small": ["launch_small", "return"],
        "split_verify": ["launch_prep", "launch_split", "return"],
        "split_no_vt": ["launch_prep", "launch_split", "return"],
        "split_fused": ["launch_prep", "launch_split", "return"],
        "split_deferred": ["launch_prep", "launch_split", "return"],
        "split_replay": ["launch_prep", "launch_split", "return"],
        "small_deferred": ["launch_small", "return"],
        "pipe_small": ["launch_pipe_small", "return"],
        "pipe_small_deferred": ["launch_pipe_small", "return"],
        "pipe_stream": ["launch_prep", "launch_pipe_stream", "return"],
        "pipe_stream_deferred": ["launch_prep", "launch_pipe_stream", "return"],
        "pipe_stage1": ["launch_prep", "launch_pipe_stream", "return"],
        "pipe_stage1_deferred": ["launch_prep", "launch_pipe_stream", "return"],
        "persistent": ["launch_prep", "launch_persistent_stream", "return"],
        "w40": ["launch_prep", "launch_split", "return"],
        "w40_given_out": ["launch_prep", "launch_split", "return"],
    }
    assert _digest(cases) == WINDOW_DIGEST, json.dumps(cases, sort_keys=True)[:4000]


def test_launch_small_grids(monkeypatch) -> None:  # type: ignore[no-untyped-def]
    cases = _small_cases(monkeypatch)
    assert [len(c) for c in cases.values()] == [1, 1, 1, 1, 1, 1, 2]
    assert _digest(cases) == SMALL_DIGEST, json.dumps(cases, sort_keys=True)[:4000]


# session 5: 604149cf67b13a35 -> 3de6243a9d3dd5a3, only from the new default-off PipeConfig
# fields (launch_pipe_stream's tma=False, slot_ahead=False keywords and the policy repr):
# with those two removed from the recorded cases the digest is 604149cf67b13a35 again
# session 13 (round 12): 3de6243a9d3dd5a3 -> 45b5aa0bc848dadc, only from the new default-off
# PipeConfig field early_rows (launch_pipe_stream's early_rows=False keyword and the policy repr):
# with it removed from the recorded cases the cases equal f30800d's, digest 3de6243a9d3dd5a3
WINDOW_DIGEST = "45b5aa0bc848dadc"
SMALL_DIGEST = "b14acea4bf51a59f"
