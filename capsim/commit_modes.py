"""The commit-mode registry: every per-mode fact capsim uses, one frozen entry per mode.

GDN state handling during verification:

- ``storeall``: vLLM's default, W full states written per request per GDN layer;
- ``reconstruct``: TreeWY verify (pseudo-values) plus a separate commit of one state;
- ``deferred``: TreeWY with the commit folded into the next verify (state read once,
  written once per step).
``reconstruct`` and ``deferred`` hold the same pool slots (one state per GDN group).

A new mode is one entry here (plus its kernel and its measured series). The places that
read an entry: ``config.SpecDecodeConfig`` (name check, pool slots), ``cost.roofline``
(state bytes), ``cost.calibrated`` (kernel series), ``memory.treewy_pending`` (pending
bytes), ``reports.style`` (label, colour). Bottom layer: imports nothing from capsim.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

CommitModeName = Literal["storeall", "reconstruct", "deferred"]


@dataclass(frozen=True, slots=True, kw_only=True)
class CommitMode:
    """One commit mode's facts.

    ``window_slots``: the request holds W GDN state slots per group (else one).
    ``state_reads`` / ``state_writes``: full GDN states a decode step reads and writes per
    request per GDN layer (roofline bytes); ``state_writes=None`` means one per window token.
    ``kernel_series``: measured kernel names whose p50s sum to the GDN verify time, preferred
    set first; the next is used when the table lacks the first.
    ``holds_pending``: a running request keeps the previous window's inputs (pending bytes).
    """

    name: str
    label: str
    colour: str
    window_slots: bool
    state_reads: int
    state_writes: int | None
    kernel_series: tuple[tuple[str, ...], ...]
    holds_pending: bool = False

    def slots_per_group(self, window_tok: int) -> int:
        """GDN state slots (blocks) each GDN group holds per request."""
        return window_tok if self.window_slots else 1

    def decode_state_rw(self, window_tok: int) -> tuple[int, int]:
        """(reads, writes) of full GDN states per request per GDN layer in a decode step."""
        writes = window_tok if self.state_writes is None else self.state_writes
        return self.state_reads, writes


MODES: dict[str, CommitMode] = {
    m.name: m
    for m in (
        CommitMode(
            name="storeall",
            label="store-all (vLLM)",
            colour="#d62728",
            window_slots=True,
            state_reads=1,
            state_writes=None,
            # vLLM's own store-all op first (what vLLM runs: chains only); capsim's store-all
            # kernel where vLLM's was not measured (tree windows, other shapes)
            kernel_series=(("vllm_storeall",), ("storeall",)),
        ),
        CommitMode(
            name="reconstruct",
            label="TreeWY (reconstruct)",
            colour="#1f77b4",
            window_slots=False,
            state_reads=2,
            state_writes=1,
            kernel_series=(("treewy_verify", "treewy_commit"), ("treewy_verify_commit",)),
        ),
        CommitMode(
            name="deferred",
            label="TreeWY (deferred commit)",
            colour="#2ca02c",
            window_slots=False,
            state_reads=1,
            state_writes=1,
            kernel_series=(("deferred",),),
            holds_pending=True,
        ),
    )
}

COMMIT_MODES: tuple[str, ...] = tuple(MODES)
"""The mode names, in registry order (CLI choices, grid checks)."""

BASELINE_MODE = "storeall"
"""vLLM's own mode: the denominator of every matched-point ratio."""


def get_mode(name: str) -> CommitMode:
    """The registry entry of ``name``; ValueError naming the value otherwise."""
    try:
        return MODES[name]
    except KeyError:
        raise ValueError(f"commit: {name!r} is not one of {COMMIT_MODES}") from None
