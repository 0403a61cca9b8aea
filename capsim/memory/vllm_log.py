"""Parse a vLLM start-up log into the settings and memory figures it prints.

Lines read (vLLM v1, 0.10 to 0.33; the message texts are vLLM's):

- the banner "version X" / "vLLM API server version X" / "Initializing a V1 LLM engine
  (vX) with config: ..." (engine settings: tensor_parallel_size, max_seq_len,
  quantization, kv_cache_dtype, enforce_eager, speculative num_spec_tokens);
- "non-default args: {...}" (user flags; a truncated dict is read key by key);
- "Model loading took X GiB" (weights);
- "Free memory on device (F/T GiB) on startup. Desired GPU memory utilization is (g, R
  GiB). Actual usage is ..." in both forms: before 0.27 "W GiB for weight, A GiB for peak
  activation, N GiB for non-torch memory, and C GiB for CUDAGraph memory"; in 0.33
  "X GiB for consumed memory (weights + non-torch), A' GiB for peak activation, and C GiB
  for CUDAGraph memory" where A' includes the charged graph estimate
  (``gpu_worker.determine_available_memory``: peak_activation_memory = transient +
  estimate);
- older (0.10) "model weights take W GiB; non_torch_memory takes N GiB; PyTorch
  activation peak memory takes A GiB";
- "Estimated CUDA graph memory: C GiB total", "CUDA graph pool memory: A GiB (actual),
  E GiB (estimated)", "Graph capturing finished in s secs, took C GiB";
- "Available KV cache memory: K GiB", "GPU KV cache size: N tokens", "Maximum
  concurrency for L tokens per request: Xx", "Setting attention block size to B tokens",
  "Padding mamba page size by P%", "Add N padding layers", "Overriding num_gpu_blocks=.. with
  num_gpu_blocks_override=N", "# GPU blocks: N".

Figures vLLM prints in GiB rounded to 2 decimals are kept as GiB floats.
"""

from __future__ import annotations

import ast
import contextlib
import re
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any

from capsim.memory.log_fixes import (
    MAX_LITERAL_CHARS,
    apply_line_fixes,
    bounded_lines,
    finish,
    read_bounded,
)

_NUM = r"([0-9][0-9,]*\.?[0-9]*)"


def _f(text: str) -> float:
    return float(text.replace(",", ""))


@dataclass(slots=True)
class VllmLog:
    """What one start-up log says; None where the log does not say it."""

    vllm_version: str | None = None
    model: str | None = None
    served_model_name: str | None = None
    tp: int | None = None
    gmu: float | None = None
    max_model_len: int | None = None
    max_num_seqs: int | None = None
    max_num_batched_tokens: int | None = None
    kv_cache_dtype: str | None = None
    quantization: str | None = None
    enforce_eager: bool | None = None
    disable_custom_all_reduce: bool | None = None
    enable_prefix_caching: bool | None = None
    num_speculative_tokens: int | None = None
    speculative_method: str | None = None
    speculative_model: str | None = None  # an external drafter's path or HF id
    limit_mm_per_prompt: int | None = None
    kv_cache_memory_bytes: int | None = None
    num_gpu_blocks_override: int | None = None
    gpu_total_gib: float | None = None
    gpu_free_gib: float | None = None
    requested_gib: float | None = None
    weights_gib: float | None = None
    consumed_gib: float | None = None
    peak_activation_gib: float | None = None
    peak_activation_incl_graph_gib: float | None = None
    non_torch_gib: float | None = None
    cudagraph_estimate_gib: float | None = None
    cudagraph_actual_gib: float | None = None
    cudagraph_piecewise: int | None = None
    cudagraph_full: int | None = None
    cudagraph_largest: int | None = None
    available_kv_gib: float | None = None
    kv_cache_tokens: int | None = None
    max_concurrency: float | None = None
    max_concurrency_tokens: int | None = None
    attention_block_size: int | None = None
    mamba_page_padding_pct: float | None = None
    padding_layers: list[int] = field(default_factory=list)
    num_gpu_blocks: int | None = None
    architecture: str | None = None
    full_graphs: bool | None = None
    prefix_caching_disabled_by_vllm: bool = False
    cudagraph_samples_mib: dict[str, tuple[float, int, float]] = field(default_factory=dict)
    lines_read: int = 0

    # The figures a memory comparison needs; ``missing()`` names the absent ones.
    KEY_FIGURES = (
        "vllm_version",
        "tp",
        "gmu",
        "max_num_batched_tokens",
        "gpu_total_gib",
        "weights_gib",
        "peak_activation_gib",
        "cudagraph_estimate_gib",
        "available_kv_gib",
        "kv_cache_tokens",
        "attention_block_size",
    )

    def missing(self) -> list[str]:
        return [name for name in self.KEY_FIGURES if getattr(self, name) is None]

    def as_dict(self) -> dict[str, Any]:
        return {f.name: getattr(self, f.name) for f in fields(self)}


_ARG_KEYS: dict[str, str] = {
    "model": "model",
    "tensor_parallel_size": "tp",
    "gpu_memory_utilization": "gmu",
    "max_model_len": "max_model_len",
    "max_num_seqs": "max_num_seqs",
    "max_num_batched_tokens": "max_num_batched_tokens",
    "kv_cache_dtype": "kv_cache_dtype",
    "quantization": "quantization",
    "enforce_eager": "enforce_eager",
    "disable_custom_all_reduce": "disable_custom_all_reduce",
    "enable_prefix_caching": "enable_prefix_caching",
    "kv_cache_memory_bytes": "kv_cache_memory_bytes",
    "num_gpu_blocks_override": "num_gpu_blocks_override",
}


def _non_default_args(text: str) -> dict[str, Any]:
    """The dict after "non-default args:"; a truncated dict is read key by key."""
    body = text.split("non-default args:", 1)[1].strip()
    if len(body) <= MAX_LITERAL_CHARS:
        try:
            parsed = ast.literal_eval(body)
            if isinstance(parsed, dict):
                return parsed
        except (ValueError, SyntaxError, MemoryError, RecursionError):
            pass
    out: dict[str, Any] = {}
    for m in re.finditer(r"'(\w+)':\s*('[^']*'|-?[0-9.]+(?:e-?\d+)?|True|False|None)", body):
        try:
            out[m.group(1)] = ast.literal_eval(m.group(2))
        except (ValueError, SyntaxError):
            continue
    m = re.search(r"'speculative_config':\s*\{[^}]*'num_speculative_tokens':\s*(\d+)", body)
    if m:
        out["speculative_config"] = {"num_speculative_tokens": int(m.group(1))}
        mm = re.search(r"'speculative_config':\s*\{[^}]*'method':\s*'(\w+)'", body)
        if mm:
            out["speculative_config"]["method"] = mm.group(1)
        md = re.search(r"'speculative_config':\s*\{[^}]*'model':\s*'([^']+)'", body)
        if md:
            out["speculative_config"]["model"] = md.group(1)
    m = re.search(r"'served_model_name':\s*\['([^']*)'", body)
    if m:
        out["served_model_name"] = [m.group(1)]
    m = re.search(r"'limit_mm_per_prompt':\s*(\{[^}]*\})", body)
    if m:
        with contextlib.suppress(ValueError, SyntaxError):
            if len(m.group(1)) <= MAX_LITERAL_CHARS:
                out["limit_mm_per_prompt"] = ast.literal_eval(m.group(1))
    return out


def _apply_args(log: VllmLog, args: dict[str, Any]) -> None:
    for key, attr in _ARG_KEYS.items():
        if key in args and args[key] is not None:
            setattr(log, attr, args[key])
    served = args.get("served_model_name")
    if isinstance(served, list | tuple) and served:
        log.served_model_name = str(served[0])
    elif isinstance(served, str):
        log.served_model_name = served
    spec = args.get("speculative_config")
    if isinstance(spec, dict):
        if spec.get("num_speculative_tokens") is not None:
            log.num_speculative_tokens = int(spec["num_speculative_tokens"])
        if spec.get("method"):
            log.speculative_method = str(spec["method"])
        if spec.get("model"):
            log.speculative_model = str(spec["model"])
    mm = args.get("limit_mm_per_prompt")
    if isinstance(mm, dict):
        log.limit_mm_per_prompt = max(
            (int(v) for v in mm.values() if isinstance(v, int)), default=0
        )
    elif isinstance(mm, int):
        log.limit_mm_per_prompt = mm
    if args.get("language_model_only") is True:
        log.limit_mm_per_prompt = 0


def _engine_config(log: VllmLog, line: str) -> None:
    m = re.search(r"Initializing a V1 LLM engine \(v([^)]+)\)", line)
    if m:
        log.vllm_version = log.vllm_version or m.group(1)
    for key, attr, conv in (
        ("tensor_parallel_size", "tp", int),
        ("max_seq_len", "max_model_len", int),
    ):
        m = re.search(rf"\b{key}=(\d+)", line)
        if m and getattr(log, attr) is None:
            setattr(log, attr, conv(m.group(1)))
    m = re.search(r"\bquantization=([\w-]+)", line)
    if m and log.quantization is None and m.group(1) != "None":
        log.quantization = m.group(1)
    m = re.search(r"\bkv_cache_dtype=(\w+)", line)
    if m and log.kv_cache_dtype is None:
        log.kv_cache_dtype = m.group(1)
    m = re.search(r"\bdisable_custom_all_reduce=(True|False)", line)
    if m and log.disable_custom_all_reduce is None:
        log.disable_custom_all_reduce = m.group(1) == "True"
    m = re.search(r"\benforce_eager=(True|False)", line)
    if m and log.enforce_eager is None:
        log.enforce_eager = m.group(1) == "True"
    # the engine's resolved setting (vLLM's default for the release and model included)
    m = re.search(r"\benable_prefix_caching=(True|False)", line)
    if m and log.enable_prefix_caching is None:
        log.enable_prefix_caching = m.group(1) == "True"
    m = re.search(r"SpeculativeConfig\(method='(\w+)'.*?num_spec_tokens=(\d+)", line)
    if m:
        log.speculative_method = log.speculative_method or m.group(1)
        if log.num_speculative_tokens is None:
            log.num_speculative_tokens = int(m.group(2))


def _int_f(text: str) -> int:
    return int(_f(text))


_SKIP = ("", str)
# One row per start-up line capsim reads: the pattern, then (field, converter) for each group
# in order ("" skips a group). Rows are tried in this order and the first value of a field wins.
_LINE_FIELDS: tuple[tuple[re.Pattern[str], tuple[tuple[str, Any], ...]], ...] = tuple(
    (re.compile(pattern), attrs)
    for pattern, attrs in (
        (rf"Model loading took {_NUM} ?GiB", (("weights_gib", _f),)),
        (
            rf"Free memory on device \({_NUM}/{_NUM} GiB\)",
            (("gpu_free_gib", _f), ("gpu_total_gib", _f)),
        ),
        (
            rf"Desired GPU memory utilization is \({_NUM}, {_NUM} GiB\)",
            (("gmu", _f), ("requested_gib", _f)),
        ),
        (
            rf"Actual usage is {_NUM} GiB for weight, {_NUM} GiB for peak activation, "
            rf"{_NUM} GiB for non-torch memory, and {_NUM} GiB for CUDAGraph memory",
            (
                ("weights_gib", _f),
                ("peak_activation_gib", _f),
                ("non_torch_gib", _f),
                ("cudagraph_actual_gib", _f),
            ),
        ),
        (
            # 0.33: peak activation includes the charged graph estimate; split after parsing.
            rf"Actual usage is {_NUM} GiB for consumed memory \(weights \+ non-torch\), "
            rf"{_NUM} GiB for peak activation, and {_NUM} GiB for CUDAGraph memory",
            (
                ("consumed_gib", _f),
                ("peak_activation_incl_graph_gib", _f),
                ("cudagraph_actual_gib", _f),
            ),
        ),
        (
            rf"model weights take {_NUM} ?GiB; non_torch_memory takes {_NUM} ?GiB; "
            rf"PyTorch activation peak memory takes {_NUM} ?GiB",
            (("weights_gib", _f), ("non_torch_gib", _f), ("peak_activation_gib", _f)),
        ),
        (
            rf"total_gpu_memory \({_NUM} ?GiB\) x gpu_memory_utilization \({_NUM}\)",
            (("gpu_total_gib", _f), ("gmu", _f)),
        ),
        (rf"Estimated CUDA graph memory: {_NUM} GiB total", (("cudagraph_estimate_gib", _f),)),
        (
            rf"CUDA graph pool memory: {_NUM} GiB \(actual\), {_NUM} GiB \(estimated\)",
            (("cudagraph_actual_gib", _f), ("cudagraph_estimate_gib", _f)),
        ),
        (
            rf"Graph capturing finished in {_NUM} secs?, took {_NUM} GiB",
            (_SKIP, ("cudagraph_actual_gib", _f)),
        ),
        (r"--gpu-memory-utilization=([0-9.]+) is equivalent to", (("gmu", _f),)),
        (rf"Available KV cache memory: {_NUM} ?GiB", (("available_kv_gib", _f),)),
        (rf"Current kv cache memory in use is {_NUM} GiB", (("available_kv_gib", _f),)),
        (rf"GPU KV cache size: {_NUM} tokens", (("kv_cache_tokens", _int_f),)),
        (
            rf"Maximum concurrency for {_NUM} tokens per request: {_NUM}x",
            (("max_concurrency_tokens", _int_f), ("max_concurrency", _f)),
        ),
        (r"Setting attention block size to (\d+) tokens", (("attention_block_size", int),)),
        (rf"Padding mamba page size by {_NUM}%", (("mamba_page_padding_pct", _f),)),
        (
            r"Overriding num_gpu_blocks=[1-9]\d* with num_gpu_blocks_override=(\d+)",
            (("num_gpu_blocks_override", int),),
        ),
        (
            r"Overriding num_gpu_blocks=[1-9]\d* with num_gpu_blocks_override=(\d+)",
            (("num_gpu_blocks", int),),
        ),
        (r"# GPU blocks: (\d+)", (("num_gpu_blocks", int),)),
    )
)


def parse_vllm_log(text: str) -> VllmLog:
    """Read every line vLLM prints at start-up that capsim knows (first value wins)."""
    log = VllmLog()

    def first(attr: str, value: Any) -> None:
        if getattr(log, attr) is None:
            setattr(log, attr, value)

    for line in bounded_lines(text):
        if line.startswith("#"):
            continue
        before = log.as_dict()
        apply_line_fixes(log, line)
        if "non-default args:" in line:
            _apply_args(log, _non_default_args(line))
        if "Initializing a V1 LLM engine" in line or "SpeculativeConfig(" in line:
            _engine_config(log, line)
        m = re.search(r"(?:\bversion|API server version)\s+v?(\d+\.\d+\.(?:\d+|dev\d+)\S*)", line)
        if m and "Initializing" not in line:
            first("vllm_version", m.group(1))
        for pattern, attrs in _LINE_FIELDS:
            m = pattern.search(line)
            if m:
                for (attr, conv), text in zip(attrs, m.groups(), strict=True):
                    if attr:
                        first(attr, conv(text))
        if "Profiling CUDA graph memory: " in line:
            for mode, n, largest in re.findall(r"(PIECEWISE|FULL)=(\d+) \(largest=(\d+)\)", line):
                first(f"cudagraph_{mode.lower()}", int(n))
                log.cudagraph_largest = max(log.cudagraph_largest or 0, int(largest))
        m = re.search(r"Add (\d+) padding layers", line)
        if m:
            log.padding_layers.append(int(m.group(1)))
        if log.as_dict() != before:
            log.lines_read += 1
    incl = log.peak_activation_incl_graph_gib
    if incl is not None and log.peak_activation_gib is None:
        est = log.cudagraph_estimate_gib or 0.0
        log.peak_activation_gib = round(incl - est, 2)
    if log.consumed_gib is not None and log.weights_gib is not None and log.non_torch_gib is None:
        log.non_torch_gib = round(log.consumed_gib - log.weights_gib, 2)
    if isinstance(log.tp, str):
        log.tp = int(log.tp)
    finish(log)
    return log


def read_vllm_log(path: Path) -> VllmLog:
    try:
        text = read_bounded(Path(path))
    except FileNotFoundError:
        raise ValueError(f"--from-log {path}: file does not exist") from None
    log = parse_vllm_log(text)
    if log.lines_read == 0:
        raise ValueError(f"--from-log {path}: no vLLM start-up line found in the file")
    return log
