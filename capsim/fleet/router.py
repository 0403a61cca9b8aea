"""Routers: which replica gets a request when it arrives (pure, no SimPy).

- ``round_robin``: replica ``i mod N`` for the i-th arrival;
- ``least_outstanding``: the replica with the fewest requests handed to it and not yet
  finished (queued + running); ties to the lowest index;
- ``prefix_affinity``: consistent hashing of the prompt's first ``prefix_tok`` tokens (the
  idea of llm-d's prefix-aware routing: requests that share a prefix go where its KV
  blocks already are). A ring of ``vnodes`` points per replica (BLAKE2b, deterministic);
  the key's owner is the first point clockwise. Bounded load: when the owner already holds
  more than ``load_factor`` x the mean outstanding (+1), the next distinct replica on the
  ring takes it, so one hot prefix cannot bury one replica.

Prefix identity comes from the request's segments (``capsim.core.block_hash``): the
pieces covering the first ``prefix_tok`` tokens. A request without segments shares
nothing, so its key is its own id.
"""

from __future__ import annotations

import bisect
import hashlib
from collections.abc import Sequence

from capsim.core.request import Request

ROUTERS: tuple[str, ...] = ("round_robin", "least_outstanding", "prefix_affinity")


def _h(text: str) -> int:
    return int.from_bytes(hashlib.blake2b(text.encode(), digest_size=8).digest(), "big")


def prefix_key(req: Request, prefix_tok: int) -> str:
    if not req.segments:
        return f"req:{req.req_id}"
    pieces, left = [], prefix_tok
    for seg_id, length in req.segments:
        take = min(length, left)
        pieces.append(f"{seg_id}:{take}")
        left -= take
        if left <= 0:
            break
    return "|".join(pieces)


class Router:
    """One routing policy over ``num_replicas`` replicas (a per-simulation object)."""

    def __init__(
        self,
        policy: str,
        num_replicas: int,
        *,
        prefix_tok: int = 256,
        vnodes: int = 64,
        load_factor: float = 1.25,
    ) -> None:
        if policy not in ROUTERS:
            raise ValueError(f"fleet.router={policy!r}: choose one of {ROUTERS}")
        if not isinstance(num_replicas, int) or num_replicas < 1:
            raise ValueError(f"fleet.replicas={num_replicas!r}: must be an int >= 1")
        if prefix_tok < 1:
            raise ValueError(f"fleet.prefix_tok={prefix_tok!r}: must be >= 1")
        if not load_factor >= 1.0:
            raise ValueError(f"fleet.load_factor={load_factor!r}: must be >= 1")
        self.policy = policy
        self.n = num_replicas
        self.prefix_tok = prefix_tok
        self.load_factor = load_factor
        self._next = 0
        ring = sorted(
            (_h(f"replica{r}#{v}"), r) for r in range(num_replicas) for v in range(vnodes)
        )
        self._ring_keys = [k for k, _ in ring]
        self._ring_owner = [r for _, r in ring]

    def pick(self, req: Request, outstanding: Sequence[int]) -> int:
        if self.policy == "round_robin":
            r = self._next
            self._next = (r + 1) % self.n
            return r
        if self.policy == "least_outstanding":
            return min(range(self.n), key=lambda i: (outstanding[i], i))
        limit = self.load_factor * (sum(outstanding) / self.n) + 1
        i = bisect.bisect(self._ring_keys, _h(prefix_key(req, self.prefix_tok)))
        seen: set[int] = set()
        first = -1
        for step in range(len(self._ring_keys)):
            r = self._ring_owner[(i + step) % len(self._ring_keys)]
            if r in seen:
                continue
            if first < 0:
                first = r
            seen.add(r)
            if outstanding[r] <= limit:
                return r
            if len(seen) == self.n:
                break
        return first
