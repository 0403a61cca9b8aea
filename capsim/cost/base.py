"""The step-time seam: a batch shape goes in, seconds come out.

The simulator only ever calls ``StepTimeModel.step_time_s(shape)``. What the model knows
about the deployment (model, GPU, TP, speculative config, commit mode) is fixed when the
model is built; ``BatchShape`` carries only what changes from step to step.

Token layout of one engine step (all requests scheduled in it)::

    decode requests : num_decode_req x query_tok_per_decode tokens (1+k for a chain,
                      N+1 for a tree), each attending over its own context
    prefill chunks  : prefill_new_tok[i] new tokens on top of prefill_computed_tok[i]
                      tokens already in the KV cache (chunked prefill)
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Protocol

import numpy as np


@dataclass(frozen=True, slots=True, kw_only=True)
class BatchShape:
    """What one engine step computes, as counts (no request identities)."""

    num_decode_req: int = field(metadata={"help": "requests in speculative verify"})
    query_tok_per_decode: int = field(metadata={"help": "tokens verified per decode request"})
    decode_context_tok: np.ndarray = field(
        metadata={"help": "per decode request: tokens in its KV cache before this step"}
    )
    prefill_new_tok: np.ndarray = field(
        metadata={"help": "per prefill chunk: new prompt tokens computed this step"}
    )
    prefill_computed_tok: np.ndarray = field(
        metadata={"help": "per prefill chunk: tokens already computed before the chunk"}
    )

    @property
    def num_prefill_req(self) -> int:
        return int(self.prefill_new_tok.size)

    @property
    def num_prefill_tok(self) -> int:
        return int(self.prefill_new_tok.sum())

    @property
    def num_decode_tok(self) -> int:
        return self.num_decode_req * self.query_tok_per_decode

    @property
    def num_tok(self) -> int:
        """All tokens the target model processes in this step."""
        return self.num_decode_tok + self.num_prefill_tok


class StepTimeModel(Protocol):
    """Anything that prices an engine step in seconds."""

    def step_time_s(self, shape: BatchShape) -> float:
        """Wall time of one engine step (forward, drafting, sampling, host overhead)."""
        ...

    def describe(self) -> dict[str, object]:
        """Identity for run manifests: kind, table path/sha256, projection label, ..."""
        ...
