from __future__ import annotations

import math

import numpy as np
import pytest

from capsim.traces import SYNTHETIC_PRESETS, SyntheticSpec, synthetic_table


def test_matches_vllm_random_dataset_draws():
    """vLLM: rng = default_rng(seed); input lens, then output lens, inclusive bounds."""
    spec = SyntheticSpec(input_tok=1000, output_tok=100, range_ratio=0.25)
    t = synthetic_table(spec, num_requests=500, seed=11)
    rng = np.random.default_rng(11)
    lo, hi = math.floor(1000 * 0.75), math.ceil(1000 * 1.25)
    np.testing.assert_array_equal(t.prompt_tok, rng.integers(lo, hi + 1, size=500))
    np.testing.assert_array_equal(t.output_tok, rng.integers(75, 126, size=500))
    assert t.prompt_tok.min() >= 750 and t.prompt_tok.max() <= 1250


def test_presets_and_validation():
    assert set(SYNTHETIC_PRESETS) == {
        "synthetic-balanced",
        "synthetic-prefill-heavy",
        "synthetic-generation-heavy",
    }
    heavy = SYNTHETIC_PRESETS["synthetic-generation-heavy"]
    assert heavy.output_tok > heavy.input_tok
    pre = SYNTHETIC_PRESETS["synthetic-prefill-heavy"]
    assert pre.input_tok > pre.output_tok
    with pytest.raises(ValueError, match="range_ratio"):
        SyntheticSpec(input_tok=10, output_tok=10, range_ratio=1.0)
    with pytest.raises(ValueError, match="input_tok=0"):
        SyntheticSpec(input_tok=0, output_tok=10)
    # vLLM's float arithmetic: floor(20 * (1 - 0.9)) = floor(1.999...) = 1; output low clamps to 1
    assert SyntheticSpec(input_tok=20, output_tok=1, range_ratio=0.9).bounds() == (1, 38, 1, 2)
    with pytest.raises(ValueError, match="0-token prompts"):
        SyntheticSpec(input_tok=1, output_tok=1, range_ratio=0.9)
