"""``drift.run_drift``'s rows pinned exactly (interpreter, tiny heads, 3 steps): every
kernel's error per step as printed, the deferred kernel one step behind, and the vLLM
path's bookkeeping (its slots, accepted counts and the truth it is held to) with vLLM's
kernel replaced by a deterministic stand-in. Taken before run_drift was split (session 4,
torch/Triton of this machine: the printed errors are 4 significant digits of interpreter
float math; after a torch/Triton upgrade, regenerate it from a commit that passed)."""

from __future__ import annotations

import hashlib
import json
import os

import pytest
from capsim_kernels.bench.gdn import vllm_storeall
from capsim_kernels.bench.gdn.drift import run_drift
from capsim_kernels.bench.gdn.shapes import ModelShape
from capsim_kernels.gdn_verify.tree import TreeSpec

pytestmark = pytest.mark.skipif(
    os.environ.get("TRITON_INTERPRET") != "1", reason="needs TRITON_INTERPRET=1 (CPU)"
)
TINY = ModelShape("tiny", num_v_heads=2, num_k_heads=1, dk=16, dv=16)


def test_rows_are_pinned(monkeypatch) -> None:  # type: ignore[no-untyped-def]
    seen: list = []

    def make_call(op, q, k, v, gates, pool, slots, num_acc):  # type: ignore[no-untyped-def]
        def call() -> None:
            seen.append(
                (op, num_acc.tolist(), slots.tolist(), [round(float(g.sum()), 4) for g in gates])
            )
            first = pool[slots[:, 0].long()]
            pool[slots.long()] = 0.9 * first.unsqueeze(1) + 0.01 * num_acc.view(-1, 1, 1, 1, 1)

        return call

    monkeypatch.setattr(vllm_storeall, "make_call", make_call)
    rows = []
    for tree in (TreeSpec.chain(3), TreeSpec((2, 1))):
        rows += run_drift(
            TINY, "float32", tree, steps=3, batch=2, seed=5, device="cpu",
            kernels=("treewy", "treewy_deferred", "storeall"), vllm_op="op",
            checkpoints=(1, 2),
        )  # fmt: skip
    assert [(r["kernel"], r["tree"], r["step"]) for r in rows][:7] == [
        ("treewy", "chain", 1), ("storeall", "chain", 1), ("vllm_triton", "chain", 1),
        ("treewy", "chain", 2), ("treewy_deferred", "chain", 2), ("storeall", "chain", 2),
        ("vllm_triton", "chain", 2),
    ]  # fmt: skip
    assert {r["kernel"] for r in rows if r["tree"] != "chain"} == {
        "treewy", "treewy_deferred", "storeall"
    }  # fmt: skip
    assert len(seen) == 3 and seen[0][1] == [1, 1]  # chain only; all accepted-counts 1 at step 1
    digest = hashlib.sha256(
        json.dumps([rows, [s[:3] for s in seen]], sort_keys=True).encode()
    ).hexdigest()[:16]
    assert digest == ROWS_DIGEST, json.dumps(rows)[:3000] + json.dumps(seen)


ROWS_DIGEST = "bf84d83ecc36dfc3"
