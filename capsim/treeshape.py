"""One spelling of a draft-tree shape across the CLI and grid TOML files.

Printed form: ``2x2x1`` (widths per depth) or ``chain`` (the k-deep MTP chain). Accepted on
input: ``2x2x1``, ``2,2,1``, ``chain``, or (in TOML) a list of ints ``[2, 2, 1]``.
"""

from __future__ import annotations

from typing import Any

MAX_TREE_WIDTH = 64
"""Widest level accepted (a guard against typos such as 222 for 2,2,2)."""


def parse_tree(value: Any, where: str = "tree") -> tuple[int, ...] | None:
    """``'2x2x1'`` / ``'2,2,1'`` / ``[2, 2, 1]`` -> ``(2, 2, 1)``; ``'chain'`` -> ``None``."""
    if isinstance(value, str):
        text = value.strip().lower()
        if text == "chain":
            return None
        sep = "x" if "x" in text else ","
        parts = [p.strip() for p in text.split(sep)]
        if not text or any(not p.isdigit() for p in parts):
            raise ValueError(f"{where}={value!r}: write widths as e.g. 2x2x1 (or 'chain')")
        widths = [int(p) for p in parts]
    elif isinstance(value, list | tuple):
        if any(type(w) is not int for w in value):
            raise ValueError(f"{where}={value!r}: widths must be integers, e.g. [2, 2, 1]")
        widths = list(value)
    else:
        raise ValueError(f"{where}={value!r}: write a shape as '2x2x1', [2, 2, 1] or 'chain'")
    if not widths:
        raise ValueError(f"{where}={value!r}: an empty shape; use 'chain' for the chain")
    for w in widths:
        if not 1 <= w <= MAX_TREE_WIDTH:
            raise ValueError(f"{where}={value!r}: every width must be in [1, {MAX_TREE_WIDTH}]")
    return tuple(widths)


def parse_trees(text: str, where: str = "--tree") -> tuple[tuple[int, ...] | None, ...]:
    """``'chain;2x2x1,3x3x3'`` -> ``(None, (2, 2, 1), (3, 3, 3))`` (in a list, use ``x``)."""
    parts = [p.strip() for p in str(text).replace(";", ",").split(",")]
    if not parts or any(p == "" for p in parts):
        raise ValueError(f"{where}={text!r}: list shapes as e.g. chain,2x2x1")
    out: list[tuple[int, ...] | None] = []
    for p in parts:
        if p.isdigit():
            raise ValueError(
                f"{where}={text!r}: in a list of shapes write each as e.g. 2x2x1 (or 'chain')"
            )
        out.append(parse_tree(p, where))
    return tuple(out)


def format_tree(widths: tuple[int, ...] | None) -> str:
    return "chain" if widths is None else "x".join(str(w) for w in widths)
