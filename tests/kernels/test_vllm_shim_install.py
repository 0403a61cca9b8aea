"""``vllm_shim.install`` pinned (CPU, vLLM's files from CAPSIM_VLLM_SRC or
.vllmwheel/src): the modules it puts in ``sys.modules``, each stand-in module's names, the
packages' search paths, the small vLLM rules it re-implements, idempotence, and the error
without vLLM's files. Written before install was split (session 4)."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest
import torch
from capsim_kernels.bench import vllm_shim

SRC = Path(
    os.environ.get("CAPSIM_VLLM_SRC", Path(__file__).resolve().parents[2] / ".vllmwheel" / "src")
)
needs_src = pytest.mark.skipif(not (SRC / "vllm").is_dir(), reason="vLLM files not extracted")


@pytest.fixture
def shim(monkeypatch):  # type: ignore[no-untyped-def]
    saved = {n: m for n, m in sys.modules.items() if n == "vllm" or n.startswith("vllm.")}
    yield
    for n in [n for n in sys.modules if n == "vllm" or n.startswith("vllm.")]:
        del sys.modules[n]
    sys.modules.update(saved)


def test_without_files_it_refuses(tmp_path, shim) -> None:  # type: ignore[no-untyped-def]
    with pytest.raises(FileNotFoundError, match="no vLLM files; run python3 -m capsim_kernels"):
        vllm_shim.install(tmp_path)


@needs_src
def test_modules_and_names(shim) -> None:  # type: ignore[no-untyped-def]
    vllm_shim.install(SRC)
    src = str(SRC.resolve())
    mods = {n: m for n, m in sys.modules.items() if n == "vllm" or n.startswith("vllm.")}
    assert sys.modules["vllm"]._capsim_shim == src
    stand_ins = {n: sorted(k for k in vars(m) if not k.startswith("__"))
                 for n, m in mods.items() if getattr(m, "__file__", None) is None}  # fmt: skip
    paths = {n: [os.path.relpath(p, src) for p in m.__path__] for n, m in mods.items()
             if getattr(m, "__file__", None) is None and hasattr(m, "__path__")}  # fmt: skip
    loaded = sorted(n for n, m in mods.items() if getattr(m, "__file__", None) is not None)
    assert loaded == [
        "vllm.model_executor.layers.fused_moe.activation",
    ], loaded
    assert paths["vllm"] == ["vllm"]
    assert paths["vllm.model_executor.warmup"] == ["vllm/model_executor/warmup"]
    assert len(paths) == 17
    assert stand_ins["vllm.envs"] == [
        "VLLM_BATCH_INVARIANT", "VLLM_TRITON_FORCE_FIRST_CONFIG",
        "VLLM_TRITON_JIT_WARMUP_NUM_THREADS", "VLLM_TUNED_CONFIG_FOLDER", "is_set",
    ]  # fmt: skip
    moe = "vllm.model_executor.layers.fused_moe."
    want = {
        "vllm.logger": ["init_logger"],
        "vllm.platforms": ["current_platform"],
        "vllm.triton_utils": ["HAS_TRITON", "allocation", "tl", "tldevice", "triton"],
        "vllm.triton_utils.allocation": ["set_triton_allocator"],
        "vllm._custom_ops": ["moe_align_block_size", "moe_sum"],
        "vllm.utils.platform_utils": ["get_device_name_as_file_name", "num_compute_units"],
        "vllm.utils.torch_utils": ["async_tensor_h2d", "direct_register_custom_op"],
        "vllm.utils.gpu_sync_debug": ["gpu_sync_allowed"],
        "vllm.v1.kv_cache_interface": ["KVQuantMode"],
        "vllm.v1.attention.backends.utils": ["NULL_BLOCK_ID", "PAD_SLOT_ID"],
        moe + "config": ["FUSED_MOE_UNQUANTIZED_CONFIG", "FusedMoEQuantConfig",
                         "_get_config_dtype_str"],
        moe + "utils": ["enable_swap_ab", "moe_kernel_quantize_input", "resolve_moe_use_td",
                        "warn_if_moe_use_td_ineffective"],
        moe + "modular_kernel": ["FusedMoEExpertsModular"],
    }  # fmt: skip
    for name, names in want.items():
        assert stand_ins[name] == names, name
    assert sorted(stand_ins) == sorted([*want, "vllm.envs", *paths]), sorted(stand_ins)
    envs = sys.modules["vllm.envs"]
    assert (envs.VLLM_BATCH_INVARIANT, envs.VLLM_TUNED_CONFIG_FOLDER,
            envs.VLLM_TRITON_FORCE_FIRST_CONFIG, envs.VLLM_TRITON_JIT_WARMUP_NUM_THREADS,
            envs.is_set("X")) == (False, None, False, 1, False)  # fmt: skip
    kvq = sys.modules["vllm.v1.kv_cache_interface"].KVQuantMode
    assert [(m.name, int(m)) for m in kvq] == [
        ("NONE", 0), ("FP8_PER_TENSOR", 1), ("INT8_PER_TOKEN_HEAD", 2),
        ("FP8_PER_TOKEN_HEAD", 3), ("INT4_PER_TOKEN_HEAD", 4), ("NVFP4", 5),
    ]  # fmt: skip
    bu = sys.modules["vllm.v1.attention.backends.utils"]
    assert (bu.PAD_SLOT_ID, bu.NULL_BLOCK_ID) == (-1, 0)
    cfg = sys.modules[moe + "config"]
    assert cfg.FUSED_MOE_UNQUANTIZED_CONFIG is None
    dt = cfg._get_config_dtype_str
    assert [dt(torch.bfloat16), dt(torch.float), dt(torch.bfloat16, use_fp8_w8a8=True)] == [
        None, "float32", "fp8_w8a8"
    ]  # fmt: skip
    with pytest.raises(NotImplementedError, match="w8a16"):
        dt(torch.bfloat16, use_int8_w8a16=True)
    mu = sys.modules[moe + "utils"]
    a = torch.ones(2, 4)
    assert mu.moe_kernel_quantize_input(a, None, None, False) == (a, None)
    with pytest.raises(NotImplementedError, match="1 x block_k"):
        mu.moe_kernel_quantize_input(a, None, torch.float8_e4m3fn, True, [1, 4])
    assert mu.resolve_moe_use_td() is False
    tu = sys.modules["vllm.utils.torch_utils"]
    assert tu.direct_register_custom_op("x", y=1) is None
    h2d = tu.async_tensor_h2d([1, 2], device="cpu", dtype=torch.float64)
    assert h2d.dtype == torch.float64 and h2d.tolist() == [1.0, 2.0]
    assert sys.modules["vllm.triton_utils.allocation"].set_triton_allocator("cpu") is None
    mk = sys.modules[moe + "modular_kernel"].FusedMoEExpertsModular
    act = sys.modules[moe + "activation"].MoEActivation.SILU
    assert mk.adjust_N_for_activation(8, act) == 4
    assert sys.modules[moe.rstrip(".")].get_config() is None
    assert hasattr(torch.ops._C, "silu_and_mul")
    # idempotent: a second call with the same source keeps every module object
    before = dict(mods)
    vllm_shim.install(SRC)
    assert all(sys.modules[n] is m for n, m in before.items())
