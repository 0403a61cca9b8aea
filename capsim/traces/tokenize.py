"""Qwen token counters, only for re-deriving the compact files (needs ``tokenizers``/``tiktoken``).

Counting rule of ``vllm bench serve`` (``NOTES.md`` §2): ``len(tokenizer(text).input_ids)``;
Qwen tokenizers add no BOS/EOS, so this is the plain BPE count.

- Qwen3 (``tokenizers/qwen3/tokenizer.json``, official, hash-verified): HF ``tokenizers``.
- Qwen3.5 (``tokenizers/qwen3.5/qwen3_5.tiktoken``, third-party conversion): ``tiktoken`` with the
  split pattern, NFC normalisation and the 33 special tokens from ids 248044 that its
  ``PROVENANCE.md`` lists.

``CHAT_TEMPLATE`` is Qwen3's template for one user turn with the generation prompt (the
``tokenizers/qwen3/PROVENANCE.md`` form, 8 tokens over the raw text); Qwen3.5's template was not
available, so the same string is used for it (``NOTES.md`` §6).
"""

from __future__ import annotations

import base64
import unicodedata
from collections.abc import Callable
from pathlib import Path

TokenCounter = Callable[[str], int]

CHAT_TEMPLATE = "<|im_start|>user\n{text}<|im_end|>\n<|im_start|>assistant\n"

QWEN35_PATTERN = (
    r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?[\p{L}\p{M}]+|\p{N}|"
    r" ?[^\s\p{L}\p{M}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+"
)
QWEN35_SPECIALS = (
    "<|endoftext|>",
    "<|im_start|>",
    "<|im_end|>",
    "<|object_ref_start|>",
    "<|object_ref_end|>",
    "<|box_start|>",
    "<|box_end|>",
    "<|quad_start|>",
    "<|quad_end|>",
    "<|vision_start|>",
    "<|vision_end|>",
    "<|vision_pad|>",
    "<|image_pad|>",
    "<|video_pad|>",
    "<tool_call>",
    "</tool_call>",
    "<|fim_prefix|>",
    "<|fim_middle|>",
    "<|fim_suffix|>",
    "<|fim_pad|>",
    "<|repo_name|>",
    "<|file_sep|>",
    "<tool_response>",
    "</tool_response>",
    "<think>",
    "</think>",
    "<|audio_start|>",
    "<|audio_end|>",
    "<tts_pad>",
    "<tts_text_bos>",
    "<tts_text_eod>",
    "<tts_text_bos_single>",
    "<|audio_pad|>",
)
QWEN35_FIRST_SPECIAL_ID = 248044


def _missing(package: str, extra: str) -> ImportError:
    return ImportError(
        f"re-deriving token counts needs the '{package}' package "
        f"(pip install {package}, or the capsim[{extra}] extra)"
    )


def qwen3_counter(tokenizer_json: Path | str) -> TokenCounter:
    """Token counter from the Qwen3 ``tokenizer.json``."""
    try:
        from tokenizers import Tokenizer
    except ImportError as exc:
        raise _missing("tokenizers", "traces") from exc
    tok = Tokenizer.from_file(str(tokenizer_json))

    def count(text: str) -> int:
        return len(tok.encode(text).ids)

    return count


def qwen35_counter(tiktoken_file: Path | str) -> TokenCounter:
    """Token counter from the Qwen3.5 tiktoken rank file."""
    try:
        import tiktoken
    except ImportError as exc:
        raise _missing("tiktoken", "traces") from exc
    ranks: dict[bytes, int] = {}
    for line in Path(tiktoken_file).read_bytes().splitlines():
        if line.strip():
            token, rank = line.split()
            ranks[base64.b64decode(token)] = int(rank)
    specials = {s: QWEN35_FIRST_SPECIAL_ID + i for i, s in enumerate(QWEN35_SPECIALS)}
    enc = tiktoken.Encoding(
        name="qwen3_5",
        pat_str=QWEN35_PATTERN,
        mergeable_ranks=ranks,
        special_tokens=specials,
    )

    def count(text: str) -> int:
        return len(enc.encode(unicodedata.normalize("NFC", text), allowed_special="all"))

    return count


def templated(text: str) -> str:
    """``text`` as the single user turn of the chat template, with the generation prompt."""
    return CHAT_TEMPLATE.format(text=text)
