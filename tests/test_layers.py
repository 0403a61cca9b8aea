"""The import graph of capsim/ points only down the house's layers (STYLE.md, issue 24).

Each module belongs to a room: its top-level module or package under ``capsim/``
(``capsim/cost/roofline.py`` -> ``cost``). ``LAYERS`` lists the rooms bottom first; a
module may import its own room and rooms below it, never one above, and no two rooms
import each other. Every import counts, also those inside functions (lazy imports only
hide a cycle). The AST is read, nothing is imported.
"""

from __future__ import annotations

import ast
from collections import defaultdict
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

LAYERS: tuple[str, ...] = (
    "__init__",  # capsim/__init__.py: the version
    "units",
    "footprint",
    "gpus",
    "models",
    "drafter",
    "commit_modes",
    "vllm_rules",
    "draft_rank",
    "treeshape",
    "config",
    "sim_result",
    "io",
    "calibration",
    "memory",
    "core",
    "traces",
    "cost",
    "streaming_metrics",
    "metrics",
    "loadgen",
    "acceptance_stream",
    "request_source",
    "engine",
    "simulate",
    "fleet",
    "live",
    "sweep",
    "plan",
    "reports",
    "commands",
    "__main__",
)


def _module_name(path: Path, root: Path = ROOT) -> str:
    parts = list(path.relative_to(root).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts = parts[:-1]
    return ".".join(parts)


def _room(module: str) -> str:
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else "__init__"


def import_edges(root: Path = ROOT) -> dict[str, set[str]]:
    """module -> the capsim modules it imports (absolute and relative, at any depth)."""
    edges: dict[str, set[str]] = defaultdict(set)
    for path in sorted((root / "capsim").rglob("*.py")):
        mod = _module_name(path, root)
        package = mod.split(".") if path.name == "__init__.py" else mod.split(".")[:-1]
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Import):
                edges[mod].update(a.name for a in node.names if a.name.split(".")[0] == "capsim")
            elif isinstance(node, ast.ImportFrom):
                if node.level:
                    base = package[: len(package) - node.level + 1]
                    target = ".".join([*base, *([node.module] if node.module else [])])
                else:
                    target = node.module or ""
                if target.split(".")[0] == "capsim":
                    edges[mod].add(target)
    return edges


def room_edges(edges: dict[str, set[str]]) -> dict[tuple[str, str], list[str]]:
    """(from room, to room) -> the module imports behind it, between different rooms."""
    out: dict[tuple[str, str], list[str]] = defaultdict(list)
    for mod, targets in edges.items():
        for target in targets:
            a, b = _room(mod), _room(target)
            if target == "capsim":  # ``from capsim import __version__``
                b = "__init__"
            if a != b:
                out[(a, b)].append(f"{mod} -> {target}")
    return out


def upward_imports(edges: dict[str, set[str]]) -> list[str]:
    """Imports from a room to a room above it (or to a room LAYERS does not name)."""
    rank = {room: i for i, room in enumerate(LAYERS)}
    bad = []
    for (a, b), why in sorted(room_edges(edges).items()):
        if a not in rank or b not in rank or rank[b] > rank[a]:
            bad.extend(sorted(why))
    return bad


def folder_cycles(edges: dict[str, set[str]]) -> list[tuple[str, ...]]:
    """Strongly connected sets of two or more rooms (Tarjan), each sorted."""
    graph: dict[str, set[str]] = defaultdict(set)
    for a, b in room_edges(edges):
        graph[a].add(b)
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[tuple[str, ...]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in sorted(graph[v]):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                found.append(tuple(sorted(comp)))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return sorted(found)


def test_every_room_is_in_a_layer() -> None:
    rooms = {_room(_module_name(p)) for p in (ROOT / "capsim").rglob("*.py")}
    assert rooms <= set(LAYERS), f"rooms without a layer: {sorted(rooms - set(LAYERS))}"


def test_no_import_points_up() -> None:
    bad = upward_imports(import_edges())
    assert not bad, f"{len(bad)} upward imports:\n" + "\n".join(bad)


def test_no_folder_cycles() -> None:
    cycles = folder_cycles(import_edges())
    assert not cycles, f"folder cycles: {cycles}"


def test_the_library_never_imports_commands() -> None:
    edges = import_edges()
    bad = [
        f"{m} -> {t}"
        for m, ts in edges.items()
        for t in ts
        if t.startswith("capsim.commands") and _room(m) not in ("commands", "__main__")
    ]
    assert not bad, bad


def test_the_checker_sees_a_planted_upward_import(tmp_path: Path) -> None:
    """A fake tree with config importing cost is caught (the test can fail)."""
    (tmp_path / "capsim" / "cost").mkdir(parents=True)
    (tmp_path / "capsim" / "__init__.py").write_text("")
    (tmp_path / "capsim" / "cost" / "__init__.py").write_text("")
    (tmp_path / "capsim" / "cost" / "base.py").write_text("from capsim.config import X\n")
    (tmp_path / "capsim" / "config.py").write_text("from capsim.cost.base import Y\n")
    edges = import_edges(tmp_path)
    assert upward_imports(edges) == ["capsim.config -> capsim.cost.base"]
    assert folder_cycles(edges) == [("config", "cost")]
