"""The shipped compact workload files: names, columns, where they live, atomic read/write.

Token counts and arrival offsets only (no text), one Parquet file per source:

- ``sharegpt.parquet``: ShareGPT entries with >= 2 turns, in file order: ``entry_index``,
  ``qwen3_prompt_tok``, ``qwen3_output_tok``, ``qwen35_prompt_tok``, ``qwen35_output_tok``;
- ``spec_bench.parquet``: all Spec-Bench questions, in file order: ``question_id``,
  ``category``, ``qwen3_raw_tok``, ``qwen3_prompt_tok``, ``qwen35_raw_tok``,
  ``qwen35_prompt_tok`` (``*_prompt_tok``: inside the chat template, what vLLM sends);
- ``sharegpt_multiturn.parquet``: per turn of the first multi-turn conversations:
  ``entry_index``, ``turn``, ``qwen3_user_tok``, ``qwen3_asst_tok``, ``qwen35_user_tok``,
  ``qwen35_asst_tok`` (``capsim.traces.multiturn``; written by
  ``scripts/derive_traces/derive_multiturn.py``);
- ``azure_conv.parquet``, ``azure_code.parquet``: every request, in time order:
  ``arrival_s``, ``prompt_tok``, ``output_tok``.

They are package data under ``capsim/traces/data/`` (so an installed capsim finds them) and are
written by ``scripts/derive_traces/derive.py`` from ``shared/traces``.
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

import pandas as pd

from capsim.traces.errors import TraceFormatError

DATA_DIR = Path(__file__).resolve().parent / "data"

COMPACT_COLUMNS: dict[str, dict[str, str]] = {
    "sharegpt": {
        "entry_index": "int32",
        "qwen3_prompt_tok": "int32",
        "qwen3_output_tok": "int32",
        "qwen35_prompt_tok": "int32",
        "qwen35_output_tok": "int32",
    },
    "spec_bench": {
        "question_id": "int32",
        "category": "object",
        "qwen3_raw_tok": "int32",
        "qwen3_prompt_tok": "int32",
        "qwen35_raw_tok": "int32",
        "qwen35_prompt_tok": "int32",
    },
    "sharegpt_multiturn": {
        "entry_index": "int32",
        "turn": "int32",
        "qwen3_user_tok": "int32",
        "qwen3_asst_tok": "int32",
        "qwen35_user_tok": "int32",
        "qwen35_asst_tok": "int32",
    },
    "azure_conv": {"arrival_s": "float64", "prompt_tok": "int32", "output_tok": "int32"},
    "azure_code": {"arrival_s": "float64", "prompt_tok": "int32", "output_tok": "int32"},
}


def compact_path(stem: str, root: Path | None = None) -> Path:
    return (DATA_DIR if root is None else Path(root)) / f"{stem}.parquet"


def check_frame(stem: str, frame: pd.DataFrame, where: Path | str) -> pd.DataFrame:
    """Columns and dtypes exactly as ``COMPACT_COLUMNS`` says; returns them in that order."""
    want = COMPACT_COLUMNS[stem]
    if list(frame.columns) != list(want):
        raise TraceFormatError(where, f"columns {list(frame.columns)} are not {list(want)}")
    for col, dtype in want.items():
        if str(frame[col].dtype) != dtype:
            raise TraceFormatError(where, f"column {col} is {frame[col].dtype}, expected {dtype}")
    if len(frame) == 0:
        raise TraceFormatError(where, "no rows")
    return frame


def read_compact(stem: str, root: Path | None = None) -> pd.DataFrame:
    """One compact file as a DataFrame (checked); a missing file says how to make it."""
    path = compact_path(stem, root)
    if not path.is_file():
        raise FileNotFoundError(
            f"compact workload file {path} is missing; run "
            "'python scripts/derive_traces/derive.py --shared <shared/traces> --out <dir>' "
            "to create it"
        )
    frame = pd.read_parquet(path)
    if "category" in frame.columns:
        frame["category"] = frame["category"].astype(object)
    return check_frame(stem, frame, path)


def write_compact(stem: str, frame: pd.DataFrame, out_dir: Path) -> Path:
    """Write atomically (temp file + rename); deterministic content, zstd-compressed."""
    check_frame(stem, frame, out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    path = compact_path(stem, out_dir)
    fd, tmp = tempfile.mkstemp(dir=out_dir, prefix=f".{stem}.", suffix=".tmp")
    os.close(fd)
    try:
        frame.to_parquet(tmp, index=False, compression="zstd", engine="pyarrow")
        os.chmod(tmp, 0o644)  # mkstemp makes 0600; these are shipped, world-readable data
        os.replace(tmp, path)
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)
    return path
