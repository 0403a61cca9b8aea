"""Synthetic workloads like vLLM's ``random`` dataset: integer-uniform lengths around a mean.

vLLM's ``RandomDataset.get_sampling_params`` (vLLM 0.33, ``datasets/random.py``) draws, with
``numpy.random.default_rng(seed)``, input lengths from ``[floor(I(1-r)), ceil(I(1+r))]`` and
then output lengths from ``[max(1, floor(O(1-r))), max(1, ceil(O(1+r)))]``, where ``r`` is
``--random-range-ratio`` in [0, 1) (default 0) and ``I`` is the input length minus the
tokenizer's added special tokens (0 for Qwen). ``synthetic_table`` draws the same numbers with
the same generator calls, so seed s gives vLLM's lengths for ``--seed s``.

The three presets of the published grid are not defined in ``shared/SPEC.md``; the values below
are capsim's choice, following the common 1k/1k, 8k/1k and 1k/8k input/output pattern, with
vLLM's default range ratio. Override them with ``SyntheticSpec``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from types import MappingProxyType

import numpy as np

from capsim.traces.sampling import check_count
from capsim.traces.table import RequestTable


@dataclass(frozen=True, slots=True, kw_only=True)
class SyntheticSpec:
    """Mean input/output lengths and vLLM's ``--random-range-ratio``."""

    input_tok: int = field(metadata={"help": "mean prompt tokens (--random-input-len)"})
    output_tok: int = field(metadata={"help": "mean output tokens (--random-output-len)"})
    range_ratio: float = field(default=0.0, metadata={"help": "--random-range-ratio, in [0, 1)"})

    def __post_init__(self) -> None:
        for name in ("input_tok", "output_tok"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ValueError(f"SyntheticSpec: {name}={value!r} must be an int >= 1")
        if not (0.0 <= self.range_ratio < 1.0):
            raise ValueError(f"SyntheticSpec: range_ratio={self.range_ratio!r} must be in [0, 1)")
        if math.floor(self.input_tok * (1.0 - self.range_ratio)) < 1:
            raise ValueError(
                f"SyntheticSpec: input_tok={self.input_tok} with range_ratio={self.range_ratio} "
                "allows 0-token prompts"
            )

    def bounds(self) -> tuple[int, int, int, int]:
        """(input_low, input_high, output_low, output_high), inclusive, as vLLM computes them."""
        r = self.range_ratio
        in_lo = math.floor(self.input_tok * (1 - r))
        in_hi = math.ceil(self.input_tok * (1 + r))
        out_lo = max(math.floor(self.output_tok * (1 - r)), 1)
        out_hi = max(math.ceil(self.output_tok * (1 + r)), 1)
        return in_lo, in_hi, out_lo, out_hi


SYNTHETIC_PRESETS: MappingProxyType[str, SyntheticSpec] = MappingProxyType(
    {
        "synthetic-balanced": SyntheticSpec(input_tok=1024, output_tok=1024),
        "synthetic-prefill-heavy": SyntheticSpec(input_tok=8192, output_tok=1024),
        "synthetic-generation-heavy": SyntheticSpec(input_tok=1024, output_tok=8192),
    }
)


def synthetic_table(
    spec: SyntheticSpec, *, num_requests: int, seed: int, name: str = "synthetic"
) -> RequestTable:
    """Lengths drawn exactly like vLLM's ``random`` dataset; arrivals None."""
    check_count(num_requests, seed)
    in_lo, in_hi, out_lo, out_hi = spec.bounds()
    rng = np.random.default_rng(seed)
    prompt = rng.integers(in_lo, in_hi + 1, size=num_requests)
    output = rng.integers(out_lo, out_hi + 1, size=num_requests)
    return RequestTable(name=name, prompt_tok=prompt, output_tok=output)
