"""A run of decode-only steps planned at once: the numbers step-by-step scheduling gives.

With prefix caching off, consecutive steps can be computed ahead when nothing can change
the schedule between them. The planner checks, on the running batch (R requests):

- nobody waits (nothing to admit; the engine also requires that the client sends nothing
  until a request finishes);
- every running request is decoding: it has emitted (``O >= 1``), all its tokens but the
  last are computed (``C == P + O - 1``) and it carries the configured ``k`` drafts, so
  each step schedules exactly the window ``W = k + 1`` for it; ``R * W`` fits the token
  budget; ``max_model_len`` cannot clip before the request ends
  (``P + max_output + W - 2 + lookahead <= max_model_len - 1``); every request already
  holds its GDN slots;
- the run stops before the first step in which a request would finish, unless nothing
  will ever be sent again (``drain``: the cool-down), when it goes on through finishes: a
  request finishes in the step its output reaches ``max_output`` (that step's emission
  clipped to it), leaves the batch after the step and returns its blocks to the pool;
- it stops before the first step whose block growth would not fit in the blocks free
  after the earlier steps (step by step, that step would preempt);
- prefix caching on (named blocks): it stops before the first finish and before the
  first step that would take, free, move or hash a block (``RunLimits.max_context_tok``),
  so the run takes no block at all.

Inside such a run step j (0-based) is fixed by the pre-drawn acceptance::

    a[j, r]   accepted drafts of request r at its (used_r + j)-th verify (0 when k = 0)
    e[j, r]   = a[j, r] + 1 tokens kept and emitted
    C[j, r]   = C[0, r] + sum_{i<j} e[i, r]     (context priced at step j)
    blocks after step j's allocation = max(held_r, BlockRule.attn_blocks(C[j, r] + W + lookahead))

which are exactly the values ``Scheduler.schedule``/``update`` produce one step at a
time (same integer arithmetic; the engine prices each step with the same step-time
call). ``plan_decode_run`` only reads; ``Scheduler.apply_decode_run`` commits the end state.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from capsim.core.acceptance import AcceptanceDraws
from capsim.core.kv_blocks import BlockRule
from capsim.core.request import RequestColumns

MAX_RUN_STEPS = 64
"""Steps planned at most at once (bounds the K x R arrays); a longer run is planned again."""


@dataclass(frozen=True, slots=True)
class DecodeRun:
    """``num_steps`` decode-only steps of the running batch (slots in running order)."""

    slots: np.ndarray
    context_tok: np.ndarray
    """[num_steps, R]: computed tokens of each request before each step."""
    active: np.ndarray | None
    """[num_steps, R]: the request is scheduled in the step (None: all, in every step)."""
    finish_step: np.ndarray
    """[R]: the step in which the request finishes (``num_steps`` or more: not in this run)."""
    num_running: list[int]
    emitted_tok: list[int]
    """Tokens emitted by the whole batch in each step."""
    free_blocks: list[int]
    """Free blocks right after each step's allocation (the step's gauge)."""
    end_computed_tok: np.ndarray
    end_output_tok: np.ndarray
    end_attn_blocks: np.ndarray
    """Blocks held after the last step (finished requests: when they finished)."""
    end_draws_used: np.ndarray
    num_blocks_taken: int

    @property
    def num_steps(self) -> int:
        return len(self.emitted_tok)


@dataclass(frozen=True, slots=True, kw_only=True)
class RunLimits:
    """What bounds a run besides the requests' own counters."""

    num_spec_tok: int
    window_tok: int
    lookahead_tok: int
    max_num_batched_tokens: int
    max_model_len: int
    rule: BlockRule
    """The KV manager's block rule (attention blocks for a number of token slots)."""
    gdn_blocks_per_request: int
    free_blocks: int
    max_context_tok: np.ndarray | None = None
    """Prefix caching on: per running request, the largest context at which a step changes
    no named block (``KVCacheManager.steady_context_tok``); the run stops before the first
    step past it. None: caching off (blocks are counted)."""


def _qualifies(cols: RequestColumns, slots: np.ndarray, lim: RunLimits) -> bool:
    """Every running request decodes its full window, ``max_model_len`` cannot clip and
    every request holds its GDN slots."""
    k, w = lim.num_spec_tok, lim.window_tok
    if not slots.size or w != k + 1 or slots.size * w > lim.max_num_batched_tokens:
        return False
    prompt, out_tok = cols.prompt_tok[slots], cols.num_output_tok[slots]
    max_out = cols.max_output_tok[slots]
    if (
        np.count_nonzero(cols.num_spec_tok[slots] != k)
        or np.count_nonzero(cols.num_computed_tok[slots] != prompt + out_tok - 1)
        or np.count_nonzero(out_tok < 1)
        or int((prompt + max_out).max()) + w - 2 + lim.lookahead_tok > lim.max_model_len - 1
    ):
        return False
    held_gdn = cols.num_gdn_blocks[slots]
    return not (lim.gdn_blocks_per_request and np.count_nonzero(held_gdn) != slots.size)


def _window_kept(
    cols: RequestColumns, slots: np.ndarray, draws: AcceptanceDraws, k: int, max_run: int
) -> np.ndarray:
    """[max_run, R]: tokens kept (and emitted, before the max_output clip) per step."""
    if not k:
        return np.ones((max_run, slots.size), dtype=np.int64)
    used = cols.num_accept_draws_used[slots]
    step = np.arange(max_run, dtype=np.int64)[:, None]
    accepted = draws.draw_many(cols.index[slots][None, :], used[None, :] + step)
    return np.minimum(np.maximum(accepted, 0), k) + 1  # clipped to the k scheduled drafts


def _returned_before(
    finish: np.ndarray, held: np.ndarray, held_gdn: np.ndarray, max_run: int
) -> np.ndarray:
    """[max_run]: blocks returned before each step by requests that finished earlier."""
    done = finish < max_run
    cols_r = np.arange(finish.size)
    returned = np.zeros(max_run + 1, dtype=np.int64)
    np.add.at(returned, finish[done] + 1, held[finish[done] + 1, cols_r[done]] + held_gdn[done])
    return np.cumsum(returned)[:-1]


def plan_decode_run(
    cols: RequestColumns,
    slots: np.ndarray,
    draws: AcceptanceDraws,
    lim: RunLimits,
    drain: bool = False,
    max_steps: int = MAX_RUN_STEPS,
) -> DecodeRun | None:
    """The run of decode-only steps starting now, or None when fewer than 2 steps qualify.

    ``drain``: nothing will ever be sent again (the engine's cool-down), so the run goes on
    through finishes: a finished request leaves the batch after its step and its blocks
    return to the pool; otherwise the run stops before the first finish."""
    if not slots.size:
        return None
    out_tok = cols.num_output_tok[slots]
    max_out = cols.max_output_tok[slots]
    remaining = max_out - out_tok
    # every step emits >= 1 token per request: a request with n tokens left finishes
    # within n steps (so at most n - 1 finish-free steps)
    max_run = min(int(remaining.max() if drain else remaining.min() - 1), max_steps)
    if max_run < 2 or not _qualifies(cols, slots, lim):
        return None
    k, w = lim.num_spec_tok, lim.window_tok
    window_kept = _window_kept(cols, slots, draws, k, max_run)
    kept = np.cumsum(window_kept, axis=0)  # tokens kept (computed) after each step
    before = kept - window_kept
    finish = np.count_nonzero(kept < remaining, axis=0)  # step of the finish (or max_run)
    active = np.arange(max_run, dtype=np.int64)[:, None] <= finish[None, :]
    computed = cols.num_computed_tok[slots]
    context = computed + before
    need = lim.rule.attn_blocks(context + (w + lim.lookahead_tok))
    held = np.maximum.accumulate(np.vstack([cols.num_attn_blocks[slots], need]), axis=0)
    taken = np.cumsum(((held[1:] - held[:-1]) * active).sum(axis=1))
    # a step's growth must fit in what is free after the earlier steps' growth and the
    # finished requests' returns (else it would preempt)
    returned = _returned_before(finish, held, cols.num_gdn_blocks[slots], max_run)
    short = np.flatnonzero(taken > lim.free_blocks + returned)
    n = int(short[0]) if short.size else max_run
    n = min(n, int(finish.max()) + 1)  # the last request's finish ends a drain
    if lim.max_context_tok is not None:
        past = np.flatnonzero((context > lim.max_context_tok).any(axis=1))
        n = min(n, int(past[0]) if past.size else n)
    if not drain:
        n = min(n, int(finish.min()))
    if n < 2:
        return None
    emitted = np.where(active[:n], np.minimum(window_kept[:n], remaining - before[:n]), 0)
    last = np.minimum(finish, n - 1)
    cols_r = np.arange(slots.size)
    used = cols.num_accept_draws_used[slots]
    return DecodeRun(
        slots=slots,
        context_tok=context[:n],
        active=active[:n] if drain and int(finish.min()) < n else None,
        finish_step=finish,
        num_running=np.count_nonzero(active[:n], axis=1).tolist(),
        emitted_tok=emitted.sum(axis=1).tolist(),
        free_blocks=(lim.free_blocks - taken[:n] + returned[:n]).tolist(),
        end_computed_tok=computed + kept[last, cols_r],
        end_output_tok=np.minimum(out_tok + kept[n - 1], max_out),
        end_attn_blocks=held[last + 1, cols_r],
        end_draws_used=used + last + 1 if k else used,
        num_blocks_taken=int(taken[n - 1]),
    )
