"""kcode's launch variants (bench/gdn/variants.py) and the pipelined stream's occupancy
rule (gdn_verify/treewy_pipe.py): the pick of the fastest passing variant, no kernel run."""

from __future__ import annotations

import pytest

pytest.importorskip("torch")

from capsim_kernels.bench.gdn.variants import VARIANT_KERNELS, VARIANTS, best_rows, family
from capsim_kernels.gdn_verify.policy import LaunchPolicy, PipeConfig
from capsim_kernels.gdn_verify.treewy_pipe import occupancy


def _row(kernel, p50, ok="True", contract="True", vt="5e-8", b=256):
    return {
        "kernel": kernel,
        "model_shape": "35b",
        "state_dtype": "float32",
        "tree": "chain",
        "T": "4",
        "B": str(b),
        "p50_us": str(p50),
        "floor_ratio": "1.1",
        "config": "",
        "err_max_req_head": "3e-7",
        "check_ok": ok,
        "contract_ok": contract,
        "vt_err": vt,
    }


def test_best_row_is_the_fastest_that_passes_and_never_worse_than_the_default():
    rows = [
        _row("treewy_verify", 300.0),
        _row("treewy_verify@pipe_a", 150.0, ok="False"),
        _row("treewy_verify@pipe_b", 170.0, vt="1e-3"),
        _row("treewy_verify@pipe_c", 180.0),
        _row("treewy_verify@pipe_d", 400.0),
        _row("deferred", 500.0),
        _row("deferred@pipe_a", 450.0, contract="False"),
        _row("vllm_storeall", 800.0),
    ]
    best = {r["family"]: r for r in best_rows(rows)}
    assert set(best) == {"treewy_verify", "deferred"}
    assert best["treewy_verify"]["best_kernel"] == "treewy_verify@pipe_c"  # a, b failed checks
    assert best["treewy_verify"]["speedup_vs_default"] == round(300 / 180, 3)
    assert best["deferred"]["best_kernel"] == "deferred"  # the variant missed the contract
    assert best["treewy_verify"]["candidates"] == 5 and best["treewy_verify"]["passed"] == 3


def test_variant_names_map_to_their_family_and_policies_leave_the_default_alone():
    names = [k.name for k in VARIANT_KERNELS if k.name != "treewy_prep"]  # the diagnostic
    assert {family(n) for n in names} == {"treewy_verify", "treewy_verify_commit", "deferred"}
    assert all("@" in n for n in names)
    assert LaunchPolicy().pipe_verify is None and LaunchPolicy().pipe_deferred is None
    assert all(p != LaunchPolicy() for p in VARIANTS.values())
    assert VARIANTS["reg168"].stream_config(16, "verify")["maxnreg"] == 168
    assert "maxnreg" not in LaunchPolicy().stream_config(16, "verify")


def test_occupancy_follows_the_sm90_limits():
    # 98 registers, 2 warps, 29.8 KB shared: shared memory limits it to 7 programs
    assert occupancy(98, 29824, 2) == 7
    # 255 registers, 2 warps: 256 x 32 x 2 = 16384 registers per program, 4 per SM
    assert occupancy(255, 1024, 2) == 4
    assert occupancy(32, 0, 1) == 32  # capped by the 32-programs-per-SM limit
    assert occupancy(255, 300_000, 8) == 1  # never 0


def test_pipe_config_rejects_bad_values():
    with pytest.raises(ValueError, match=r"PipeConfig\.stages"):
        PipeConfig(stages=0)
    with pytest.raises(ValueError, match="ctas_per_sm"):
        PipeConfig(ctas_per_sm=-1)


def test_variant_cells_put_t4_b256_first_and_can_be_trimmed():
    from capsim_kernels.bench.gdn.variants import variant_cells

    cells = variant_cells(False, only="")
    assert [(c.tree.num_nodes, c.batch) for c in cells[:2]] == [(4, 256), (4, 256)]
    assert {c.shape.name for c in cells[:2]} == {"qwen3.5-35b-a3b-tp1", "qwen3.5-397b-a17b-tp8"}
    few = variant_cells(False, only="treewy_verify,treewy_verify@pipe_a")
    assert few[0].kernels == ("treewy_verify", "treewy_verify@pipe_a")
    with pytest.raises(ValueError, match="R6_KC_KERNELS"):
        variant_cells(False, only="treewy_verify@nope")


def test_measured_policy_is_the_pipe_d_variant():
    from capsim_kernels.gdn_verify.policy import MEASURED_POLICY_R7

    assert VARIANTS["pipe_d"] == MEASURED_POLICY_R7


def test_session4_measured_policy_is_the_packed_verify_of_pipe_r():
    from capsim_kernels.gdn_verify.policy import MEASURED_POLICY_S4

    assert MEASURED_POLICY_S4.pipe_verify == VARIANTS["pipe_r"].pipe_verify
    assert MEASURED_POLICY_S4.pipe_deferred is None  # deferred: the round-6 kernel (round 8)


def test_session5_measured_policy_takes_the_tma_deferred_of_pipe_x():
    from capsim_kernels.gdn_verify.policy import MEASURED_POLICY_S4, MEASURED_POLICY_S5

    # round 9's deferred rule held for pipe_x only (NOTES.md section 12); verify kept pipe_r
    assert MEASURED_POLICY_S5.pipe_deferred == VARIANTS["pipe_x"].pipe_deferred
    assert MEASURED_POLICY_S5.pipe_deferred.tma and not MEASURED_POLICY_S5.pipe_deferred.slot_ahead
    assert MEASURED_POLICY_S5.pipe_verify == MEASURED_POLICY_S4.pipe_verify


def test_session6_measured_policy_takes_the_two_warp_tma_deferred_of_pipe_zw2():
    from capsim_kernels.gdn_verify.policy import MEASURED_POLICY_S4, MEASURED_POLICY_S6

    # round 10's deferred rule held for pipe_zw2 only (NOTES.md section 14); verify kept pipe_r
    assert MEASURED_POLICY_S6.pipe_deferred == VARIANTS["pipe_zw2"].pipe_deferred
    d = MEASURED_POLICY_S6.pipe_deferred
    assert (d.block_v, d.num_warps, d.tma, d.slot_ahead) == (32, 2, True, False)
    assert MEASURED_POLICY_S6.pipe_verify == MEASURED_POLICY_S4.pipe_verify


def test_session7_measured_policy_takes_the_one_warp_tma_deferred_of_pipe_zw1():
    from capsim_kernels.gdn_verify.policy import MEASURED_POLICY_S6, MEASURED_POLICY_S6B

    # round 11's deferred rule held for pipe_zw1 only (NOTES.md section 16); verify kept pipe_r
    assert MEASURED_POLICY_S6B.pipe_deferred == VARIANTS["pipe_zw1"].pipe_deferred
    d = MEASURED_POLICY_S6B.pipe_deferred
    assert (d.block_v, d.num_warps, d.tma, d.slot_ahead) == (16, 1, True, False)
    assert MEASURED_POLICY_S6B.pipe_verify == MEASURED_POLICY_S6.pipe_verify
