"""A request as vLLM v1 sees it: counters that catch up, no prefill/decode phase enum.

::

    |<-------------- num_tokens = prompt + outputs -------------->|<- drafts ->|
    |<------ num_computed_tok (KV/state computed) ------>|        |  num_spec  |
                                                          ^ scheduled next step

``num_new_tok = num_tokens_with_spec - num_computed_tok`` is all the scheduler needs:
a prefill (or a recompute after preemption) is a long run of new tokens, a decode
with k drafts is ``1 + k``.
"""

from __future__ import annotations

from enum import Enum


class Status(Enum):
    WAITING = "waiting"
    RUNNING = "running"
    PREEMPTED = "preempted"
    FINISHED = "finished"


class Request:
    """Mutable per-request counters. Timestamps are ``None`` until they happen."""

    __slots__ = (
        "arrival_s",
        "finish_s",
        "first_scheduled_s",
        "first_token_s",
        "index",
        "last_emit_s",
        "max_output_tok",
        "num_accept_draws_used",
        "num_attn_blocks",
        "num_computed_tok",
        "num_gdn_blocks",
        "num_output_tok",
        "num_preemptions",
        "num_spec_tok",
        "prompt_tok",
        "req_id",
        "status",
    )

    def __init__(
        self,
        *,
        req_id: str,
        prompt_tok: int,
        max_output_tok: int,
        arrival_s: float = 0.0,
        index: int = 0,
    ) -> None:
        if prompt_tok < 1:
            raise ValueError(f"request {req_id}: prompt_tok={prompt_tok} must be >= 1")
        if max_output_tok < 1:
            raise ValueError(f"request {req_id}: max_output_tok={max_output_tok} must be >= 1")
        self.req_id = req_id
        self.index = index
        self.prompt_tok = prompt_tok
        self.max_output_tok = max_output_tok
        self.arrival_s = arrival_s
        self.num_output_tok = 0
        self.num_computed_tok = 0
        self.num_spec_tok = 0
        self.num_attn_blocks = 0
        self.num_gdn_blocks = 0
        self.num_preemptions = 0
        self.num_accept_draws_used = 0
        self.status = Status.WAITING
        self.first_scheduled_s: float | None = None
        self.first_token_s: float | None = None
        self.last_emit_s: float | None = None
        self.finish_s: float | None = None

    @property
    def num_tokens(self) -> int:
        return self.prompt_tok + self.num_output_tok

    @property
    def num_tokens_with_spec(self) -> int:
        return self.prompt_tok + self.num_output_tok + self.num_spec_tok

    @property
    def is_finished(self) -> bool:
        return self.status is Status.FINISHED

    def __repr__(self) -> str:
        return (
            f"Request({self.req_id}, {self.status.value}, computed={self.num_computed_tok}, "
            f"tokens={self.num_tokens}+{self.num_spec_tok})"
        )
