"""When a sent request reaches the scheduler (the async period model's inbound path).

With the deferred output (capsim.cost.engine_period) a sent request reaches the scheduler the
client round trip later and is admitted at the first schedule after that
(experiments/engine/PLAN.md 2026-12-04 18:49; capsim.live.client_roundtrip). The API server's
ingest queue (a study, off unless the step model sets it: PLAN.md 2026-12-04 22:28) holds each
request until the previous one plus its ingest seconds.
"""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass
class Inbound:
    """Send -> scheduler delays, one request after another in send order."""

    round_trip_s: float = 0.0
    ingest_s: float = 0.0
    ingest_s_per_tok: float = 0.0
    _free_s: float = field(default=float("-inf"), repr=False)

    @classmethod
    def of(cls, cost: object, deferred: bool) -> Inbound:
        """The step model's inbound terms (none without the deferred output)."""
        if not deferred:
            return cls()
        return cls(
            round_trip_s=float(getattr(cost, "client_round_trip_s", 0.0)),
            ingest_s=float(getattr(cost, "api_ingest_s", 0.0)),
            ingest_s_per_tok=float(getattr(cost, "api_ingest_s_per_tok", 0.0)),
        )

    def delay_s(self, now_s: float, prompt_tok: int) -> float:
        """Seconds from a send at ``now_s`` until the scheduler has the request."""
        if self.ingest_s <= 0.0 and self.ingest_s_per_tok <= 0.0:
            return self.round_trip_s
        reach = max(
            now_s + self.round_trip_s,
            self._free_s + self.ingest_s + self.ingest_s_per_tok * prompt_tok,
        )
        self._free_s = reach
        return reach - now_s
