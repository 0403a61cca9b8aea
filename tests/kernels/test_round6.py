"""Round 6's device script: the plan it runs (no kernel is launched here).

Regression tests for the faults of its first device call (2026-12-01): the compile
warm-up keyed windows by their label ('chain' for every T) and so warmed 30 of 373 cells'
compiles; the step-operator child loaded vLLM's files from the default folder instead of
the carried one.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("torch")

from capsim_kernels.bench.gdn import round6
from capsim_kernels.bench.gdn.round6_cells import (
    TP_WINDOWS_FIRST,
    cal_cells,
    main_cells,
    main_shapes,
    p2_cells,
    tp_cells,
)

REPO = Path(__file__).resolve().parents[2]


def test_warm_up_covers_every_compile_once_with_the_union_of_its_kernels():
    phases = round6.WARM_PHASES
    per_b = set(round6.PER_BATCH_KERNELS)
    cells = [c for ph in phases for c in round6.CELLS[ph](False)]
    want: dict = {}
    for c in cells:
        key = round6.warm_key(c, round6.warm_batch(c, False))
        want.setdefault(key, set()).update(set(c.kernels or ()) - per_b)
        # vLLM's ops: one compile per batch size (where the store-all pool is small)
        if per_b & set(c.kernels or ()) and round6._pool_bytes(c) <= round6.WARM_POOL_MAX_BYTES:
            want.setdefault((*round6.warm_key(c, c.batch), "vllm"), set()).update(
                per_b & set(c.kernels)
            )
    want = {k: v for k, v in want.items() if v}
    warm = round6.warm_cells(False, phases)
    got: dict = {}
    for c in warm:
        vllm = set(c.kernels) <= per_b
        key = round6.warm_key(c, c.batch) + (("vllm",) if vllm else ())
        assert key not in got
        got[key] = set(c.kernels)
    assert got == want  # every compile key once, every kernel timed there
    assert {c.batch for c in warm if not set(c.kernels) <= per_b} == {1, 64, 256}
    assert {c.batch for c in warm if set(c.kernels) <= per_b} == {1, 8, 32, 64, 128, 256}
    # priority order: the benchmark's large-batch cells of both shapes come first
    assert {c.shape.name for c in warm[:30]} == {s.name for s in main_shapes(False)}


def test_plan_orders_the_benchmark_batches_first_and_keeps_persistent_apart():
    cells = main_cells(False)
    assert {c.batch for c in cells[:26]} == {256}  # both shapes, every window first
    assert cells[26].phase == "gdn_main_gates09" and cells[26].gate_floor == 0.9
    assert [c.batch for c in cells[27:]] == [64] * 26 + [1] * 26
    assert all("p2" not in k for c in cells for k in c.kernels or ())
    assert {k for c in p2_cells(False) for k in c.kernels} == {
        "treewy_verify_p2",
        "treewy_verify_commit_p2",
    }


def test_tp_phase_gives_every_pair_a_curve_before_more_windows():
    cells = tp_cells(False)
    pairs = {(c.shape.name, c.state_dtype) for c in cells}
    n_first = len(pairs) * 2 * len(TP_WINDOWS_FIRST)
    first = cells[:n_first]
    assert {c.batch for c in first} == {256, 1}
    assert {c.tree.num_nodes for c in first} == set(TP_WINDOWS_FIRST)
    assert {(c.shape.name, c.state_dtype) for c in first} == pairs
    assert {c.tree.num_nodes for c in cells} == set(range(1, 10))
    # 35B TP2 (measured in the first call but for replay) is the last pair
    assert cells[-1].shape.name == "qwen3.5-35b-a3b-tp2"


def test_calibration_phase_times_the_step_models_kernels_only():
    from capsim.commit_modes import MODES

    cells = cal_cells(False)
    assert {c.batch for c in cells} == {8, 32, 128}
    wanted = {k for m in MODES.values() for series in m.kernel_series for k in series}
    timed = {k for c in cells for k in c.kernels}
    assert timed <= wanted | {"vllm_decode"}
    assert {"vllm_storeall", "vllm_decode", "treewy_verify", "treewy_commit", "deferred",
            "replay"} <= timed  # fmt: skip


def test_kcode_variants_run_first_and_their_defaults_are_not_timed_twice():
    from capsim_kernels.bench.gdn.round6_cells import _kernels, kc_cells
    from capsim_kernels.bench.gdn.variants import FAMILIES, VARIANT_KERNELS

    assert round6.PHASE_ORDER[0] == "gdn_kc" and "gdn_kc" in round6.DEFAULT_PHASES
    kc = kc_cells(False)
    names = {k.name for k in _kernels(kc[0])}
    assert {k.name for k in VARIANT_KERNELS} <= names and set(FAMILIES) <= names
    covered = {(c.shape.name, c.tree.parent) for c in kc if c.batch == 256}
    for c in main_cells(False)[:26]:
        both = (c.shape.name, c.tree.parent) in covered
        assert (set(FAMILIES) & set(c.kernels) == set()) == both
        assert {"replay", "vllm_storeall"} <= set(c.kernels)


def test_step_ops_skip_the_classes_already_committed():
    from capsim_kernels.bench.step.round6_ops import committed_classes

    skip = committed_classes()
    assert ("moe", "e256_k8_i512_s512_h2048") in skip  # the 35B TP1 MoE
    # the 397B TP1 shard: never measured (its weights cannot fit one GPU)
    assert ("moe", "e512_k10_i1024_s1024_h4096") not in skip
    assert any(c[0] == "gemm" and isinstance(c[1], int) for c in skip)


def test_vllm_src_follows_the_environment(tmp_path):
    code = "from capsim_kernels.bench import vllm_shim as v; print(v.DEFAULT_SRC)"
    env = {**os.environ, "CAPSIM_VLLM_SRC": str(tmp_path / "carried")}
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True,
                         check=True).stdout.strip()  # fmt: skip
    assert out == str(tmp_path / "carried")


def test_platform_stub_takes_vllms_int_capability(monkeypatch):
    """The 2026-12-02 call lost its FP8 rows: vLLM's FP8 MoE path asks
    ``current_platform.is_device_capability(90)`` and the stub did ``tuple(90)`` (only on a
    GPU: on the CPU the capability is None)."""
    import torch
    from capsim_kernels.bench import vllm_shim

    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "get_device_capability", lambda device=0: (9, 0))
    plat = vllm_shim._Platform()
    assert plat.is_device_capability(90) and plat.is_device_capability((9, 0))
    assert not plat.is_device_capability(100) and not plat.is_device_capability((10, 0))
