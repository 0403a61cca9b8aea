"""One option of the registry (``capsim.commands.options.OPTIONS``) and how it decorates.

``Opt`` holds a flag's spellings, type, default and help (or the config dataclass field
they come from) and the config it is collected into; ``raw_opt`` writes an entry in
``click.option``'s own keywords.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import MISSING, dataclass, fields
from typing import Any

import click


def _field(cls: type, name: str) -> Any:
    for f in fields(cls):
        if f.name == name:
            return f
    raise KeyError(f"{cls.__name__} has no field {name!r}")


def dc_default(cls: type, name: str) -> Any:
    """The dataclass default of ``cls.name`` (``default_factory`` called)."""
    f = _field(cls, name)
    if f.default is not MISSING:
        return f.default
    if f.default_factory is not MISSING:  # type: ignore[misc]
        return f.default_factory()  # type: ignore[misc]
    return None


def dc_help(cls: type, name: str) -> str:
    return str(_field(cls, name).metadata.get("help", ""))


@dataclass(frozen=True, slots=True)
class Opt:
    """One option: its flags, type, default/help (or the dataclass field they come from)."""

    decls: tuple[str, ...]
    type: Any = None
    default: Any = None
    help: str = ""
    source: tuple[type, str] | None = None  # (dataclass, field) giving default and help
    target: str | None = None  # "engine" | "spec" | "acceptance" | "load": collected there
    dest: str | None = None  # parameter / config field name (default: from the flag)
    extra: tuple[tuple[str, Any], ...] = ()

    def decorator(self, **override: Any) -> Callable[[Any], Any]:
        kw: dict[str, Any] = {"type": self.type, "help": self.help, "show_default": True}
        if self.source is not None:
            cls, name = self.source
            kw["default"] = dc_default(cls, name)
            kw["help"] = self.help or dc_help(cls, name)
        else:
            kw["default"] = self.default
        kw.update(dict(self.extra))
        kw.update(override)
        if kw["default"] is None:
            kw["show_default"] = False
        decls = self.decls + ((self.dest,) if self.dest else ())
        return click.option(*decls, **kw)


def raw_opt(*decls: str, **kw: Any) -> Opt:
    """An entry written as ``click.option(*decls, **kw)`` would be (no help default shown
    unless ``show_default`` is given)."""
    typ, default, help_ = kw.pop("type", None), kw.pop("default", None), kw.pop("help", "")
    kw.setdefault("show_default", False)
    return Opt(tuple(decls), type=typ, default=default, help=help_, extra=tuple(kw.items()))
