"""Start-up log lines ``vllm_log.parse_vllm_log`` reads beyond the memory figures (issue 25).

Each function reads one kind of line and updates the parsed ``VllmLog``; ``parse_vllm_log``
calls ``apply_line_fixes`` on every line and ``finish`` once at the end. Parsing is bounded:
``read_bounded`` reads at most ``MAX_LOG_BYTES`` of a file, every line is cut at
``MAX_LINE_CHARS`` before a pattern sees it, and Python literals are evaluated only when the
text is under ``MAX_LITERAL_CHARS`` (longer dicts are read key by key by regular
expressions).
"""

from __future__ import annotations

import contextlib
import json
import re
import shlex
from pathlib import Path
from typing import Any

MAX_LOG_BYTES: int = 64 * 1024 * 1024
MAX_LINE_CHARS: int = 64 * 1024
MAX_LITERAL_CHARS: int = 16 * 1024

# The log line each figure of VllmLog.KEY_FIGURES comes from (for "the log lacks ..." notes).
LINE_OF: dict[str, str] = {
    "vllm_version": "'vLLM API server version X' / 'Initializing a V1 LLM engine (vX)'",
    "tp": "'tensor_parallel_size=N' in the engine config line, or --tensor-parallel-size",
    "gmu": "'Desired GPU memory utilization is (g, ...)' or --gpu-memory-utilization",
    "max_num_batched_tokens": "'Chunked prefill is enabled with max_num_batched_tokens=N'",
    "gpu_total_gib": "'Free memory on device (F/T GiB) on startup'",
    "weights_gib": "'Model loading took X GiB'",
    "peak_activation_gib": "'Actual usage is ... GiB for peak activation'",
    "cudagraph_estimate_gib": "'Estimated CUDA graph memory: X GiB total'",
    "available_kv_gib": "'Available KV cache memory: X GiB'",
    "kv_cache_tokens": "'GPU KV cache size: N tokens'",
    "attention_block_size": "'Setting attention block size to N tokens'",
}


def read_bounded(path: Path) -> str:
    """The first ``MAX_LOG_BYTES`` of ``path`` as text (undecodable bytes replaced)."""
    with Path(path).open("rb") as fh:
        data = fh.read(MAX_LOG_BYTES)
    return data.decode("utf-8", errors="replace")


def bounded_lines(text: str) -> list[str]:
    return [line[:MAX_LINE_CHARS] for line in text.splitlines()]


def dev_build(version: str | None) -> bool:
    """A vLLM built without release tags reports ``0.1.devN+g<sha>`` (setuptools-scm)."""
    return bool(version) and bool(re.match(r"^v?0\.1\.dev", str(version)))


_PROFILING_OVERRIDE = re.compile(r"Overriding num_gpu_blocks=0 with num_gpu_blocks_override=\d+")


def profiling_override(line: str) -> bool:
    """vLLM's CUDA-graph profiler sizes a minimal cache with ``num_gpu_blocks_override =
    min(max_num_seqs, max capture size)`` over a budget of 0 bytes (0.26.0 gpu_model_runner.
    _init_minimal_kv_cache_for_profiling), logging "Overriding num_gpu_blocks=0 with
    num_gpu_blocks_override=512": not a user pin."""
    return bool(_PROFILING_OVERRIDE.search(line))


_FLAG_FIELDS: dict[str, tuple[str, Any]] = {
    "--tensor-parallel-size": ("tp", int),
    "-tp": ("tp", int),
    "--gpu-memory-utilization": ("gmu", float),
    "--max-model-len": ("max_model_len", int),
    "--max-num-seqs": ("max_num_seqs", int),
    "--max-num-batched-tokens": ("max_num_batched_tokens", int),
    "--max-num-batched-token": ("max_num_batched_tokens", int),
    "--kv-cache-dtype": ("kv_cache_dtype", str),
    "--quantization": ("quantization", str),
    "-q": ("quantization", str),
    "--num-gpu-blocks-override": ("num_gpu_blocks_override", int),
}


def serve_command(line: str) -> dict[str, Any]:
    """Settings of a logged ``vllm serve MODEL --flag value ...`` command line."""
    at = line.find("vllm serve ")
    if at < 0:
        return {}
    try:
        words = shlex.split(line[at + len("vllm serve ") :], posix=True)
    except ValueError:
        words = line[at + len("vllm serve ") :].split()
    out: dict[str, Any] = {}
    if words and not words[0].startswith("-"):
        out["model"] = words[0].rstrip("/")
    i = 0
    while i < len(words):
        w = words[i]
        flag, _, inline = w.partition("=")
        flag_us = flag.replace("_", "-")
        if flag_us in _FLAG_FIELDS:
            value = inline or (words[i + 1] if i + 1 < len(words) else "")
            attr, conv = _FLAG_FIELDS[flag_us]
            with contextlib.suppress(ValueError):
                out[attr] = conv(value.strip("'\""))
            i += 1 if inline else 2
            continue
        if flag_us == "--enable-prefix-caching":
            out["enable_prefix_caching"] = True
        elif flag_us == "--no-enable-prefix-caching":
            out["enable_prefix_caching"] = False
        elif flag_us == "--enforce-eager":
            out["enforce_eager"] = True
        elif flag_us == "--disable-custom-all-reduce":
            out["disable_custom_all_reduce"] = True
        elif flag_us == "--speculative-config" and i + 1 < len(words):
            spec = inline or words[i + 1]
            if len(spec) <= MAX_LITERAL_CHARS:
                try:
                    cfg = json.loads(spec)
                    out["num_speculative_tokens"] = int(cfg.get("num_speculative_tokens", 0))
                    out["speculative_method"] = str(cfg.get("method", "mtp"))
                except (ValueError, AttributeError, TypeError):
                    pass
        i += 1
    return out


_ARCH = re.compile(r"Resolved architecture: (\w+)|architectures=\[?'?(\w+)")

# vLLM architecture -> capsim preset families (the preset is chosen by the name's size tag).
ARCH_PRESETS: dict[str, tuple[str, ...]] = {
    "Qwen3_5MoeForConditionalGeneration": ("qwen3.5-35b-a3b", "qwen3.5-397b-a17b"),
    "Qwen3_5MoeForCausalLM": ("qwen3.5-35b-a3b", "qwen3.5-397b-a17b"),
    "Qwen3NextForCausalLM": ("qwen3-next-80b-a3b",),
}


def architecture(line: str) -> str | None:
    m = _ARCH.search(line)
    if not m:
        return None
    return m.group(1) or m.group(2)


def preset_for(arch: str | None, names: list[str | None], weights_gib: float | None) -> str | None:
    """The capsim preset of a logged architecture: the family's member whose size tag
    ("35b", "397b", ...) is in a logged name, else the one whose weights are closest to the
    logged "Model loading took X GiB" (None when neither decides)."""
    family = ARCH_PRESETS.get(arch or "", ())
    if not family:
        return None
    text = " ".join(n.lower() for n in names if n)
    for preset in family:
        tag = preset.split("-")[1]  # "35b", "397b", "next" ...
        if re.search(rf"(?<![0-9]){re.escape(tag)}", text):
            return preset
    if len(family) == 1:
        return family[0]
    if weights_gib is None:
        return None
    from capsim.memory.weights import weight_breakdown_bytes
    from capsim.models import get_model

    def gap(name: str) -> float:
        w = sum(weight_breakdown_bytes(get_model(name), 1, with_mtp=False).values())
        return abs(w / 2**30 - weights_gib)

    return min(family, key=gap)


_DEBUG_SAMPLE = re.compile(
    r"Estimated (PIECEWISE|FULL) CUDA graph memory: ([0-9.]+) MiB first-capture \+ "
    r"\((\d+)-1\) .{1,3} ([0-9.]+) MiB per-graph"
)


def apply_line_fixes(log: Any, line: str) -> None:
    """Every fix that reads one line (see the module docstring)."""
    if "speculative_config=None" in line and log.num_speculative_tokens is None:
        log.num_speculative_tokens = 0
    if re.search(r"[Dd]isabling prefix caching", line):
        log.enable_prefix_caching = False
        log.prefix_caching_disabled_by_vllm = True
    m = re.search(r"Chunked prefill is enabled with max_num_batched_tokens=(\d+)", line)
    if m and log.max_num_batched_tokens is None:
        log.max_num_batched_tokens = int(m.group(1))
    if "is not supported with spec-decode" in line and "setting cudagraph_mode=PIECEWISE" in line:
        log.full_graphs = False
    arch = architecture(line)
    if arch and log.architecture is None:
        log.architecture = arch
    m = _DEBUG_SAMPLE.search(line)
    if m:
        log.cudagraph_samples_mib.setdefault(
            m.group(1), (float(m.group(2)), int(m.group(3)), float(m.group(4)))
        )
    if "vllm serve " in line:
        for attr, value in serve_command(line).items():
            if getattr(log, attr) is None:
                setattr(log, attr, value)


def finish(log: Any) -> None:
    """Fixes that need the whole log."""
    if (
        log.cudagraph_piecewise is not None
        and log.cudagraph_full is None
        and log.full_graphs is None
    ):
        log.full_graphs = False  # "Profiling CUDA graph memory: PIECEWISE=n" and no FULL
    if log.cudagraph_full is not None:
        log.full_graphs = True


def missing_lines(log: Any) -> list[str]:
    """'figure (the line it comes from)' for each key figure the log lacks."""
    return [f"{name} ({LINE_OF.get(name, 'not logged')})" for name in log.missing()]
