"""A sweep grid read from TOML: the layout's schema, its checks, and ``load_spec``.

The layout (``experiments/*.toml``): ``[sweep]`` keys, then ``[[block]]`` tables with their
``[[block.deployment]]`` and ``[[block.workload]]`` arrays. Every unknown key is refused and
every value's kind checked; errors name the key's path. The grid's dataclasses live in
``capsim.sweep.grid``.
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
    table: Any, schema: dict[str, str], where: str, required: tuple[str, ...] = ()
) -> dict[str, Any]:
    """``table`` with every key known and of its kind; errors name the key's path."""
    if not isinstance(table, dict):
        raise ValueError(f"{where}: expected a table, got {type(table).__name__}")
    for key, value in table.items():
        if key not in schema:
            raise ValueError(f"{where}.{key}: unknown key (known: {', '.join(sorted(schema))})")
        kind = schema[key]
        if not _is_kind(value, kind):
            shown = _KIND_WORDS.get(kind, kind)
            example = _EXAMPLES.get(kind)
            hint = f", e.g. {key} = {example}" if example else ""
            raise ValueError(f"{where}.{key}={value!r}: must be {shown}{hint}")
    for key in required:
        if key not in table:
            raise ValueError(f"{where}.{key}: missing")
    return table


def spec_from_dict(raw: dict[str, Any], *, where: str = "grid") -> SweepSpec:
    """Build a SweepSpec from the parsed TOML layout documented in experiments/*.toml.

    Unknown keys are refused at every level and every value's type is checked (a bool is
    not a number, a scalar is not a list); errors name the key's path, e.g.
    ``grid.toml: block[0].deployment[1].gmu=0.9: must be a list of finite numbers``.
    """
    from capsim.treeshape import parse_tree

    for key in raw:
        if key not in ("sweep", "block"):
            raise ValueError(f"{where}: {key}: unknown key (known: block, sweep)")
    top = _checked(raw.get("sweep", {}), _SWEEP_KEYS, f"{where}: sweep")
    if not _is_kind(raw.get("block"), "tables"):
        raise ValueError(f"{where}: block: missing or not an array of [[block]] tables")
    blocks = []
    for i, b in enumerate(raw["block"]):
        bw = f"{where}: block[{i}]"
        _checked(b, _BLOCK_KEYS, bw, ("deployment", "workload"))
        try:
            blocks.append(_block(b, i, bw, parse_tree))
        except ValueError as exc:
            raise ValueError(str(exc) if str(exc).startswith(where) else f"{bw}: {exc}") from None
    kwargs = dict(top)
    if "commit_modes" in kwargs:
        kwargs["commit_modes"] = tuple(kwargs["commit_modes"])
    try:
        return SweepSpec(blocks=tuple(blocks), **kwargs)
    except ValueError as exc:
        raise ValueError(f"{where}: {exc}") from None


def _block(b: dict[str, Any], i: int, bw: str, parse_tree: Any) -> Block:
    deps = tuple(
        Deployment(
            model=d["model"],
            gpu=d["gpu"],
            tp=d.get("tp", 1),
            gmu=tuple(d["gmu"]),
            **{k: d[k] for k in POOL_KEYS if k in d},
        )
        for j, d in enumerate(b["deployment"])
        if _checked(d, _DEPLOYMENT_KEYS, f"{bw}.deployment[{j}]", ("model", "gpu", "gmu"))
    )
    wls = tuple(
        WorkloadLoads(
            name=w["name"],
            mode=w.get("mode", "concurrency"),
            loads=tuple(w["loads"]),
            burstiness=float(w.get("burstiness", 1.0)),
            requests_per_concurrency=w.get("requests_per_concurrency"),
            min_requests=w.get("min_requests"),
            acceptance=tuple(w["acceptance"]) if "acceptance" in w else None,
        )
        for j, w in enumerate(b["workload"])
        if _checked(w, _WORKLOAD_KEYS, f"{bw}.workload[{j}]", ("name", "loads"))
    )
    trees_raw = b.get("trees") or ["chain"]
    trees = tuple(parse_tree(t, f"{bw}.trees[{j}]") for j, t in enumerate(trees_raw))
    pc_raw = b.get("prefix_caching", [False])
    pc = tuple(pc_raw) if isinstance(pc_raw, list) else (pc_raw,)
    return Block(
        name=str(b.get("name", f"block{i}")),
        deployments=deps,
        workloads=wls,
        trees=trees,
        prefix_caching=pc,
    )


def load_spec(path: Path | str) -> SweepSpec:
    """Read a grid TOML file; errors name the file and the field."""
    p = Path(path)
    try:
        raw = tomllib.loads(p.read_text())
    except FileNotFoundError:
        raise ValueError(f"grid file {p} does not exist") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise ValueError(f"grid file {p} cannot be read: {exc}") from None
    except tomllib.TOMLDecodeError as exc:
        raise ValueError(f"grid file {p} is not valid TOML: {exc}") from None
    return spec_from_dict(raw, where=str(p))
