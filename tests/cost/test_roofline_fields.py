"""The roofline model's precomputed per-step figures (weight, KV and state bytes, FLOPs)
over 144 configurations (three presets, TP 1/2/8, four speculation settings, bf16 and FP8
weights, the state dtype), pinned by one digest. The digest was taken from the code
before ``RooflineStepTime.__init__`` was split into helpers (main 5b6e5c9, 2026-12-02):
a refactor that changes any of these numbers fails here."""

from __future__ import annotations

import hashlib
import json

from capsim.config import EngineConfig, SpecDecodeConfig
from capsim.cost.roofline import RooflineStepTime
from capsim.gpus import get_gpu
from capsim.models import get_model

DIGEST_5B6E5C9 = "010a0a6459711b129111b3e2dde4d708075a537388419b8ca9c07a57e0058791"


def _fields() -> dict[str, dict[str, str]]:
    out: dict[str, dict[str, str]] = {}
    specs = (
        SpecDecodeConfig(),
        SpecDecodeConfig(num_spec_tok=0),
        SpecDecodeConfig(commit="reconstruct"),
        SpecDecodeConfig(commit="deferred"),
    )
    for m in ("qwen3.5-35b-a3b", "qwen3-next-80b-a3b", "qwen3.5-397b-a17b"):
        for tp in (1, 2, 8):
            for spec in specs:
                for q in (None, "fp8"):
                    for sd in (None, "bfloat16"):
                        model = get_model(m)
                        if q:
                            model = EngineConfig(quantization=q).model_for(model)
                        r = RooflineStepTime(
                            model, get_gpu("h200"), tp, spec, state_dtype=sd, kv_dtype="bfloat16"
                        )
                        out[f"{m}|{tp}|{spec}|{q}|{sd}"] = {
                            k: repr(v) for k, v in sorted(vars(r).items()) if k.startswith("_")
                        }
    return out


def test_precomputed_figures_are_unchanged() -> None:
    text = json.dumps(_fields(), sort_keys=True) + "\n"
    assert hashlib.sha256(text.encode()).hexdigest() == DIGEST_5B6E5C9
