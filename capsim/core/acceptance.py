"""Accepted drafts per verify step, drawn ahead of time per request (seeded).

Each request gets its own sequence of accepted-draft counts, one per verify step, from
the acceptance stream. Because draws belong to the request (not to the batch), two
simulations that differ only in the commit mode see identical acceptance per request:
common random numbers for matched points.

Chain of depth k: depth d is accepted with conditional probability p_d given depths
< d were; accepted = number of leading successes. Tree of widths (w_1..w_d): depth d is
accepted when the target's token is among its top w_d candidates, q_d = sum_{r<=w_d}
pi_d(r) under the rank model (or the independence upper bound), see ``draft_rank``; a
sampling temperature scales every q_d (``draft_rank.temperature_factor``).
"""

from __future__ import annotations

import numpy as np

from capsim.config import SpecDecodeConfig
from capsim.draft_rank import temperature_factor, width_acceptance


def depth_acceptance(spec: SpecDecodeConfig) -> np.ndarray:
    """Per-depth conditional acceptance q_d, shape [depth]."""
    acc = spec.acceptance
    widths = spec.tree_widths or (1,) * spec.depth
    q = np.array(
        [
            width_acceptance(acc.at_depth(d), widths[d - 1], acc.tree_model)
            for d in range(1, spec.depth + 1)
        ],
        dtype=np.float64,
    )
    return q * temperature_factor(float(acc.temperature))


def expected_tokens_per_step(spec: SpecDecodeConfig) -> float:
    """E[accepted + 1]: sum over d of prod_{j<=d} q_j, plus the bonus token."""
    q = depth_acceptance(spec)
    return 1.0 + float(np.cumprod(q).sum()) if q.size else 1.0


class AcceptanceDraws:
    """Pre-drawn accepted-draft counts: ``draw_many(i, n)`` gives request i's n-th verify."""

    __slots__ = ("_draws", "_nsafe", "_offsets", "_start")

    def __init__(
        self, spec: SpecDecodeConfig, output_tok: np.ndarray, rng: np.random.Generator
    ) -> None:
        q = depth_acceptance(spec)
        # Verify steps a request needs: about output / E[tokens per step]. Draw 25% + 8
        # more than that; a request that still runs out (or is recomputed after a
        # preemption) wraps around its own sequence, deterministically.
        out = np.asarray(output_tok, dtype=np.int64)
        mean_tok = expected_tokens_per_step(spec)
        steps = np.minimum(out, np.ceil(out / mean_tok * 1.25).astype(np.int64) + 8)
        self._offsets = np.concatenate([[0], np.cumsum(steps)])
        total = int(self._offsets[-1])
        # draw_many reads draws[start + k % n]; a request with no draws points at a
        # trailing 0 (the sentinel at index ``total``).
        self._start = np.where(steps > 0, self._offsets[:-1], total)
        self._nsafe = np.maximum(steps, 1)
        if q.size == 0 or total == 0:
            self._draws = np.zeros(total + 1, dtype=np.int64)
            return
        u = rng.random((total, q.size), dtype=np.float32)
        q32 = q.astype(np.float32)
        # accepted = leading successes = index of the first failure (depth if none),
        # counted depth by depth: ``alive`` = every depth so far accepted
        self._draws = np.zeros(total + 1, dtype=np.int64)
        lead = self._draws[:total]
        alive = u[:, 0] < q32[0]
        lead += alive
        for d in range(1, q.size):
            alive &= u[:, d] < q32[d]
            lead += alive

    def mean_tokens_over_used(self, used_steps: np.ndarray) -> float:
        """Mean tokens per verify step (bonus included) over the draws requests used."""
        used = np.asarray(used_steps, dtype=np.int64)
        total_steps = int(used.sum())
        if total_steps == 0:
            return float("nan")
        # request i used its n_i draws ``full`` times over, then the first ``rest``
        # (integer sums from one running total: exact)
        idx = np.flatnonzero(used)
        start, end = self._offsets[idx], self._offsets[idx + 1]
        full, rest = np.divmod(used[idx], end - start)
        run = np.concatenate([[0], np.cumsum(self._draws)])
        accepted = int((full * (run[end] - run[start]) + run[start + rest] - run[start]).sum())
        return 1.0 + accepted / total_steps

    def draw_many(self, indices: np.ndarray, steps: np.ndarray) -> np.ndarray:
        """Accepted drafts of requests ``indices`` at their ``steps``-th verify (0-based);
        past the pre-drawn steps a request wraps around its own sequence."""
        return self._draws[self._start[indices] + steps % self._nsafe[indices]]
