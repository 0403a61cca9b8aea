from __future__ import annotations

import random

import numpy as np
import pytest

from capsim.traces.sampling import vllm_oversample, vllm_take_valid, vllm_valid


def _vllm_reference(entries, num_requests, seed):
    """vLLM's ShareGPTDataset.load_data/sample/maybe_oversample_requests, on entry objects."""
    data = list(entries)
    random.seed(seed)
    random.shuffle(data)
    samples = []
    for e in data:
        if len(samples) >= num_requests:
            break
        p, o = e["p"], e["o"]
        if p < 4 or o < 4 or p > 1024 or p + o > 2048:
            continue
        samples.append(e)
    if len(samples) < num_requests:
        random.seed(seed)
        samples += [random.choice(samples) for _ in range(num_requests - len(samples))]
    return [e["i"] for e in samples]


@pytest.mark.parametrize(("n", "seed"), [(50, 0), (50, 12345), (400, 3)])
def test_take_valid_matches_vllm_reference(n, seed):
    rng = np.random.default_rng(9)
    prompt = rng.integers(1, 1400, 300)
    output = rng.integers(1, 1400, 300)
    entries = [
        {"i": i, "p": int(p), "o": int(o)}
        for i, (p, o) in enumerate(zip(prompt, output, strict=True))
    ]
    state = random.getstate()
    want = _vllm_reference(entries, n, seed)
    random.setstate(state)
    got = vllm_take_valid(vllm_valid(prompt, output), n, seed)
    assert got == want
    assert len(got) == n


def test_take_valid_leaves_global_random_alone():
    random.seed(42)
    before = random.random()
    random.seed(42)
    vllm_take_valid(np.ones(10, dtype=bool), 20, 0)
    assert random.random() == before


def test_valid_filter_boundaries():
    p = np.array([3, 4, 1024, 1025, 1000, 10])
    o = np.array([10, 4, 1024, 10, 1049, 3])
    assert vllm_valid(p, o).tolist() == [False, True, True, False, False, False]
    assert vllm_valid(p, o, skip_min_output_check=True).tolist()[-1] is True


def test_oversample_and_errors():
    assert vllm_oversample([5, 6], 2, 0) == [5, 6]
    out = vllm_oversample([5, 6], 6, 0)
    assert out[:2] == [5, 6] and set(out) <= {5, 6} and len(out) == 6
    with pytest.raises(ValueError, match="no valid request"):
        vllm_oversample([], 3, 0)
    with pytest.raises(ValueError, match="num_requests"):
        vllm_take_valid(np.ones(3, dtype=bool), 0, 0)
    with pytest.raises(ValueError, match="seed"):
        vllm_take_valid(np.ones(3, dtype=bool), 1, -1)
