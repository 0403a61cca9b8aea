"""The one vLLM shim: vLLM 0.33's own Triton kernels, loaded unchanged from files extracted
out of its wheel (the GDN, step-operator and memory-term benchmarks all load vLLM here).

vLLM code is never committed here. Set up once (``/.vllmwheel/`` is git-ignored; the
device run carries ``.vllmwheel/src``)::

    python3 -m capsim_kernels.bench.vllm_shim --extract .vllmwheel/dl/vllm-0.33.0-*.whl

``install()`` builds a ``vllm`` package whose sub-packages point at the extracted
folders without running their ``__init__.py`` (those import all of vLLM), plus stub
modules for what the loaded files import but cannot have here. Stubs carry no kernel
code except the *stand-ins* below, each a re-statement of a compiled CUDA op of vLLM
(vLLM's ``_C`` library needs torch 2.14; the H200 image has 2.11): a few-launch Triton
kernel of ``step/standins.py`` where one exists, the torch version here as its reference
(and on the CPU):

    STANDIN["moe_align_block_size"]  vllm._custom_ops.moe_align_block_size (CUDA)
    STANDIN["moe_sum"]               vllm._custom_ops.moe_sum (CUDA)
    STANDIN["silu_and_mul"]          torch.ops._C.silu_and_mul (CUDA), registered as such
    STANDIN["topk_softmax"]          the router's fused top-k softmax (CUDA)

Everything else that runs is vLLM's file as shipped: ``fused_moe.py`` (its Triton
``fused_moe_kernel``, ``try_get_optimal_moe_config`` with its ``configs/*.json`` lookup
and default config), ``activation.py``, ``moe_align_block_size.py`` (buffer sizing),
``triton_unified_attention.py``, ``causal_conv1d.py``, and the vendored fla GDN ops
(``chunk.py`` and its imports, ``fused_sigmoid_gating.py``). Platform answers given by
the stub (``current_platform``) restate vLLM's CUDA platform for the GPU present.
"""

from __future__ import annotations

import argparse
import enum
import hashlib
import importlib
import logging
import os
import re
import sys
import types
import zipfile
from contextlib import nullcontext
from pathlib import Path

VLLM_VERSION = "0.33.0"
# the extracted files; CAPSIM_VLLM_SRC names another folder (round6.py sets it for its
# children, so loaders called without a path find the carried copy)
DEFAULT_SRC = Path(os.environ.get("CAPSIM_VLLM_SRC", ".vllmwheel/src"))
FLA = "vllm/third_party/flash_linear_attention/ops/"
MOE = "vllm/model_executor/layers/fused_moe/"
FILES: tuple[str, ...] = (
    MOE + "fused_moe.py",
    MOE + "activation.py",
    MOE + "moe_align_block_size.py",
    "vllm/v1/attention/ops/triton_unified_attention.py",
    "vllm/v1/attention/ops/triton_attention_helpers.py",
    "vllm/model_executor/layers/mamba/ops/causal_conv1d.py",
    "vllm/utils/math_utils.py",
    *(
        FLA + f"{name}.py"
        for name in (
            "chunk", "chunk_delta_h", "chunk_o", "chunk_scaled_dot_kkt", "cumsum", "l2norm",
            "solve_tril", "utils", "wy_fast", "index", "op", "fused_sigmoid_gating",
            "fused_recurrent", "fused_gdn_decode_post_conv_mtp",
        )
    ),
)  # fmt: skip
# extracted when the wheel has them (the memory-term benchmark's kernels)
OPTIONAL_FILES: tuple[str, ...] = (
    FLA + "fused_gdn_prefill_post_conv.py",
    "vllm/v1/sample/ops/topk_topp_triton.py",
    "vllm/model_executor/layers/quantization/utils/fp8_utils.py",
)
CONFIG_GLOB = MOE + "configs/"
KERNEL_FILES = {
    "fused_moe": MOE + "fused_moe.py",
    "unified_attention": "vllm/v1/attention/ops/triton_unified_attention.py",
    "causal_conv1d": "vllm/model_executor/layers/mamba/ops/causal_conv1d.py",
    "chunk_gated_delta_rule": FLA + "chunk.py",
    "fused_sigmoid_gating": FLA + "fused_sigmoid_gating.py",
}
STANDIN = {
    "moe_align_block_size": "triton stand-in (step/standins.py) for "
    "vllm._custom_ops.moe_align_block_size",
    "moe_sum": "torch.sum stand-in for vllm._custom_ops.moe_sum",
    "silu_and_mul": "triton stand-in (step/standins.py) for torch.ops._C.silu_and_mul",
    "topk_softmax": "triton stand-in (step/standins.py) for vllm's fused topk_softmax "
    "(softmax, top-k, renorm)",
    "per_token_group_fp8_quant": "torch stand-in (vllm_shim._Fp8Standins) for "
    "torch.ops._C.per_token_group_fp8_quant (fp8 MoE activations, 1 x 128 groups)",
}


def extract(wheel: Path, dest: Path = DEFAULT_SRC) -> list[str]:
    """Copy FILES and the fused-MoE config JSONs out of the wheel, keeping their paths."""
    out = []
    with zipfile.ZipFile(wheel) as zf:
        names = set(zf.namelist())
        want = [f for f in (*FILES, *OPTIONAL_FILES) if f in names] + [
            n for n in names if n.startswith(CONFIG_GLOB) and n.endswith(".json")
        ]
        missing = [f for f in FILES if f not in names]
        if missing:
            raise ValueError(f"wheel={wheel}: lacks {missing}")
        lic = [n for n in names if n.endswith("LICENSE") and "dist-info" in n]
        for name in [*want, *lic]:
            target = dest / name
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_bytes(zf.read(name))
            out.append(name)
    return out


def file_sha256(rel: str, src: Path = DEFAULT_SRC) -> str:
    return hashlib.sha256((Path(src) / rel).read_bytes()).hexdigest()


def sources(src: Path = DEFAULT_SRC) -> dict[str, str]:
    """{kernel: 'vllm==0.33.0 <path> sha256:<hex16>'} for the rows' ``source`` column."""
    return {
        k: f"vllm=={VLLM_VERSION} {rel} sha256:{file_sha256(rel, src)[:16]}"
        for k, rel in KERNEL_FILES.items()
    }


# ------------------------------------------------------------------------------ stubs
class _Logger(logging.LoggerAdapter):
    """vLLM's logger API as used by the loaded files (``*_once`` print once)."""

    def __init__(self, name: str) -> None:
        super().__init__(logging.getLogger(name), {})
        self._seen: set = set()

    def _once(self, level, msg, *args, **_kw) -> None:
        if (msg, args) not in self._seen:
            self._seen.add((msg, args))
            self.log(level, msg, *args)

    def info_once(self, msg, *a, **kw):
        self._once(logging.INFO, msg, *a, **kw)

    def warning_once(self, msg, *a, **kw):
        self._once(logging.WARNING, msg, *a, **kw)

    def debug_once(self, msg, *a, **kw):
        self._once(logging.DEBUG, msg, *a, **kw)


class _Capability(tuple):
    def to_int(self) -> int:
        return self[0] * 10 + self[1]

    @property
    def major(self) -> int:
        return self[0]


class _Platform:
    """vLLM's CudaPlatform answers for the GPU present (RuntimeError-free on CPU)."""

    device_type = "cuda"

    @staticmethod
    def _cuda() -> bool:
        import torch

        return torch.cuda.is_available()

    def is_cuda(self) -> bool:
        return self._cuda()

    def is_cuda_alike(self) -> bool:
        return self._cuda()

    def is_rocm(self) -> bool:
        return False

    def is_xpu(self) -> bool:
        return False

    def is_cpu(self) -> bool:  # the Triton kernels also run under TRITON_INTERPRET=1
        return False

    def fp8_dtype(self):
        import torch

        return torch.float8_e4m3fn

    def get_device_capability(self, device_id: int = 0):
        import torch

        return _Capability(torch.cuda.get_device_capability(device_id)) if self._cuda() else None

    def is_device_capability(self, cap, device_id: int = 0) -> bool:
        """vLLM's signature: ``cap`` a (major, minor) tuple or an int such as 90 (the FP8
        MoE path asks ``is_device_capability(90)``)."""
        got = self.get_device_capability(device_id)
        if got is None:
            return False
        return got.to_int() == cap if isinstance(cap, int) else tuple(got) == tuple(cap)

    def is_device_capability_family(self, capability: int, device_id: int = 0) -> bool:
        got = self.get_device_capability(device_id)
        return got is not None and got.to_int() // 10 == capability // 10

    def is_arch_support_pdl(self) -> bool:  # CudaPlatform: major >= 9
        got = self.get_device_capability()
        return got is not None and got[0] >= 9

    def get_device_name(self, device_id: int = 0) -> str:
        import torch

        return torch.cuda.get_device_name(device_id) if self._cuda() else "cpu"

    def num_compute_units(self, device_id: int = 0) -> int:
        import torch

        if not self._cuda():  # CPU dry runs under TRITON_INTERPRET=1
            return 8
        return torch.cuda.get_device_properties(device_id).multi_processor_count


def _moe_align_block_size_standin(
    topk_ids, num_experts, block_size, sorted_ids, expert_ids, num_tokens_post_pad,
    expert_map=None, scatter_idx=None,
) -> None:  # fmt: skip
    """STANDIN: the CUDA op's outputs in torch, without host syncs (graph-capturable).

    Per expert, its (token, slot) indices in order, padded to a multiple of block_size
    with ``topk_ids.numel()``; expert_ids per block (-1 past the end); the padded total.
    """
    import torch

    if expert_map is not None or scatter_idx is not None:
        raise NotImplementedError("stand-in: expert_map/scatter_idx are not needed here")
    flat = topk_ids.reshape(-1).long()
    n = flat.numel()
    counts = torch.zeros(num_experts, dtype=torch.long, device=flat.device)
    counts.scatter_add_(0, flat, torch.ones_like(flat))
    padded = (counts + block_size - 1) // block_size * block_size
    pend = torch.cumsum(padded, 0)
    pstart = pend - padded
    cstart = torch.cumsum(counts, 0) - counts
    order = torch.argsort(flat, stable=True)
    sorted_e = flat[order]
    pos = pstart[sorted_e] + torch.arange(n, device=flat.device) - cstart[sorted_e]
    sorted_ids.fill_(n)
    sorted_ids.scatter_(0, pos, order.to(sorted_ids.dtype))
    total = pend[-1:]
    num_tokens_post_pad.copy_(total.to(num_tokens_post_pad.dtype))
    starts = torch.arange(expert_ids.numel(), device=flat.device) * block_size
    ids = torch.searchsorted(pend, starts, right=True).clamp_max(num_experts - 1)
    expert_ids.copy_(torch.where(starts < total, ids, -1).to(expert_ids.dtype))


def _standins():
    from .step import standins

    return standins


def _moe_align_block_size(topk_ids, *args, **kwargs) -> None:
    """STANDIN: the Triton version on CUDA (and under TRITON_INTERPRET), torch else."""
    import os

    if topk_ids.is_cuda or os.environ.get("TRITON_INTERPRET") == "1":
        return _standins().moe_align_block_size(topk_ids, *args, **kwargs)
    return _moe_align_block_size_standin(topk_ids, *args, **kwargs)


def topk_softmax(logits, topk: int):
    """STANDIN: router top-k (Triton on CUDA; the torch reference otherwise)."""
    if logits.is_cuda:
        return _standins().topk_softmax(logits, topk)
    return topk_softmax_standin(logits, topk)


class _Fp8Standins:
    """STANDIN for vLLM's compiled ``per_token_group_fp8_quant`` (fp8_utils.py prefers the
    CUDA op on CUDA): dynamic e4m3 quantisation in groups of ``group`` columns, scales
    amax / 448 (vLLM's eps 1e-10), row-major fp32 scales [M, K / group]."""

    @staticmethod
    def per_token_group_quant_fp8(x, group: int, eps: float = 1e-10):
        import torch

        fp8 = torch.float8_e4m3fn
        fmax = torch.finfo(fp8).max
        m, k = x.shape[0], x.shape[-1]
        g = x.reshape(m, k // group, group).float()
        scale = g.abs().amax(-1).clamp_min(eps) / fmax
        q = (g / scale[..., None]).clamp(-fmax, fmax).to(fp8).reshape(x.shape)
        return q, scale


STANDINS_FP8 = _Fp8Standins()


def _moe_sum_standin(input, output, topk_ids=None, expert_map=None) -> None:
    """STANDIN: sum over the top-k axis."""
    import torch

    torch.sum(input, dim=1, out=output)


def topk_softmax_standin(logits, topk: int, renormalize: bool = True):
    """STANDIN: router probabilities -> (weights fp32, ids int32) as vLLM's fused_topk."""
    import torch

    probs = torch.softmax(logits.float(), dim=-1)
    w, ids = torch.topk(probs, topk, dim=-1)
    if renormalize:
        w = w / w.sum(-1, keepdim=True)
    return w, ids.to(torch.int32)


def _register_silu_and_mul() -> None:
    """STANDIN: ``torch.ops._C.silu_and_mul(out, x)`` = silu(x[:, :d]) * x[:, d:]."""
    import torch

    if hasattr(torch.ops, "_C") and hasattr(torch.ops._C, "silu_and_mul"):
        return
    lib = torch.library.Library("_C", "FRAGMENT")
    lib.define("silu_and_mul(Tensor(a!) out, Tensor input) -> ()")

    def impl(out, x):
        d = x.shape[-1] // 2
        torch.mul(torch.nn.functional.silu(x[..., :d]), x[..., d:], out=out)

    def impl_cuda(out, x):
        _standins().silu_and_mul(out, x)

    lib.impl("silu_and_mul", impl, "CPU")
    lib.impl("silu_and_mul", impl_cuda, "CUDA")
    _LIBS.append(lib)  # keep the registration alive


_LIBS: list = []


def _module(name: str, **attrs) -> types.ModuleType:
    mod = types.ModuleType(name)
    mod.__dict__.update(attrs)
    sys.modules[name] = mod
    parent, _, child = name.rpartition(".")
    if parent in sys.modules:
        setattr(sys.modules[parent], child, mod)
    return mod


def _package(name: str, path: Path | None) -> types.ModuleType:
    """A package whose submodules load from ``path`` (its __init__.py is not run)."""
    if name in sys.modules:
        return sys.modules[name]
    mod = _module(name)
    mod.__path__ = [str(path)] if path is not None else []
    return mod


def install(src: Path = DEFAULT_SRC) -> None:
    """Put the ``vllm`` shim in ``sys.modules`` (idempotent)."""
    src = Path(src).resolve()
    if getattr(sys.modules.get("vllm"), "_capsim_shim", None) == str(src):
        return
    if not (src / "vllm").is_dir():
        raise FileNotFoundError(
            f"{src}: no vLLM files; run python3 -m capsim_kernels.bench.vllm_shim --extract <wheel>"
        )
    for name in [n for n in sys.modules if n == "vllm" or n.startswith("vllm.")]:
        del sys.modules[name]
    import triton
    import triton.language as tl
    import triton.language.extra.libdevice as tldevice

    _install_base(src, triton, tl, tldevice)
    _install_kv_stand_ins()
    _install_moe_stand_ins()


def _install_base(src: Path, triton, tl, tldevice) -> None:  # type: ignore[no-untyped-def]
    """The package tree over ``src``'s files and vLLM's environment, logger, platform,
    Triton and utility modules (install's first part)."""
    root = _package("vllm", src / "vllm")
    root._capsim_shim = str(src)
    for pkg in (
        "model_executor", "model_executor/layers", "model_executor/layers/fused_moe",
        "model_executor/layers/mamba", "model_executor/layers/mamba/ops", "v1",
        "v1/attention", "v1/attention/ops", "v1/attention/backends", "third_party",
        "third_party/flash_linear_attention", "third_party/flash_linear_attention/ops",
        "utils", "v1/sample", "v1/sample/ops", "model_executor/warmup",
    ):  # fmt: skip
        _package("vllm." + pkg.replace("/", "."), src / "vllm" / pkg)
    _module(
        "vllm.envs",
        VLLM_BATCH_INVARIANT=False,  # vLLM's defaults (envs.py)
        VLLM_TUNED_CONFIG_FOLDER=None,
        VLLM_TRITON_FORCE_FIRST_CONFIG=False,
        VLLM_TRITON_JIT_WARMUP_NUM_THREADS=1,
        is_set=lambda name: False,
    )
    _module("vllm.logger", init_logger=_Logger)
    _module("vllm.platforms", current_platform=_Platform())
    _module("vllm.triton_utils", tl=tl, triton=triton, tldevice=tldevice, HAS_TRITON=True)
    _module("vllm.triton_utils.allocation", set_triton_allocator=lambda device: None)
    _module(
        "vllm._custom_ops",
        moe_align_block_size=_moe_align_block_size,
        moe_sum=_moe_sum_standin,
    )
    _module(
        "vllm.utils.platform_utils",
        # vLLM: current_platform.get_device_name() with whitespace and '/' -> '_'
        get_device_name_as_file_name=lambda device_id=0: re.sub(
            r"[\s/]+", "_", _Platform().get_device_name(device_id)
        ),
        num_compute_units=lambda device_id=0: _Platform().num_compute_units(device_id),
    )

    def async_tensor_h2d(data, device=None, dtype=None, out=None):
        import torch

        t = data if isinstance(data, torch.Tensor) else torch.as_tensor(data)
        return t.to(device=device, dtype=dtype, non_blocking=True)

    _module(
        "vllm.utils.torch_utils",
        direct_register_custom_op=lambda *a, **kw: None,  # the functions are called directly
        async_tensor_h2d=async_tensor_h2d,
    )
    _module("vllm.utils.gpu_sync_debug", gpu_sync_allowed=nullcontext)


def _install_kv_stand_ins() -> None:
    """vLLM's KV-cache quantization modes and the attention backends' slot constants."""

    class KVQuantMode(enum.IntEnum):  # vllm/v1/kv_cache_interface.py
        NONE = 0
        FP8_PER_TENSOR = 1
        INT8_PER_TOKEN_HEAD = 2
        FP8_PER_TOKEN_HEAD = 3
        INT4_PER_TOKEN_HEAD = 4
        NVFP4 = 5

    _module("vllm.v1.kv_cache_interface", KVQuantMode=KVQuantMode)
    _module("vllm.v1.attention.backends.utils", PAD_SLOT_ID=-1, NULL_BLOCK_ID=0)


def _install_moe_stand_ins() -> None:
    """The fused-MoE config, utils and modular-kernel pieces the bench's fused_moe needs,
    the silu_and_mul stand-in, then vLLM's activation module (its files)."""

    class FusedMoEQuantConfig:  # the functional fused_experts_impl path takes flags
        pass

    def _get_config_dtype_str(dtype, use_fp8_w8a8=False, use_fp8_w8a16=False,
                              use_int8_w8a16=False, use_int4_w4a16=False,
                              ocp_mx_scheme=None):  # fmt: skip
        """vLLM's rule (config.py): 'fp8_w8a8' for fp8 w8a8, None for bf16/fp16
        unquantized, 'float32' for fp32."""
        import torch

        if use_fp8_w8a8:
            return "fp8_w8a8"
        if use_fp8_w8a16 or use_int8_w8a16 or use_int4_w4a16:
            raise NotImplementedError(
                "vllm_shim: the bench loads only unquantized and fp8 w8a8 MoE (no w8a16/int)"
            )
        return "float32" if dtype == torch.float else None

    _module(
        MOE.replace("/", ".") + "config",
        FUSED_MOE_UNQUANTIZED_CONFIG=None,
        FusedMoEQuantConfig=FusedMoEQuantConfig,
        _get_config_dtype_str=_get_config_dtype_str,
    )

    def moe_kernel_quantize_input(A, A_scale, quant_dtype, per_act_token_quant,
                                  block_shape=None, **_kw):  # fmt: skip
        if quant_dtype is None:
            return A, A_scale  # vLLM: unquantized input passes through
        if block_shape is None or per_act_token_quant or A_scale is not None:
            raise NotImplementedError(
                "vllm_shim: this bench quantizes inputs only as dynamic 1 x block_k fp8 groups"
            )
        return STANDINS_FP8.per_token_group_quant_fp8(A, block_shape[1])

    _module(
        MOE.replace("/", ".") + "utils",
        # vLLM's rule (fused_moe/utils.py): Hopper, BLOCK_SIZE_M < 64, BLOCK_SIZE_N >= 64
        enable_swap_ab=lambda bm, bn: _Platform().is_device_capability(90) and bm < 64 and bn >= 64,
        moe_kernel_quantize_input=moe_kernel_quantize_input,
        resolve_moe_use_td=lambda: False,  # VLLM_TRITON_USE_TD unset (default)
        warn_if_moe_use_td_ineffective=lambda *a, **kw: None,
    )
    fused_pkg = sys.modules[MOE.replace("/", ".").rstrip(".")]
    fused_pkg.get_config = lambda: None  # no override config (vLLM's default)
    _register_silu_and_mul()
    act = importlib.import_module(MOE.replace("/", ".") + "activation")

    class FusedMoEExpertsModular:  # modular_kernel.py: gated activations halve N
        @staticmethod
        def adjust_N_for_activation(n, activation):
            return n // 2 if activation.is_gated else n

    _module(MOE.replace("/", ".") + "modular_kernel", FusedMoEExpertsModular=FusedMoEExpertsModular)
    assert act.MoEActivation.SILU.is_gated


def interpreter_aliases() -> None:
    """CPU dry runs only (TRITON_INTERPRET=1): make fla's ``exp = tl.exp`` style aliases
    (``ops/op.py``) callable in the interpreter; call after install(), before the modules
    that import them."""
    import triton
    import triton.language as tl

    op = importlib.import_module("vllm.third_party.flash_linear_attention.ops.op")
    scope: dict = {"triton": triton, "tl": tl}
    for name in ("exp", "exp2", "log", "log2"):  # jit wrappers need tl among their globals
        exec(f"@triton.jit\ndef _{name}(x):\n    return tl.{name}(x)\n", scope)
    for name in ("exp", "exp2", "log", "log2"):
        setattr(op, name, scope[f"_{name}"])


def _import(rel: str, src: Path):
    install(src)
    return importlib.import_module(rel[: -len(".py")].replace("/", "."))


def load_fused_moe(src: Path = DEFAULT_SRC):
    """vLLM's ``fused_moe`` module (``fused_experts_impl``, ``try_get_optimal_moe_config``,
    ``get_config_file_name``, ``get_moe_configs``)."""
    return _import(KERNEL_FILES["fused_moe"], src)


def load_unified_attention(src: Path = DEFAULT_SRC):
    return _import(KERNEL_FILES["unified_attention"], src).unified_attention


def load_causal_conv1d(src: Path = DEFAULT_SRC):
    """vLLM's causal_conv1d module (``causal_conv1d_fn``, ``causal_conv1d_update``)."""
    return _import(KERNEL_FILES["causal_conv1d"], src)


def load_chunk_gated_delta_rule(src: Path = DEFAULT_SRC):
    return _import(KERNEL_FILES["chunk_gated_delta_rule"], src).chunk_gated_delta_rule


def load_fused_sigmoid_gating(src: Path = DEFAULT_SRC):
    return _import(KERNEL_FILES["fused_sigmoid_gating"], src).fused_sigmoid_gating_delta_rule_update


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--extract", type=Path, required=True, help="the vllm 0.33.0 wheel")
    ap.add_argument("--dest", type=Path, default=DEFAULT_SRC)
    args = ap.parse_args(argv)
    names = extract(args.extract, args.dest)
    print(f"{len(names)} files -> {args.dest}")
    for k, v in sources(args.dest).items():
        print(f"  {k}: {v}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
