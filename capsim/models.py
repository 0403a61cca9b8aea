"""Model facts: the architecture numbers capsim needs, with the source of every value.

Presets come from `shared/VLLM.md` section 6 (transformers 5.24.0 config classes and
third-party copies of the public HF ``config.json`` files) and SPEC.md section 4. Any
HF-style ``config.json`` with the same fields loads through :func:`model_from_hf_config`.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from capsim.units import dtype_bytes


@dataclass(frozen=True, slots=True, kw_only=True)
class VisionSpec:
    """A Qwen3-VL / Qwen3.5 vision tower (HF ``vision_config``)."""

    depth: int
    hidden_size: int
    intermediate_size: int
    num_heads: int
    out_hidden_size: int
    patch_size: int = 16
    spatial_merge_size: int = 2
    temporal_patch_size: int = 2
    in_channels: int = 3
    num_position_embeddings: int = 2304
    num_deepstack: int = 0
    max_image_pixels: int = 16777216  # processor size["longest_edge"] (Qwen3-VL default)

    @property
    def max_tokens_per_image(self) -> int:
        """Merged tokens of the largest image (vLLM profiles with it)."""
        patches = self.max_image_pixels // (self.patch_size**2)
        return patches // (self.spatial_merge_size**2)


# Qwen3.5 vision tower: third-party copy of a Qwen3.5 config.json (find_string id
# 69870408549: depth 27, hidden 1152, intermediate 4304, 16 heads, 2304 positions, patch 16,
# merge 2, temporal 2, no deepstack); out_hidden_size is the text model's hidden size.
def qwen35_vision(out_hidden_size: int) -> VisionSpec:
    return VisionSpec(
        depth=27,
        hidden_size=1152,
        intermediate_size=4304,
        num_heads=16,
        out_hidden_size=out_hidden_size,
    )


QUANT_METHODS: tuple[str, ...] = ("none", "fp8", "nvfp4", "awq", "gptq")
# The weight components a mixed-precision checkpoint can give their own format
# (memory/weights.py weight_breakdown_bytes; "shared_expert" is also a dense model's MLP).
QUANT_COMPONENTS: tuple[str, ...] = ("attention", "gdn", "shared_expert", "experts", "lm_head")


@dataclass(frozen=True, slots=True, kw_only=True)
class ModelSpec:
    """A GDN hybrid (or plain attention) MoE decoder, as vLLM sees it."""

    name: str = field(metadata={"help": "preset or config name"})
    hidden_size: int = field(metadata={"help": "model width"})
    num_gdn_layers: int = field(metadata={"help": "Gated DeltaNet (linear attention) layers"})
    num_attn_layers: int = field(metadata={"help": "full-attention layers (MTP excluded)"})
    num_attention_heads: int = field(metadata={"help": "query heads of full attention"})
    num_kv_heads: int = field(metadata={"help": "KV heads of full attention"})
    head_dim: int = field(metadata={"help": "full-attention head dim"})
    attn_output_gate: bool = field(metadata={"help": "q_proj also produces an output gate"})
    linear_num_key_heads: int = field(metadata={"help": "GDN key heads (Hk)"})
    linear_num_value_heads: int = field(metadata={"help": "GDN value heads (Hv)"})
    linear_key_head_dim: int = field(metadata={"help": "GDN d_k"})
    linear_value_head_dim: int = field(metadata={"help": "GDN d_v"})
    linear_conv_kernel_dim: int = field(metadata={"help": "GDN short conv kernel"})
    num_experts: int = field(metadata={"help": "routed experts per MoE layer (0 = dense)"})
    num_experts_per_tok: int = field(metadata={"help": "top-k routing"})
    moe_intermediate_size: int = field(metadata={"help": "routed expert FFN width"})
    shared_expert_intermediate_size: int = field(metadata={"help": "shared expert width"})
    dense_intermediate_size: int = field(
        default=0, metadata={"help": "dense FFN width when num_experts == 0"}
    )
    vocab_size: int = field(metadata={"help": "vocabulary (embedding and lm_head rows)"})
    tie_word_embeddings: bool = field(default=False, metadata={"help": "lm_head shares embed"})
    num_mtp_layers: int = field(default=1, metadata={"help": "MTP draft decoder layers"})
    max_position_embeddings: int = field(default=262144, metadata={"help": "max_model_len"})
    partial_rotary_factor: float = field(
        default=1.0, metadata={"help": "share of head_dim that RoPE rotates (rotary_dim)"}
    )
    mrope: bool = field(
        default=False,
        metadata={"help": "multimodal RoPE (rope_parameters.mrope_section): vLLM caches 4x"},
    )
    weight_dtype: str = field(default="bfloat16", metadata={"help": "weight dtype"})
    quantization: str = field(
        default="none", metadata={"help": "checkpoint quantization: none|fp8|nvfp4|awq|gptq"}
    )
    vision: VisionSpec | None = field(
        default=None, metadata={"help": "vision tower (multimodal checkpoints)"}
    )
    quant_ignore: tuple[str, ...] = field(
        default=(),
        metadata={
            "help": "components a quantized checkpoint keeps in weight_dtype, from its "
            "quantization_config ignore list: attention, gdn, shared_expert, experts"
        },
    )
    quant_formats: tuple[tuple[str, str], ...] = field(
        default=(),
        metadata={
            "help": "per-component weight format of a mixed-precision checkpoint (ModelOpt "
            "MIXED_PRECISION quantized_layers): (component, format) pairs over attention, gdn, "
            "shared_expert, experts, lm_head; a component not named stays in weight_dtype. "
            "Empty: quantization/quant_ignore/quant_scope decide"
        },
    )
    quant_scope: str = field(
        default="linear",
        metadata={
            "help": "which weights a quantized checkpoint stores low-precision: 'linear' "
            "(attention, GDN and expert projections) or 'experts' (routed/shared experts only)"
        },
    )
    ssm_state_dtype: str = field(
        default="bfloat16",
        metadata={"help": "vLLM default GDN recurrent state dtype (mamba_ssm_dtype)"},
    )
    sources: tuple[str, ...] = field(default=(), metadata={"help": "where the numbers came from"})

    def __post_init__(self) -> None:
        positive = (
            "hidden_size",
            "num_attention_heads",
            "num_kv_heads",
            "head_dim",
            "vocab_size",
        )
        for name in positive:
            value = getattr(self, name)
            if not isinstance(value, int) or value <= 0:
                raise ValueError(f"model {self.name!r}: {name}={value!r} must be a positive int")
        for name in (
            "num_gdn_layers",
            "num_attn_layers",
            "num_experts",
            "num_mtp_layers",
            "linear_num_key_heads",
            "linear_num_value_heads",
        ):
            value = getattr(self, name)
            if not isinstance(value, int) or value < 0:
                raise ValueError(f"model {self.name!r}: {name}={value!r} must be an int >= 0")
        if self.num_gdn_layers + self.num_attn_layers == 0:
            raise ValueError(f"model {self.name!r}: no layers")
        if self.num_gdn_layers and self.linear_num_value_heads % max(self.linear_num_key_heads, 1):
            raise ValueError(
                f"model {self.name!r}: linear_num_value_heads={self.linear_num_value_heads} "
                f"is not a multiple of linear_num_key_heads={self.linear_num_key_heads}"
            )
        if self.num_experts and not 0 < self.num_experts_per_tok <= self.num_experts:
            raise ValueError(
                f"model {self.name!r}: num_experts_per_tok={self.num_experts_per_tok} "
                f"must be in 1..num_experts={self.num_experts}"
            )
        dtype_bytes(self.weight_dtype, field_name="weight_dtype")
        if self.quant_scope not in ("linear", "experts"):
            raise ValueError(f"model {self.name!r}: quant_scope={self.quant_scope!r} is unknown")
        if self.quantization not in QUANT_METHODS:
            raise ValueError(
                f"model {self.name!r}: quantization={self.quantization!r} is unknown "
                f"(choose from {QUANT_METHODS})"
            )
        dtype_bytes(self.ssm_state_dtype, field_name="ssm_state_dtype")
        for comp, fmt in self.quant_formats:
            if comp not in QUANT_COMPONENTS or fmt not in QUANT_METHODS:
                raise ValueError(
                    f"model {self.name!r}: quant_formats entry ({comp!r}, {fmt!r}) is unknown "
                    f"(components {QUANT_COMPONENTS}, formats {QUANT_METHODS})"
                )

    @property
    def is_hybrid(self) -> bool:
        return self.num_gdn_layers > 0

    @property
    def conv_dim(self) -> int:
        """q, k and v channels of the GDN short convolution: 2*Hk*dk + Hv*dv."""
        return (
            2 * self.linear_num_key_heads * self.linear_key_head_dim
            + self.linear_num_value_heads * self.linear_value_head_dim
        )


_QWEN35_SOURCES = (
    "shared/VLLM.md s6: transformers 5.24.0 Qwen3_5MoeTextConfig (checkpoint "
    "Qwen/Qwen3.5-35B-A3B); third-party config.json copy id 57982277923",
    "mamba_ssm_dtype float32: vLLM PR #34489, baidu/vLLM-Kunlun PR #336",
    "MTP: mtp_num_hidden_layers 1 (3P ids 52558163621, 62633829536)",
)

PRESETS: dict[str, ModelSpec] = {
    "qwen3.5-35b-a3b": ModelSpec(
        name="qwen3.5-35b-a3b",
        hidden_size=2048,
        num_gdn_layers=30,
        num_attn_layers=10,
        num_attention_heads=16,
        num_kv_heads=2,
        head_dim=256,
        attn_output_gate=True,
        linear_num_key_heads=16,
        linear_num_value_heads=32,
        linear_key_head_dim=128,
        linear_value_head_dim=128,
        linear_conv_kernel_dim=4,
        num_experts=256,
        num_experts_per_tok=8,
        moe_intermediate_size=512,
        shared_expert_intermediate_size=512,
        vocab_size=248320,
        num_mtp_layers=1,
        max_position_embeddings=262144,
        # rope_parameters of the Qwen3.5 configs (scripts/engine_model_dir.py, the H200
        # start-ups' config): partial rotary 0.25, mrope_section [11, 11, 10]
        partial_rotary_factor=0.25,
        mrope=True,
        ssm_state_dtype="float32",
        vision=qwen35_vision(2048),
        sources=(*_QWEN35_SOURCES, "vision tower: qwen35_vision (Qwen3.5 vision_config)"),
    ),
    "qwen3.5-397b-a17b": ModelSpec(
        name="qwen3.5-397b-a17b",
        hidden_size=4096,
        num_gdn_layers=45,
        num_attn_layers=15,
        num_attention_heads=32,
        num_kv_heads=2,
        head_dim=256,
        attn_output_gate=True,
        linear_num_key_heads=16,
        linear_num_value_heads=64,
        linear_key_head_dim=128,
        linear_value_head_dim=128,
        linear_conv_kernel_dim=4,
        num_experts=512,
        num_experts_per_tok=10,
        moe_intermediate_size=1024,
        shared_expert_intermediate_size=1024,
        vocab_size=248320,
        num_mtp_layers=1,
        max_position_embeddings=262144,
        # rope_parameters of the Qwen3.5 configs (scripts/engine_model_dir.py, the H200
        # start-ups' config): partial rotary 0.25, mrope_section [11, 11, 10]
        partial_rotary_factor=0.25,
        mrope=True,
        ssm_state_dtype="float32",
        vision=qwen35_vision(4096),
        sources=(
            "vision tower: qwen35_vision (Qwen3.5 vision_config)",
            "shared/VLLM.md s6: third-party config.json copies ids 57982277923, "
            "52187504714, 56392315325",
            "shared_expert_intermediate_size 1024 from two 3P sources (one fixture says "
            "4096: unverified)",
            "MTP layers 1 and fp32 SSM state: Qwen3.5 family pattern (not seen for 397B)",
        ),
    ),
    "qwen3-next-80b-a3b": ModelSpec(
        name="qwen3-next-80b-a3b",
        hidden_size=2048,
        num_gdn_layers=36,
        num_attn_layers=12,
        num_attention_heads=16,
        num_kv_heads=2,
        head_dim=256,
        attn_output_gate=True,
        linear_num_key_heads=16,
        linear_num_value_heads=32,
        linear_key_head_dim=128,
        linear_value_head_dim=128,
        linear_conv_kernel_dim=4,
        num_experts=512,
        num_experts_per_tok=10,
        moe_intermediate_size=512,
        shared_expert_intermediate_size=512,
        vocab_size=151936,
        num_mtp_layers=1,
        max_position_embeddings=262144,
        partial_rotary_factor=0.25,  # Qwen3-Next config.json: plain RoPE on 64 of 256
        ssm_state_dtype="bfloat16",
        sources=(
            "shared/VLLM.md s6: transformers 5.24.0 Qwen3NextConfig (docstring "
            "Qwen3-Next-80B-A3B); vLLM's 'block size of 544' comment",
            "no mamba_ssm_dtype in config -> bf16 in vLLM 0.33 (VLLM.md s2.1; a live "
            "0.32 CPU engine used fp32: version dependent)",
        ),
    ),
}


HF_IDS: dict[str, str] = {
    "Qwen/Qwen3.5-35B-A3B": "qwen3.5-35b-a3b",
    "Qwen/Qwen3.5-397B-A17B": "qwen3.5-397b-a17b",
    "Qwen/Qwen3-Next-80B-A3B-Instruct": "qwen3-next-80b-a3b",
    "Qwen/Qwen3-Next-80B-A3B-Thinking": "qwen3-next-80b-a3b",
}
"""Hugging Face model ids (what ``vllm serve`` is given) -> capsim's preset of that
architecture (the Instruct and Thinking checkpoints of Qwen3-Next share one)."""


def preset_name(name: str) -> str | None:
    """The preset ``name`` means (a preset name or an HF id, any case), else None."""
    if name in PRESETS:
        return name
    if name in HF_IDS:
        return HF_IDS[name]
    folded = {k.lower(): v for k, v in HF_IDS.items()}
    return folded.get(name.lower()) or (name.lower() if name.lower() in PRESETS else None)


def get_model(name: str) -> ModelSpec:
    """A preset by name or HF id, or a model loaded from a path to an HF-style config.json."""
    preset = preset_name(name)
    if preset is not None:
        return PRESETS[preset]
    path = Path(name)
    if path.suffix == ".json" or path.is_file():
        return model_from_hf_config(path)
    raise ValueError(
        f"model={name!r} is unknown: choose one of {sorted(PRESETS)}, an HF id "
        f"({', '.join(sorted(HF_IDS))}) or a config.json"
    )


def _get(cfg: dict[str, Any], key: str, path: Path, default: Any = None) -> Any:
    if key in cfg:
        return cfg[key]
    if default is not None:
        return default
    raise ValueError(f"{path}: field {key!r} is missing")


def model_from_hf_config(path: Path) -> ModelSpec:
    """Read a Qwen3-Next / Qwen3.5 style HF ``config.json`` (``text_config`` if nested)."""
    try:
        raw = json.loads(Path(path).read_text())
    except FileNotFoundError:
        raise ValueError(f"model config {path} does not exist") from None
    except json.JSONDecodeError as exc:
        raise ValueError(f"model config {path} is not valid JSON: {exc}") from None
    except RecursionError:
        raise ValueError(f"model config {path}: JSON nested too deeply (~1000 levels)") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise ValueError(f"model config {path} cannot be read: {exc}") from None
    cfg = raw.get("text_config", raw) if isinstance(raw, dict) else raw
    if not isinstance(cfg, dict):
        raise ValueError(
            f"model config {path}: expected a JSON object (an HF config.json), "
            f"got a {type(cfg).__name__}"
        )
    try:
        return _model_from_dict(cfg, path, raw if isinstance(raw, dict) else {})
    except (TypeError, ValueError, OverflowError) as exc:
        if str(exc).startswith(str(path)) or str(exc).startswith("model "):
            raise
        raise ValueError(f"model config {path}: {exc}") from None


def _model_from_dict(cfg: dict[str, Any], path: Path, raw: dict[str, Any]) -> ModelSpec:
    num_layers = int(_get(cfg, "num_hidden_layers", path))
    layer_types = cfg.get("layer_types")
    if not cfg.get("linear_num_value_heads"):
        num_attn = num_layers  # a plain attention model (Llama-style): no GDN layers
    elif layer_types:
        num_attn = sum(1 for t in layer_types if t == "full_attention")
    else:
        interval = int(cfg.get("full_attention_interval", 4))
        num_attn = sum(1 for i in range(num_layers) if (i + 1) % interval == 0)
    num_gdn = num_layers - num_attn
    num_experts = int(cfg.get("num_experts", 0) or 0)
    # rope block: "rope_parameters" (newer configs) or "rope_scaling"; absent = plain full RoPE
    rope = cfg.get("rope_parameters") or cfg.get("rope_scaling") or {}
    rope = rope if isinstance(rope, dict) else {}
    # No mamba_ssm_dtype: a live vLLM 0.32 used an fp32 SSM state ("auto" cache dtype;
    # experiments/live/README.md, VLLM.md s2.1 calls the default version dependent).
    ssm_dtype = cfg.get("mamba_ssm_dtype") or "float32"
    return ModelSpec(
        quantization=_quant_method(raw),
        quant_ignore=quant_ignore(raw),
        quant_formats=mixed_quant_formats(raw),
        vision=_vision_from(raw.get("vision_config")),
        name=str(cfg.get("_name_or_path") or Path(path).stem),
        hidden_size=int(_get(cfg, "hidden_size", path)),
        num_gdn_layers=num_gdn,
        num_attn_layers=num_attn,
        num_attention_heads=int(_get(cfg, "num_attention_heads", path)),
        num_kv_heads=int(cfg.get("num_key_value_heads") or _get(cfg, "num_attention_heads", path)),
        head_dim=int(
            cfg.get("head_dim")
            or int(_get(cfg, "hidden_size", path)) // int(_get(cfg, "num_attention_heads", path))
        ),
        # transformers' Qwen3-Next / Qwen3.5 configs default attn_output_gate to True; a
        # dense (non-GDN) config without the field has no output gate.
        attn_output_gate=bool(cfg.get("attn_output_gate", bool(cfg.get("linear_num_value_heads")))),
        linear_num_key_heads=int(cfg.get("linear_num_key_heads", 0)),
        linear_num_value_heads=int(cfg.get("linear_num_value_heads", 0)),
        linear_key_head_dim=int(cfg.get("linear_key_head_dim", 128)),
        linear_value_head_dim=int(cfg.get("linear_value_head_dim", 128)),
        linear_conv_kernel_dim=int(cfg.get("linear_conv_kernel_dim", 4)),
        num_experts=num_experts,
        num_experts_per_tok=int(cfg.get("num_experts_per_tok", 0) or 0),
        moe_intermediate_size=int(cfg.get("moe_intermediate_size", 0) or 0),
        shared_expert_intermediate_size=int(cfg.get("shared_expert_intermediate_size", 0) or 0),
        dense_intermediate_size=int(cfg.get("intermediate_size", 0) or 0),
        vocab_size=int(_get(cfg, "vocab_size", path)),
        tie_word_embeddings=bool(raw.get("tie_word_embeddings", False)),
        num_mtp_layers=int(
            cfg.get("mtp_num_hidden_layers", cfg.get("num_nextn_predict_layers", 0)) or 0
        ),
        max_position_embeddings=int(cfg.get("max_position_embeddings", 262144)),
        partial_rotary_factor=float(
            cfg.get("partial_rotary_factor", rope.get("partial_rotary_factor", 1.0)) or 1.0
        ),
        mrope="mrope_section" in rope,
        ssm_state_dtype=str(ssm_dtype),
        sources=(f"HF config {path}",),
    )


# Quantization method names that HF configs and vLLM's --quantization share -> capsim's weight
# format (memory/weights.py QUANT_BYTES_PER_PARAM).
QUANT_METHOD_FORMATS: dict[str, str] = {
    "fp8": "fp8",
    "modelopt": "fp8",
    "modelopt_fp4": "nvfp4",
    "nvfp4": "nvfp4",
    "awq": "awq",
    "awq_marlin": "awq",
    "gptq": "gptq",
    "gptq_marlin": "gptq",
}
# config.json quantization_config.quant_method -> capsim's weight format.
_QUANT_ALIASES: dict[str, str] = {
    **QUANT_METHOD_FORMATS,
    "compressed-tensors-fp8": "fp8",
    "auto-round": "gptq",
}


def _quant_method(raw: dict[str, Any]) -> str:
    """Map ``quantization_config`` to one of QUANT_METHODS (none when absent)."""
    q = raw.get("quantization_config") or (raw.get("text_config") or {}).get("quantization_config")
    if not q:
        return "none"
    method = str(q.get("quant_method", "")).lower()
    algo = str(q.get("quant_algo", "")).lower()
    if algo == "mixed_precision":  # the routed experts' format names the checkpoint
        formats = dict(mixed_quant_formats(raw))
        return formats.get("experts") or next(iter(formats.values()), "fp8")
    if "fp4" in algo or "nvfp4" in method:
        return "nvfp4"
    if method == "compressed-tensors":
        fmt = str(q.get("format", ""))
        if fmt == "float-quantized":
            return "fp8"
        if fmt == "nvfp4-pack-quantized":
            return "nvfp4"
        if fmt == "pack-quantized":
            return "gptq"
        groups = q.get("config_groups") or {}
        bits = {int((g.get("weights") or {}).get("num_bits", 16)) for g in groups.values()}
        kinds = {str((g.get("weights") or {}).get("type", "")) for g in groups.values()}
        if 4 in bits:
            return "nvfp4" if "float" in kinds else "gptq"
        if 8 in bits:
            return "fp8"
    if method in _QUANT_ALIASES:
        return _QUANT_ALIASES[method]
    raise ValueError(f"quantization_config.quant_method={method!r} is not supported")


# Module-name fragments of a quantization ignore list -> the capsim component kept unquantized.
_IGNORE_COMPONENTS: tuple[tuple[str, str], ...] = (
    ("linear_attn", "gdn"),
    ("shared_expert.", "shared_expert"),
    ("shared_expert$", "shared_expert"),
    ("mlp.experts", "experts"),
    ("self_attn", "attention"),
)


def quant_ignore(raw: dict[str, Any]) -> tuple[str, ...]:
    """Components a checkpoint's ``quantization_config`` keeps unquantized: its ``ignore``
    (compressed-tensors), ``modules_to_not_convert`` (HF fp8/awq) or ``exclude_modules``
    (ModelOpt) list, matched by module-name fragment (regex entries like 're:.*linear_attn.*'
    included). Embeddings, lm_head, routers, norms and vision towers are unquantized anyway."""
    q = raw.get("quantization_config") or (raw.get("text_config") or {}).get("quantization_config")
    if not isinstance(q, dict):
        return ()
    entries: list[str] = []
    for key in ("ignore", "modules_to_not_convert", "exclude_modules"):
        value = q.get(key)
        if isinstance(value, list):
            entries += [str(v) for v in value[:100_000]]
    found = set()
    for entry in entries:
        text = entry.removeprefix("re:").replace("\\", "").replace("\\.", ".")
        for frag, comp in _IGNORE_COMPONENTS:
            if frag.endswith("$"):
                if text.rstrip("$").endswith(frag[:-1].rstrip(".")):
                    found.add(comp)
            elif frag in text:
                found.add(comp)
    return tuple(sorted(found))


# ModelOpt per-layer algorithms -> capsim's weight format (NVFP4 and W4A16_NVFP4 store the
# same packing: 4-bit values and an fp8 scale per 16; FP8 is 1 byte with a per-tensor scale).
_MODELOPT_ALGO_FORMATS: dict[str, str] = {"fp8": "fp8", "nvfp4": "nvfp4", "w4a16_nvfp4": "nvfp4"}
# Module-name fragments of a quantized_layers key -> the capsim component, first match wins
# (shared_expert before experts; any other 'mlp.' projection is a dense model's MLP).
_LAYER_COMPONENTS: tuple[tuple[str, str], ...] = (
    ("lm_head", "lm_head"),
    ("linear_attn.", "gdn"),
    ("self_attn.", "attention"),
    ("shared_expert.", "shared_expert"),
    ("mlp.experts", "experts"),
    ("mlp.", "shared_expert"),
)


def mixed_quant_formats(raw: dict[str, Any]) -> tuple[tuple[str, str], ...]:
    """Per-component formats of a ModelOpt MIXED_PRECISION checkpoint (empty otherwise).

    vLLM 0.24.0 model_executor/layers/quantization/modelopt.py:
    ModelOptMixedPrecisionConfig.get_quant_method gives each linear (ParallelLMHead
    included, matched as 'lm_head') and each RoutedExperts module the method its
    ``quantized_layers`` entry names (FP8, NVFP4, W4A16_NVFP4) and leaves a layer that no
    entry names unquantized; a fused layer whose shards disagree is refused. Same here per
    component: every entry of a component must name one format; mtp.* (not loaded without
    a drafter), the router (mlp.gate) and the vision tower (capsim keeps it in weight_dtype)
    are skipped.
    """
    q = raw.get("quantization_config") or (raw.get("text_config") or {}).get("quantization_config")
    if not isinstance(q, dict) or str(q.get("quant_algo", "")).upper() != "MIXED_PRECISION":
        return ()
    layers = q.get("quantized_layers") or (q.get("quantization") or {}).get("quantized_layers")
    if not isinstance(layers, dict) or not layers:
        raise ValueError("MIXED_PRECISION quantization_config without quantized_layers")
    found: dict[str, str] = {}
    for name, info in list(layers.items())[:100_000]:
        key = str(name)
        if key.startswith("mtp.") or key.endswith("mlp.gate") or "visual." in key:
            continue
        algo = str((info or {}).get("quant_algo", "")).lower()
        if algo not in _MODELOPT_ALGO_FORMATS:
            raise ValueError(f"quantized_layers[{key!r}]: quant_algo {algo!r} is not supported")
        comp = next((c for frag, c in _LAYER_COMPONENTS if frag in key), None)
        if comp is None:
            continue
        fmt = _MODELOPT_ALGO_FORMATS[algo]
        if found.setdefault(comp, fmt) != fmt:
            raise ValueError(f"quantized_layers: {comp} layers mix {found[comp]} and {fmt}")
    return tuple(sorted(found.items()))


def _vision_from(vc: dict[str, Any] | None) -> VisionSpec | None:
    if not vc or "depth" not in vc:
        return None
    return VisionSpec(
        depth=int(vc["depth"]),
        hidden_size=int(vc["hidden_size"]),
        intermediate_size=int(vc["intermediate_size"]),
        num_heads=int(vc["num_heads"]),
        out_hidden_size=int(vc["out_hidden_size"]),
        patch_size=int(vc.get("patch_size", 16)),
        spatial_merge_size=int(vc.get("spatial_merge_size", 2)),
        temporal_patch_size=int(vc.get("temporal_patch_size", 2)),
        in_channels=int(vc.get("in_channels", 3)),
        num_position_embeddings=int(vc.get("num_position_embeddings", 2304)),
        num_deepstack=len(vc.get("deepstack_visual_indexes") or []),
    )
