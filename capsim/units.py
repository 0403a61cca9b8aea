"""Unit constants and the only unit conversions in capsim.

Simulated time is float seconds everywhere; memory is int bytes.
"""

from __future__ import annotations

KiB: int = 1024
MiB: int = 1024**2
GiB: int = 1024**3

DTYPE_BYTES: dict[str, int] = {
    "float32": 4,
    "bfloat16": 2,
    "float16": 2,
    "fp8": 1,
    "fp8_e4m3": 1,
    "fp8_e5m2": 1,
}


def dtype_bytes(name: str, *, field_name: str = "dtype") -> int:
    """Bytes per element of a dtype name; raises naming the field on an unknown dtype."""
    try:
        return DTYPE_BYTES[name]
    except KeyError:
        raise ValueError(
            f"{field_name}={name!r} is not a known dtype (choose from {sorted(DTYPE_BYTES)})"
        ) from None


def cdiv(a: int, b: int) -> int:
    """Ceiling division of non-negative integers."""
    return -(-a // b)
