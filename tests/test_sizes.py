"""The size rule of the house (STYLE.md convention 13, the board's standards): a module of
``capsim/``, ``scripts/`` or ``kernels/`` stays under 600 lines and a function under about 80.

A function's length runs from its ``def`` line to its last line (decorators left out,
docstring and comments counted), as the session notes have always counted it. Triton
``@triton.jit`` bodies are one fused kernel each and are not held to it. The AST is read,
nothing is imported. ``python3 tests/test_sizes.py`` lists every function past the limit in
the whole repository (``kernels/`` and ``experiments/`` included), longest first.
"""

from __future__ import annotations

import ast
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
MAX_MODULE_LINES = 600
MAX_FUNCTION_LINES = 80
HELD = ("capsim", "scripts", "kernels")
"""Folders the test holds to the rule; the rest of the tree is listed by ``main`` only."""

KNOWN_LONG: dict[str, str] = {}
"""Functions past the limit that are known and owned; an entry that is no longer long is
harmless (``main`` says so), a new long function fails the test."""


def test_kernels_are_held() -> None:
    """kernels/ (capsim_kernels: host code, benches) is held like capsim/ since session 4;
    its ``@triton.jit`` kernel bodies stay exempt."""
    assert "kernels" in HELD
    jit = [p for p in _python_files(("kernels",)) if "@triton.jit" in p.read_text(encoding="utf-8")]
    assert jit, "kernels/ has Triton kernels: the exemption is still needed"


def _is_triton_jit(node: ast.FunctionDef | ast.AsyncFunctionDef) -> bool:
    return any(ast.unparse(d).split("(")[0] in {"triton.jit", "jit"} for d in node.decorator_list)


def long_functions(path: Path, limit: int = MAX_FUNCTION_LINES) -> list[tuple[str, int]]:
    """(qualified name, lines) of each function in ``path`` longer than ``limit`` lines."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    found: list[tuple[str, int]] = []

    def visit(node: ast.AST, prefix: str) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.FunctionDef | ast.AsyncFunctionDef):
                name = f"{prefix}{child.name}"
                num_lines = (child.end_lineno or child.lineno) - child.lineno + 1
                if num_lines > limit and not _is_triton_jit(child):
                    found.append((name, num_lines))
                visit(child, f"{name}.")
            elif isinstance(child, ast.ClassDef):
                visit(child, f"{prefix}{child.name}.")

    visit(tree, "")
    return found


def _python_files(folders: tuple[str, ...]) -> list[Path]:
    return sorted(p for f in folders for p in (ROOT / f).rglob("*.py"))


def test_a_long_function_is_found(tmp_path: Path) -> None:
    body = "\n".join(f"    x{i} = {i}" for i in range(MAX_FUNCTION_LINES))
    method = "\n".join(f"    {line}" for line in body.splitlines())
    src = f"def short():\n    pass\n\nclass C:\n    def long(self):\n{method}\n"
    (tmp_path / "m.py").write_text(src)
    assert long_functions(tmp_path / "m.py") == [("C.long", MAX_FUNCTION_LINES + 1)]
    jit = f"@triton.jit\ndef k():\n{body}\n"
    (tmp_path / "k.py").write_text(jit)
    assert long_functions(tmp_path / "k.py") == []


def test_functions_stay_under_the_limit() -> None:
    long = []
    for path in _python_files(HELD):
        rel = path.relative_to(ROOT).as_posix()
        long += [
            f"{rel}::{n} {k}" for n, k in long_functions(path) if f"{rel}::{n}" not in KNOWN_LONG
        ]
    assert long == [], "split these (or name an owner in KNOWN_LONG)"


def test_modules_stay_under_the_limit() -> None:
    big = [
        f"{p.relative_to(ROOT)} {n}"
        for p in _python_files(HELD)
        if (n := len(p.read_text(encoding="utf-8").splitlines())) >= MAX_MODULE_LINES
    ]
    assert big == []


def main() -> int:
    rows = []
    for path in _python_files(("capsim", "scripts", "kernels", "experiments", "tests")):
        rel = path.relative_to(ROOT).as_posix()
        rows += [(k, f"{rel}::{n}") for n, k in long_functions(path)]
    for num_lines, name in sorted(rows, reverse=True):
        note = KNOWN_LONG.get(name, "")
        print(f"{num_lines:5d}  {name}{'  (' + note + ')' if note else ''}")
    for name in sorted(set(KNOWN_LONG) - {n for _, n in rows}):
        print(f"    -  {name}  (in KNOWN_LONG, no longer long: remove it)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
