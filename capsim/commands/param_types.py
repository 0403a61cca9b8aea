"""click parameter types of capsim's options (``capsim.commands.options`` uses them).

Each converts and bounds one kind of value and fails with a one-line message naming the
value.
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import click

from capsim.treeshape import parse_tree, parse_trees


class FiniteFloat(click.FloatRange):
    """A ``FloatRange`` that also refuses inf and nan (``> 0`` alone lets inf through)."""

    name = "float"

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> Any:
        if isinstance(value, str) and not value.strip():
            self.fail("an empty value is not a number", param, ctx)
        rv = super().convert(value, param, ctx)
        if not math.isfinite(rv):
            self.fail(f"{value!r} is not a finite number", param, ctx)
        return rv


class ListOf(click.ParamType):
    """A comma-separated list whose items are converted (and bounded) by ``item``."""

    def __init__(self, item: click.ParamType, *, max_len: int = 64) -> None:
        self.item = item
        self.max_len = max_len
        label = "|".join(map(str, item.choices)) if isinstance(item, click.Choice) else item.name
        self.name = f"{label}[,...]"

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> Any:
        if isinstance(value, tuple | list):
            parts = list(value)
        else:
            parts = [p.strip() for p in str(value).split(",")]
            if any(p == "" for p in parts):
                self.fail(f"{value!r} has an empty item; write e.g. 0.6,0.9", param, ctx)
        if not parts:
            self.fail("the list is empty", param, ctx)
        if len(parts) > self.max_len:
            self.fail(f"{len(parts)} items; at most {self.max_len}", param, ctx)
        return tuple(self.item.convert(p, param, ctx) for p in parts)


class TreeShape(click.ParamType):
    """One draft-tree shape: ``2x2x1`` (printed form), ``2,2,1`` or ``chain``."""

    name = "tree"

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> Any:
        if value is None or isinstance(value, tuple):
            return value
        try:
            return parse_tree(value)
        except ValueError as exc:
            self.fail(str(exc), param, ctx)


class TreeShapes(click.ParamType):
    """Several shapes separated by ``;`` or ``,``: ``chain,2x2x1;3x3x3``."""

    name = "trees"

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> Any:
        if isinstance(value, tuple):
            return value
        try:
            return parse_trees(value)
        except ValueError as exc:
            self.fail(str(exc), param, ctx)


class NameOrFile(click.Choice):
    """A registry name (listed in ``--help``) or a path to an existing file."""

    def __init__(self, choices: Iterable[str], what: str) -> None:
        super().__init__(sorted(choices))
        self.what = what

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> Any:
        text = str(value)
        if text in self.choices:
            return text
        if text and Path(text).is_file():
            return text
        self.fail(
            f"{text!r} is neither a {self.what} ({', '.join(map(str, self.choices))}) "
            "nor an existing file",
            param,
            ctx,
        )

    def get_metavar(self, param: click.Parameter, ctx: click.Context | None = None) -> str:  # type: ignore[override]
        return f"[{'|'.join(map(str, self.choices))}|FILE]"


class ModelName(NameOrFile):
    """A model preset, an HF id of one (``Qwen/Qwen3.5-35B-A3B``, turned into the preset
    name), or a path to a config.json."""

    def __init__(self) -> None:
        from capsim.models import HF_IDS, PRESETS

        super().__init__(PRESETS, "model preset")
        self.hf_ids = sorted(HF_IDS)

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> Any:
        from capsim.models import preset_name

        preset = preset_name(str(value))
        if preset is not None:
            return preset
        text = str(value)
        if text and Path(text).is_file():
            return text
        self.fail(
            f"{text!r} is neither a model preset ({', '.join(map(str, self.choices))}), an HF id "
            f"({', '.join(self.hf_ids)}) nor an existing file",
            param,
            ctx,
        )


class WorkloadName(NameOrFile):
    """A workload name, optionally with shared system prompts (``sharegpt+sys=16,2048``,
    ``capsim.traces.sharing``), or a path to an existing trace file."""

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> Any:
        text = str(value)
        if "+sys=" in text and not Path(text).is_file():
            from capsim.traces.sharing import parse_sys_suffix

            try:
                base, _ = parse_sys_suffix(text)
            except ValueError as exc:
                self.fail(str(exc), param, ctx)
            super().convert(base, param, ctx)
            return text
        return super().convert(value, param, ctx)

    def get_metavar(self, param: click.Parameter, ctx: click.Context | None = None) -> str:  # type: ignore[override]
        return f"[{'|'.join(map(str, self.choices))}][+sys=N,TOK[,A]]|FILE"


class OutDir(click.Path):
    """A directory to write into; the empty string is refused (it would mean '.')."""

    def __init__(self) -> None:
        super().__init__(file_okay=False, path_type=Path)

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> Any:
        if isinstance(value, str) and not value.strip():
            self.fail("an empty path; name a directory", param, ctx)
        return super().convert(value, param, ctx)


class VllmVersion(click.ParamType):
    """A vLLM release ``MAJOR.MINOR`` (``0.26``, ``v0.26.0``, ``0.10.2rc1``) whose memory
    accounting to follow; ``capsim memory --version-rules`` lists what changes when."""

    name = "version"

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> Any:
        from capsim.vllm_rules import parse_version

        text = str(value).strip()
        try:
            parse_version(text)
        except ValueError as exc:
            self.fail(str(exc), param, ctx)
        return text


SPEC_METHODS: dict[str, str] = {
    "mtp": "mtp",
    "qwen3_next_mtp": "mtp",
    "qwen3_5_mtp": "mtp",
}
"""``--speculative-config`` methods capsim models -> its drafter (Qwen's MTP head; vLLM
accepts the model-specific names as aliases of ``mtp``)."""
SPEC_CONFIG_KEYS: tuple[str, ...] = ("method", "num_speculative_tokens")


class SpeculativeConfigJSON(click.ParamType):
    """vLLM's ``--speculative-config`` JSON -> ``{"num_spec_tok": k}`` (the MTP chain)."""

    name = "json"

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> Any:
        if isinstance(value, dict):
            return value
        try:
            raw = json.loads(str(value))
        except json.JSONDecodeError as exc:
            self.fail(f"{value!r} is not JSON ({exc.msg})", param, ctx)
        if not isinstance(raw, dict):
            self.fail(f"{value!r} is not a JSON object", param, ctx)
        unknown = sorted(set(raw) - set(SPEC_CONFIG_KEYS))
        if unknown:
            self.fail(
                f"key {unknown[0]!r} is not modelled (keys: {', '.join(SPEC_CONFIG_KEYS)})",
                param,
                ctx,
            )
        method = raw.get("method")
        if method not in SPEC_METHODS:
            self.fail(
                f"method={method!r} is not modelled by capsim (methods: {', '.join(SPEC_METHODS)})",
                param,
                ctx,
            )
        k = raw.get("num_speculative_tokens")
        if isinstance(k, bool) or not isinstance(k, int) or not 1 <= k <= 64:
            self.fail(f"num_speculative_tokens={k!r} must be an int in [1, 64]", param, ctx)
        return {"num_spec_tok": k}


class KvCacheDtype(click.Choice):
    """vLLM's ``--kv-cache-dtype`` values capsim sizes; ``auto`` = the model's dtype."""

    def __init__(self) -> None:
        super().__init__(["auto", "bfloat16", "float16", "fp8", "fp8_e4m3", "fp8_e5m2"])

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> Any:
        text = super().convert(value, param, ctx)
        return None if text == "auto" else text


def workload_names() -> list[str]:
    from capsim.traces import WORKLOADS

    return list(WORKLOADS)


def positive_int(high: int) -> click.IntRange:
    return click.IntRange(1, high)


class EngineOverheadType(click.ParamType):
    """A registered engine-overhead fit, or a `capsim engine host-fit` JSON file."""

    name = "FIT|FILE.json"

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> Any:
        from capsim.config import engine_overhead_error

        text = str(value)
        why = engine_overhead_error(text)
        if why is not None:
            self.fail(f"{text!r}: {why}", param, ctx)
        return text
