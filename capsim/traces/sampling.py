"""Sampling rules of ``vllm bench serve`` (vLLM 0.33 ``vllm/benchmarks/datasets``).

Only token counts matter to capsim, so these functions work on arrays of counts and return
row indices. They reproduce vLLM's order exactly for the same input list:

- ``ShareGPTDataset``/``SpecBench`` seed Python's ``random`` with the dataset seed and call
  ``random.shuffle`` on the list of entries; the permutation depends only on the list length,
  so shuffling ``range(n)`` with ``random.Random(seed)`` gives the same order.
- ``is_valid_sequence`` (``datasets/utils.py``): drop prompt < 4, output < 4 (unless a fixed
  output length is given), prompt > 1024, prompt + output > 2048.
- ``maybe_oversample_requests`` (``datasets/abstractions.py``): when fewer valid requests than
  asked for exist, re-seed with the dataset seed and append ``random.choice`` duplicates.

A local ``random.Random`` instance is used (never the global one), so no state leaks.
"""

from __future__ import annotations

import random

import numpy as np

VLLM_MIN_LEN_TOK = 4
VLLM_MAX_PROMPT_TOK = 1024
VLLM_MAX_TOTAL_TOK = 2048


def check_count(num_requests: object, seed: object) -> None:
    """Validate the two arguments every sampler takes."""
    if isinstance(num_requests, bool) or not isinstance(num_requests, int) or num_requests < 1:
        raise ValueError(f"num_requests={num_requests!r} must be an int >= 1")
    if isinstance(seed, bool) or not isinstance(seed, int) or seed < 0:
        raise ValueError(f"seed={seed!r} must be an int >= 0")


def vllm_valid(
    prompt_tok: np.ndarray, output_tok: np.ndarray, *, skip_min_output_check: bool = False
) -> np.ndarray:
    """Boolean mask of vLLM's default length filter (``is_valid_sequence``)."""
    prompt = np.asarray(prompt_tok, dtype=np.int64)
    output = np.asarray(output_tok, dtype=np.int64)
    bad = (prompt < VLLM_MIN_LEN_TOK) | (prompt > VLLM_MAX_PROMPT_TOK)
    bad |= (prompt + output) > VLLM_MAX_TOTAL_TOK
    if not skip_min_output_check:
        bad |= output < VLLM_MIN_LEN_TOK
    return ~bad


def vllm_shuffled_order(num_rows: int, seed: int) -> list[int]:
    """The order ``random.seed(seed); random.shuffle(rows)`` puts ``num_rows`` rows in.

    CPython's ``Random.shuffle`` loop written out with its ``_randbelow`` (k-bit
    ``getrandbits`` draws, rejected while >= the bound) inlined: the same draws from the
    same generator, without two Python calls per row (a test compares it with
    ``random.shuffle``)."""
    order = list(range(num_rows))
    getrandbits = random.Random(seed).getrandbits
    for i in range(num_rows - 1, 0, -1):
        bound = i + 1
        k = bound.bit_length()
        j = getrandbits(k)
        while j >= bound:
            j = getrandbits(k)
        order[i], order[j] = order[j], order[i]
    return order


def vllm_oversample(selected: list[int], num_requests: int, seed: int) -> list[int]:
    """Pad ``selected`` to ``num_requests`` with vLLM's seeded ``random.choice`` duplicates."""
    if not selected:
        raise ValueError("no valid request to sample from (every row failed the length filter)")
    out = list(selected)
    if len(out) < num_requests:
        rng = random.Random(seed)
        pool = list(selected)
        out.extend(rng.choice(pool) for _ in range(num_requests - len(pool)))
    return out


def vllm_take_valid(
    valid: np.ndarray, num_requests: int, seed: int, *, shuffle: bool = True
) -> list[int]:
    """Walk the (shuffled) rows, keep the first ``num_requests`` valid ones, oversample.

    This is ``ShareGPTDataset.sample`` (and, with every row valid, ``CustomDataset.sample``).
    """
    check_count(num_requests, seed)
    ok = np.asarray(valid, dtype=bool)
    order = vllm_shuffled_order(ok.size, seed) if shuffle else list(range(ok.size))
    selected: list[int] = []
    for i in order:
        if len(selected) >= num_requests:
            break
        if ok[i]:
            selected.append(i)
    return vllm_oversample(selected, num_requests, seed)
