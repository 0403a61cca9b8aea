"""An external draft model (vLLM ``speculative_config.model``): the shapes its memory needs.

vLLM loads an external drafter (EAGLE, DFlash, DSpark, ...) as a second model beside the
target: its weights count in "Model loading took X GiB" (the V2 runner's ``load_model``
loads it inside the same ``DeviceMemoryProfiler``; 0.27.1 v1/worker/gpu/model_runner.py),
its attention layers get their own KV-cache specs and so their own groups in the shared
pool, and its speculator's buffers and its dummy ``propose`` run in the profile.
``DrafterSpec`` holds what those need and nothing else; every field of a shipped drafter file
names its source (``experiments/vllm_logs/drafters/*.json``). ``capsim.memory.drafter_memory``
turns it into bytes and blocks.

A DFlash drafter (vLLM ``model_executor/models/qwen3_dflash.py``) is a stack of Qwen3 decoder
layers (q/k/v/o, gate/up/down; TP-sharded like the target's: ``QKVParallelLinear`` keeps
``max(1, kv_heads // tp)`` KV heads per rank) over an ``fc`` (``ReplicatedLinear``) that
projects the target's tapped hidden states; it shares the target's embedding and lm_head
(``v1/worker/gpu/spec_decode/dflash/utils.py:load_dflash_model`` deletes its own). DFlash2
(vLLM PR #52816, ``qwen3_dflash2.py``) adds per layer two grouped dynamic convolutions
(``kernel_projection`` ``ReplicatedLinear`` with ``quant_config=None``, ``base_kernel``) and a
candidate selector (two ``[vocab, rank]`` codebooks and a ``hidden -> rank`` projection, all
replicated, unquantized).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any

# Weight formats of a drafter's quantized linears: bytes per weight, scales included.
# "w4a16-g128": compressed-tensors pack-quantized int4, symmetric, group 128 (int32-packed
# 4-bit weights, one fp16 scale per 128 inputs, no zero points: syv-ai/qwen38-27b-rtx3090
# drafter/quant_dflash2.py, its quantization_config and ``weight_scale.to(float16)``).
DRAFTER_WEIGHT_BYTES: dict[str, float] = {
    "none": 0.0,  # the linears stay in the drafter's dtype
    "w4a16-g128": 0.5 + 2.0 / 128,
}
MODEL_RUNNERS: tuple[str, ...] = ("v1", "v2")


def _fail(name: str, value: object, why: str) -> None:
    raise ValueError(f"drafter.{name}={value!r}: {why}")


@dataclass(frozen=True, slots=True, kw_only=True)
class DrafterSpec:
    """One external drafter checkpoint, as vLLM builds it (see the module docstring)."""

    name: str
    method: str = field(metadata={"help": "vLLM speculative method, e.g. 'dflash'"})
    num_layers: int
    hidden_size: int
    num_attention_heads: int
    num_kv_heads: int
    head_dim: int
    intermediate_size: int
    num_target_taps: int = field(metadata={"help": "target hidden states fed to fc"})
    target_hidden_size: int
    sliding_window_tok: int | None = field(
        default=None, metadata={"help": "None: full-attention drafter layers"}
    )
    max_position_embeddings: int
    vocab_size: int
    selector_rank: int = field(default=0, metadata={"help": "DFlash2 candidate selector"})
    conv_kernel_size: int = field(default=0, metadata={"help": "DFlash2 taps; 0: no convs"})
    conv_group_size: int = 0
    linear_format: str = field(default="none", metadata={"help": " | ".join(DRAFTER_WEIGHT_BYTES)})
    fc_quantized: bool = False
    weight_dtype: str = "bfloat16"
    model_runner: str = field(
        default="v1", metadata={"help": "the model runner this drafter makes vLLM select"}
    )
    checkpoint_bytes: int | None = field(
        default=None, metadata={"help": "published checkpoint size (a check, not an input)"}
    )
    sources: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        for f in fields(self):
            v = getattr(self, f.name)
            if f.type == "int" and (isinstance(v, bool) or not isinstance(v, int) or v < 1):
                _fail(f.name, v, "must be an int >= 1")
        for name in ("selector_rank", "conv_kernel_size", "conv_group_size"):
            v = getattr(self, name)
            if isinstance(v, bool) or not isinstance(v, int) or v < 0:
                _fail(name, v, "must be an int >= 0")
        sw = self.sliding_window_tok
        if sw is not None and (isinstance(sw, bool) or not isinstance(sw, int) or sw < 1):
            _fail("sliding_window_tok", sw, "must be an int >= 1 or None")
        if self.linear_format not in DRAFTER_WEIGHT_BYTES:
            _fail("linear_format", self.linear_format, f"one of {list(DRAFTER_WEIGHT_BYTES)}")
        if self.model_runner not in MODEL_RUNNERS:
            _fail("model_runner", self.model_runner, f"must be one of {list(MODEL_RUNNERS)}")
        if self.conv_kernel_size and (
            not self.conv_group_size or self.hidden_size % self.conv_group_size
        ):
            _fail("conv_group_size", self.conv_group_size, "must divide hidden_size")
        if self.num_kv_heads > self.num_attention_heads:
            _fail("num_kv_heads", self.num_kv_heads, "must be <= num_attention_heads")

    @property
    def fc_input_size(self) -> int:
        """``_get_dflash_fc_input_size``: target hidden size x number of tapped layers."""
        return self.num_target_taps * self.target_hidden_size

    @property
    def uses_v2_runner(self) -> bool:
        return self.model_runner == "v2"


def drafter_from_json(path: Path | str) -> DrafterSpec:
    """A drafter file: ``{"_hf_id": ..., "fields": {name: {"value": v, "source": s}}}``.

    Every field carries the public source it was read from; a field without one is refused
    (capsim plans no drafter constant without a citation)."""
    p = Path(path)
    try:
        raw: dict[str, Any] = json.loads(p.read_text())
    except (OSError, ValueError) as exc:
        raise ValueError(f"drafter file {str(p)!r}: {exc}") from None
    name = raw.get("_hf_id")
    if not isinstance(name, str) or not name:
        raise ValueError(f"drafter file {str(p)!r}: _hf_id={name!r} must be the HF id")
    known = {f.name for f in fields(DrafterSpec)} - {"name", "sources"}
    kwargs: dict[str, Any] = {}
    sources: list[str] = []
    for key, entry in (raw.get("fields") or {}).items():
        if key not in known:
            raise ValueError(f"drafter file {str(p)!r}: fields.{key} is not a DrafterSpec field")
        if not isinstance(entry, dict) or not entry.get("source"):
            raise ValueError(f"drafter file {str(p)!r}: fields.{key}={entry!r} needs a source")
        kwargs[key] = entry.get("value")
        sources.append(f"{key}: {entry['source']}")
    return DrafterSpec(name=name, sources=tuple(sources), **kwargs)


def drafters_in(directory: Path) -> dict[str, Path]:
    """HF id (lower case) -> drafter file in ``directory`` (``*.json``)."""
    out: dict[str, Path] = {}
    if not directory.is_dir():
        return out
    for path in sorted(directory.glob("*.json")):
        try:
            hf_id = json.loads(path.read_text()).get("_hf_id")
        except ValueError:
            continue
        if isinstance(hf_id, str) and hf_id:
            out[hf_id.lower()] = path
    return out
