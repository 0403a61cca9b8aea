"""Atomic file writes: write to a temporary file in the same folder, then rename.

Files get mode 0644 (``mkstemp`` creates 0600; results are meant to be shared). JSON is
strict: NaN and infinities are written as ``null`` (``json_safe``), never as ``NaN``.
"""

from __future__ import annotations

import contextlib
import json
import math
import os
import tempfile
from pathlib import Path
from typing import Any

import pandas as pd

FILE_MODE = 0o644


def _tmp_path(path: Path) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, name = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    os.close(fd)
    return Path(name)


def _commit(tmp: Path, path: Path) -> None:
    os.chmod(tmp, FILE_MODE)
    os.replace(tmp, path)


def write_bytes_atomic(path: Path, data: bytes) -> None:
    tmp = _tmp_path(path)
    try:
        tmp.write_bytes(data)
        _commit(tmp, path)
    finally:
        with contextlib.suppress(FileNotFoundError):
            tmp.unlink()


def json_safe(obj: Any) -> Any:
    """``obj`` with numpy scalars/arrays as Python values and non-finite floats as None."""
    if isinstance(obj, dict):
        return {str(k): json_safe(v) for k, v in obj.items()}
    if isinstance(obj, list | tuple | set):
        return [json_safe(v) for v in obj]
    if hasattr(obj, "tolist") and not isinstance(obj, str):  # numpy scalar or array
        return json_safe(obj.tolist())
    if isinstance(obj, float) and not math.isfinite(obj):
        return None
    return obj


def dumps_json(obj: Any, indent: int | None = 2) -> str:
    """Strict JSON text (NaN -> null); anything else unknown is written as its str()."""
    return json.dumps(json_safe(obj), indent=indent, sort_keys=True, default=str, allow_nan=False)


def write_json_atomic(path: Path, obj: Any) -> None:
    write_bytes_atomic(path, (dumps_json(obj) + "\n").encode())


def write_parquet_atomic(
    path: Path, df: pd.DataFrame, *, metadata: dict[str, str] | None = None, **kwargs: Any
) -> None:
    """``df`` as Parquet; ``metadata`` adds key-value pairs to the file's schema."""
    tmp = _tmp_path(path)
    try:
        if metadata:
            import pyarrow as pa
            import pyarrow.parquet as pq

            table = pa.Table.from_pandas(df, preserve_index=False)
            kv = dict(table.schema.metadata or {})
            kv.update({k.encode(): v.encode() for k, v in metadata.items()})
            pq.write_table(table.replace_schema_metadata(kv), tmp, **kwargs)
        else:
            df.to_parquet(tmp, index=False, **kwargs)
        _commit(tmp, path)
    finally:
        with contextlib.suppress(FileNotFoundError):
            tmp.unlink()
