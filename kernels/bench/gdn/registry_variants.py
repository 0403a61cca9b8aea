"""kcode's opt-in kernel variants, timed next to the default kernels (same cells, same
float64 checks, same floor): one registry entry per (variant, operator).

A variant is a ``LaunchPolicy`` with some fields changed (``VARIANTS``: suffix -> (label,
fields)). Where the kernels package in use has no such field, the entry's build raises
LookupError and the harness records a note instead of a row (an older kernels build runs
the same grid without the variant).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable

from .shapes import bytes_moved

# suffix -> (label, LaunchPolicy fields)
VARIANTS: dict[str, tuple[str, dict]] = {
    "pipe": ("pipelined persistent stream", {"pipe_stages": 3}),
}
# the operators each variant is timed as (base registry name -> state_check)
OPERATORS = {"treewy_verify": False, "treewy_verify_commit": True, "deferred": True}


def variant_policy(suffix: str):
    """The LaunchPolicy of variant ``suffix``; LookupError where this build lacks it."""
    from ...gdn_verify import LaunchPolicy

    label, fields = VARIANTS[suffix]
    have = {f.name for f in dataclasses.fields(LaunchPolicy)}
    missing = sorted(set(fields) - have)
    if missing:
        raise LookupError(f"variant {suffix!r}: LaunchPolicy has no field {missing}")
    policy = dataclasses.replace(LaunchPolicy(), **fields)
    object.__setattr__(policy, "variant_label", f"{suffix}: {label} {fields}")
    return policy


def variant_kernels(kernel_cls, build_verify: Callable, build_verify_commit: Callable,
                    build_deferred: Callable) -> tuple:  # fmt: skip
    builders = {"treewy_verify": build_verify, "treewy_verify_commit": build_verify_commit,
                "deferred": build_deferred}  # fmt: skip
    out = []
    for suffix, (label, _fields) in VARIANTS.items():
        for base, state_check in OPERATORS.items():
            build = builders[base]
            out.append(kernel_cls(
                f"{base}_{suffix}", f"{base} ({label})",
                lambda c, x, build=build, suffix=suffix: build(c, x, variant_policy(suffix)),
                "variant",
                lambda s, d, w, b, t=None, base=base: bytes_moved(base, s, d, w, b),
                state_check=state_check,
            ))  # fmt: skip
    return tuple(out)
