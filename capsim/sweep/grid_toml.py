"""Grid TOML files -> ``SweepSpec``, checked against a schema; every error listed at once.

The layout is documented in ``experiments/published.toml``. Unknown keys are refused at
every level and every value's type is checked (a bool is not a number, a scalar is not a
list); then each deployment, workload, block and the sweep table is validated by its own
class. Nothing stops at the first problem: the ``ValueError`` raised names every one, each
by its key's path, e.g. ``grid.toml: 2 errors: block[0].deployment[1].gmu=0.9: must be a
list of finite numbers, e.g. gmu = [0.9]; block[0].workload[0].loads: missing``. A grid with
one error gets exactly that error's message.
"""

from __future__ import annotations

import math
import tomllib
from pathlib import Path
from typing import Any

from capsim.sweep.grid import POOL_KEYS, Block, Deployment, SweepSpec, WorkloadLoads

# Schema of the TOML layout: table -> {key: kind}. Kinds: str, int, number, bool, and
# list[...] of those; "tables" is an array of tables checked by its own schema.
_SWEEP_KEYS = {
    "name": "str",
    "commit_modes": "list[str]",
    "num_spec_tok": "int",
    "num_requests": "int",
    "requests_per_concurrency": "number",
    "rate_window_s": "number",
    "min_requests": "int",
    "max_requests": "int",
    "seed": "int",
    "step_time": "str",
    "tree_model": "str",
    "temperature": "number",
}
_BLOCK_KEYS = {
    "name": "str",
    "deployment": "tables",
    "workload": "tables",
    "trees": "list",
    "prefix_caching": "bool|list[bool]",
}
_DEPLOYMENT_KEYS = {
    "model": "str",
    "gpu": "str",
    "tp": "int",
    "gmu": "list[number]",
    # vLLM's pool-shaping flags (issue 11), named as the Deployment fields
    "vllm_version": "str",
    "kv_cache_memory_bytes": "int",
    "num_gpu_blocks_override": "int",
    "limit_mm_per_prompt": "int",
    "enforce_eager": "bool",
    "quantization": "str",
}
_WORKLOAD_KEYS = {
    "name": "str",
    "mode": "str",
    "loads": "list[number]",
    "burstiness": "number",
    "requests_per_concurrency": "number",
    "min_requests": "int",
    "acceptance": "list[number]",
}
_KIND_WORDS = {
    "str": "a string",
    "int": "an integer (not a bool)",
    "number": "a finite number (not a bool)",
    "bool": "true or false",
    "tables": "an array of tables",
    "list": "a list",
    "list[number]": "a list of finite numbers",
    "list[str]": "a list of strings",
    "bool|list[bool]": "true/false or a list of them",
}
_EXAMPLES = {
    "bool|list[bool]": "[false, true]",
    "list[number]": "[0.9]",
    "list[str]": '["storeall"]',
    "list": '["chain", "2x2x1"]',
}


SCHEMA: dict[str, dict[str, str]] = {
    "[sweep]": _SWEEP_KEYS,
    "[[block]]": _BLOCK_KEYS,
    "[[block.deployment]]": _DEPLOYMENT_KEYS,
    "[[block.workload]]": _WORKLOAD_KEYS,
}
"""Every table of the layout and its keys' kinds (the docs' grid reference reads it)."""
KIND_WORDS = _KIND_WORDS


def _is_kind(value: Any, kind: str) -> bool:
    if kind == "str":
        return isinstance(value, str)
    if kind == "int":
        return type(value) is int
    if kind == "number":
        return type(value) in (int, float) and math.isfinite(value)
    if kind == "bool":
        return type(value) is bool
    if "|" in kind:
        return any(_is_kind(value, k) for k in kind.split("|"))
    if kind == "tables":
        return isinstance(value, list) and all(isinstance(v, dict) for v in value)
    if kind == "list":
        return isinstance(value, list)
    if kind.startswith("list["):
        return isinstance(value, list) and all(_is_kind(v, kind[5:-1]) for v in value)
    raise AssertionError(kind)


def _checked(
    table: Any,
    schema: dict[str, str],
    where: str,
    errors: list[str],
    required: tuple[str, ...] = (),
) -> bool:
    """Append to ``errors`` one line per unknown, mistyped or missing key of ``table``
    (each naming the key's path); True when there was none."""
    if not isinstance(table, dict):
        errors.append(f"{where}: expected a table, got {type(table).__name__}")
        return False
    before = len(errors)
    for key, value in table.items():
        if key not in schema:
            errors.append(f"{where}.{key}: unknown key (known: {', '.join(sorted(schema))})")
            continue
        kind = schema[key]
        if not _is_kind(value, kind):
            example = _EXAMPLES.get(kind)
            hint = f", e.g. {key} = {example}" if example else ""
            errors.append(f"{where}.{key}={value!r}: must be {_KIND_WORDS.get(kind, kind)}{hint}")
    errors += [f"{where}.{key}: missing" for key in required if key not in table]
    return len(errors) == before


def _build(make: Any, where: str, errors: list[str]) -> Any:
    """``make()``, or None with its ValueError appended to ``errors`` under ``where``."""
    try:
        return make()
    except ValueError as exc:
        text = str(exc)
        errors.append(text if text.startswith(where) else f"{where}: {text}")
        return None


def _deployment(d: dict[str, Any]) -> Deployment:
    return Deployment(
        model=d["model"],
        gpu=d["gpu"],
        tp=d.get("tp", 1),
        gmu=tuple(d["gmu"]),
        **{k: d[k] for k in POOL_KEYS if k in d},
    )


def _workload(w: dict[str, Any]) -> WorkloadLoads:
    return WorkloadLoads(
        name=w["name"],
        mode=w.get("mode", "concurrency"),
        loads=tuple(w["loads"]),
        burstiness=float(w.get("burstiness", 1.0)),
        requests_per_concurrency=w.get("requests_per_concurrency"),
        min_requests=w.get("min_requests"),
        acceptance=tuple(w["acceptance"]) if "acceptance" in w else None,
    )


def _block(b: dict[str, Any], i: int, bw: str, errors: list[str]) -> Block | None:
    from capsim.treeshape import parse_tree

    deps, wls = [], []
    for j, d in enumerate(b.get("deployment", [])):
        dw = f"{bw}.deployment[{j}]"
        if _checked(d, _DEPLOYMENT_KEYS, dw, errors, ("model", "gpu", "gmu")):
            deps.append(_build(lambda d=d: _deployment(d), dw, errors))
    for j, w in enumerate(b.get("workload", [])):
        ww = f"{bw}.workload[{j}]"
        if _checked(w, _WORKLOAD_KEYS, ww, errors, ("name", "loads")):
            wls.append(_build(lambda w=w: _workload(w), ww, errors))
    trees = [
        _build(lambda j=j, t=t: (parse_tree(t, f"{bw}.trees[{j}]"),), f"{bw}.trees[{j}]", errors)
        for j, t in enumerate(b.get("trees") or ["chain"])
    ]
    if None in deps or None in wls or None in trees:
        return None
    pc_raw = b.get("prefix_caching", [False])
    pc = tuple(pc_raw) if isinstance(pc_raw, list) else (pc_raw,)
    return _build(
        lambda: Block(
            name=str(b.get("name", f"block{i}")),
            deployments=tuple(deps),
            workloads=tuple(wls),
            trees=tuple(t[0] for t in trees),
            prefix_caching=pc,
        ),
        bw,
        errors,
    )


def spec_from_dict(raw: dict[str, Any], *, where: str = "grid") -> SweepSpec:
    """Build a SweepSpec from the parsed TOML layout; every problem listed in one error."""
    errors: list[str] = []
    for key in raw:
        if key not in ("sweep", "block"):
            errors.append(f"{where}: {key}: unknown key (known: block, sweep)")
    top = raw.get("sweep", {})
    top_ok = _checked(top, _SWEEP_KEYS, f"{where}: sweep", errors)
    blocks: list[Block | None] = []
    if not _is_kind(raw.get("block"), "tables"):
        errors.append(f"{where}: block: missing or not an array of [[block]] tables")
    else:
        for i, b in enumerate(raw["block"]):
            bw = f"{where}: block[{i}]"
            if _checked(b, _BLOCK_KEYS, bw, errors, ("deployment", "workload")):
                blocks.append(_block(b, i, bw, errors))
            else:
                blocks.append(None)
    spec = None
    if top_ok:
        kwargs = dict(top)
        if "commit_modes" in kwargs:
            kwargs["commit_modes"] = tuple(kwargs["commit_modes"])
        good = tuple(b for b in blocks if b is not None)
        try:
            spec = SweepSpec(blocks=good, **kwargs)
        except ValueError as exc:
            found = str(exc).split("; sweep.")
            found = [found[0], *(f"sweep.{f}" for f in found[1:])]
            if errors:  # empty only because its blocks had errors: not news
                found = [f for f in found if "the grid is empty" not in f]
            errors += [f"{where}: {f}" for f in found]
    if errors:
        if len(errors) == 1:
            raise ValueError(errors[0])
        body = "; ".join(e.removeprefix(f"{where}: ") for e in errors)
        raise ValueError(f"{where}: {len(errors)} errors: {body}")
    assert spec is not None
    return spec


def load_spec(path: Path | str) -> SweepSpec:
    """Read a grid TOML file; errors name the file and every bad field."""
    p = Path(path)
    try:
        raw = tomllib.loads(p.read_text())
    except FileNotFoundError:
        raise ValueError(f"grid file {p} does not exist") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise ValueError(f"grid file {p} cannot be read: {exc}") from None
    except tomllib.TOMLDecodeError as exc:
        raise ValueError(f"grid file {p} is not valid TOML: {exc}") from None
    except RecursionError:
        raise ValueError(
            f"grid file {p}: TOML nested too deeply (arrays/tables ~1000 levels)"
        ) from None
    return spec_from_dict(raw, where=str(p))
