"""A Hugging Face model dir for `vllm serve --load-format dummy` of Qwen3.5-35B-A3B.

No weights: vLLM fills random ones. What vLLM reads is written here from capsim's own
config of the preset (experiments/vllm_logs/models/qwen3.5-35b-a3b.json, keys starting
with `_` dropped) plus:
- the vision token ids of the Qwen3 tokenizer that travels with it (shared/traces/
  tokenizers/qwen3/tokenizer.json: <|vision_start|> 151652, <|vision_end|> 151653,
  <|image_pad|> 151655, <|video_pad|> 151656; the model's own ids, 248053.., are past this
  tokenizer's 151,669 ids, but all ids stay below the 248,320-row embedding);
- the rotary block Qwen3.5 uses (multimodal rope, sections [11, 11, 10], interleaved,
  partial rotary 0.25, theta 1e7; shared/REAL_VLLM_H200.md "Starting it");
- the small tokenizer/generation/processor configs of the Qwen3-VL processor family.
None of these change the memory plan (shared/REAL_VLLM_H200.md).
"""

from __future__ import annotations

import json
import os
from pathlib import Path

VISION_TOKEN_IDS = {
    "image_token_id": 151655,
    "video_token_id": 151656,
    "vision_start_token_id": 151652,
    "vision_end_token_id": 151653,
}
EOS_TOKEN_ID = 151645  # <|im_end|>
PAD_TOKEN_ID = 151643  # <|endoftext|>
ROPE_PARAMETERS = {
    "rope_type": "default",
    "rope_theta": 10000000.0,
    "partial_rotary_factor": 0.25,
    "mrope_section": [11, 11, 10],
    "mrope_interleaved": True,
}
_IMAGE_NORM = {"image_mean": [0.5, 0.5, 0.5], "image_std": [0.5, 0.5, 0.5]}
# 16384 image tokens at most: longest_edge 16,777,216 px / (16 px patch * 2 merge)^2.
PREPROCESSOR = {
    "image_processor_type": "Qwen2VLImageProcessorFast",
    "processor_class": "Qwen3VLProcessor",
    "patch_size": 16,
    "temporal_patch_size": 2,
    "merge_size": 2,
    "do_resize": True,
    "do_rescale": True,
    "rescale_factor": 1 / 255,
    "do_normalize": True,
    "do_convert_rgb": True,
    **_IMAGE_NORM,
    "size": {"shortest_edge": 65536, "longest_edge": 16777216},
}
VIDEO_PREPROCESSOR = {
    "video_processor_type": "Qwen3VLVideoProcessor",
    "processor_class": "Qwen3VLProcessor",
    "patch_size": 16,
    "temporal_patch_size": 2,
    "merge_size": 2,
    "do_resize": True,
    "do_rescale": True,
    "rescale_factor": 1 / 255,
    "do_normalize": True,
    "do_convert_rgb": True,
    **_IMAGE_NORM,
    "do_sample_frames": True,
    "fps": 2,
    "min_frames": 4,
    "max_frames": 768,
    "size": {"shortest_edge": 4096, "longest_edge": 25165824},
}
CHAT_TEMPLATE = (
    "{% for m in messages %}<|im_start|>{{ m['role'] }}\n{{ m['content'] }}"
    "<|im_end|>\n{% endfor %}{% if add_generation_prompt %}<|im_start|>assistant\n"
    "{% endif %}"
)
TOKENIZER_CONFIG = {
    "tokenizer_class": "Qwen2Tokenizer",
    "model_max_length": 262144,
    "eos_token": "<|im_end|>",
    "pad_token": "<|endoftext|>",
    "bos_token": None,
    "add_bos_token": False,
    "errors": "replace",
    "clean_up_tokenization_spaces": False,
    "chat_template": CHAT_TEMPLATE,
}
GENERATION_CONFIG = {
    "eos_token_id": [EOS_TOKEN_ID, PAD_TOKEN_ID],
    "pad_token_id": PAD_TOKEN_ID,
    "do_sample": False,
}


def model_config(capsim_config: dict) -> dict:
    """config.json: capsim's config without `_` keys, plus token ids and the rope block."""
    cfg = {k: v for k, v in capsim_config.items() if not k.startswith("_")}
    text = dict(cfg["text_config"])
    text["rope_parameters"] = dict(ROPE_PARAMETERS)
    text["eos_token_id"] = EOS_TOKEN_ID
    text["pad_token_id"] = PAD_TOKEN_ID
    cfg["text_config"] = text
    cfg.update(VISION_TOKEN_IDS)
    return cfg


def _write_json(path: Path, obj: dict) -> None:
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(json.dumps(obj, indent=2, sort_keys=True) + "\n")
    os.replace(tmp, path)


def write_model_dir(capsim_config_path: Path, tokenizer_json: Path, out: Path) -> Path:
    """Write the model dir `out` (idempotent: same inputs, same bytes)."""
    out.mkdir(parents=True, exist_ok=True)
    cfg = model_config(json.loads(capsim_config_path.read_text()))
    _write_json(out / "config.json", cfg)
    _write_json(out / "tokenizer_config.json", TOKENIZER_CONFIG)
    _write_json(out / "generation_config.json", GENERATION_CONFIG)
    _write_json(out / "preprocessor_config.json", PREPROCESSOR)
    _write_json(out / "video_preprocessor_config.json", VIDEO_PREPROCESSOR)
    tok = out / "tokenizer.json"
    if not tok.exists() or tok.stat().st_size != tokenizer_json.stat().st_size:
        tmp = out / "tokenizer.json.tmp"
        tmp.write_bytes(tokenizer_json.read_bytes())
        os.replace(tmp, tok)
    return out
