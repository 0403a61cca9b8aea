"""Draft-tree shapes for GDN speculative verification (SPEC.md section 2).

A verification window holds W = N + 1 nodes: node 0 is the root (the last committed
token), nodes 1..N are draft tokens in DFS preorder, so every ancestor of a node has a
smaller index. A tree is stored as a parent array with ``parent[0] == -1``. A chain is
the tree with ``parent[t] == t - 1``. Shapes are given as per-depth branching widths:
(2, 2, 2) means 2 children of the root, 2 of each of those and 2 of each of those.

Everything here is plain Python (no torch), so it can be used by the simulator too.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

__all__ = [
    "TreeSpec",
    "ancestors",
    "chain_parent",
    "depths",
    "parent_from_widths",
    "validate_parent",
]


def chain_parent(num_nodes: int) -> tuple[int, ...]:
    """Parent array of a chain of ``num_nodes`` window nodes (root included)."""
    if num_nodes < 1:
        raise ValueError(f"num_nodes must be >= 1, got {num_nodes}")
    return tuple(range(-1, num_nodes - 1))


def parent_from_widths(widths: Sequence[int]) -> tuple[int, ...]:
    """Parent array, in DFS preorder, of the full tree with per-depth ``widths``.

    >>> parent_from_widths((2, 1))
    (-1, 0, 1, 0, 3)
    """
    widths = tuple(widths)
    for depth, width in enumerate(widths):
        if isinstance(width, bool) or not isinstance(width, int) or width < 1:
            raise ValueError(f"widths[{depth}] must be an int >= 1, got {width!r}")
    parent: list[int] = [-1]

    def visit(node: int, depth: int) -> None:
        if depth == len(widths):
            return
        for _ in range(widths[depth]):
            child = len(parent)
            parent.append(node)
            visit(child, depth + 1)

    visit(0, 0)
    return tuple(parent)


def validate_parent(parent: Sequence[int]) -> tuple[int, ...]:
    """Check that ``parent`` is a DFS-preorder tree rooted at node 0; return it as a tuple.

    Preorder means: ``parent[0] == -1``; ``0 <= parent[t] < t`` for t > 0; and every
    node's subtree is a contiguous index range (a node's parent is on the ancestor path
    of the node just before it).
    """
    par = tuple(int(p) for p in parent)
    if len(par) == 0:
        raise ValueError("parent must hold at least the root, got an empty sequence")
    if par[0] != -1:
        raise ValueError(f"parent[0] must be -1 (the root), got {par[0]}")
    path: list[int] = [0]  # ancestor path (root..t-1) of the previous node
    for t in range(1, len(par)):
        p = par[t]
        if not 0 <= p < t:
            raise ValueError(f"parent[{t}] must be in [0, {t}), got {p}")
        while path and path[-1] != p:
            path.pop()
        if not path:
            raise ValueError(
                f"parent[{t}] = {p} is not on the ancestor path of node {t - 1}: "
                "nodes are not in DFS preorder"
            )
        path.append(t)
    return par


def depths(parent: Sequence[int]) -> tuple[int, ...]:
    """Depth of every node (root = 0)."""
    par = validate_parent(parent)
    out = [0] * len(par)
    for t in range(1, len(par)):
        out[t] = out[par[t]] + 1
    return tuple(out)


def ancestors(parent: Sequence[int], node: int) -> tuple[int, ...]:
    """Path root..node (node included), in increasing index order."""
    par = validate_parent(parent)
    if not 0 <= node < len(par):
        raise ValueError(f"node must be in [0, {len(par)}), got {node}")
    path = []
    while node >= 0:
        path.append(node)
        node = par[node]
    return tuple(reversed(path))


@dataclass(frozen=True, slots=True)
class TreeSpec:
    """A window shape: per-depth widths (all ones = chain) and its parent array."""

    widths: tuple[int, ...]

    def __post_init__(self) -> None:
        if not isinstance(self.widths, tuple):
            raise ValueError(f"widths must be a tuple, got {self.widths!r}")
        parent_from_widths(self.widths)  # validates the entries

    @classmethod
    def chain(cls, num_nodes: int) -> TreeSpec:
        """The chain of ``num_nodes`` window nodes (root included)."""
        chain_parent(num_nodes)
        return cls(widths=(1,) * (num_nodes - 1))

    @classmethod
    def parse(cls, text: str, num_nodes: int | None = None) -> TreeSpec:
        """'chain' (needs ``num_nodes``) or comma-separated widths such as '2,2,2'."""
        if text == "chain":
            if num_nodes is None:
                raise ValueError("tree 'chain' needs num_nodes")
            return cls.chain(num_nodes)
        try:
            widths = tuple(int(x) for x in text.split(","))
        except ValueError:
            raise ValueError(f"tree must be 'chain' or widths like '2,2,2', got {text!r}") from None
        return cls(widths=widths)

    @property
    def parent(self) -> tuple[int, ...]:
        return parent_from_widths(self.widths)

    @property
    def num_nodes(self) -> int:
        """W = 1 + sum over depths of the product of widths up to that depth."""
        return 1 + sum(math.prod(self.widths[: d + 1]) for d in range(len(self.widths)))

    @property
    def is_chain(self) -> bool:
        return all(w == 1 for w in self.widths)

    @property
    def label(self) -> str:
        """'chain' for all-ones widths, else e.g. '2,2,2' (the CSV's ``tree`` column)."""
        return "chain" if self.is_chain else ",".join(str(w) for w in self.widths)
