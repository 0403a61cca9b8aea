"""capsim.core.inbound: the send -> scheduler delay (round trip, optional ingest queue)."""

from __future__ import annotations

from dataclasses import dataclass

import pytest

from capsim.core.inbound import Inbound


@dataclass
class _Cost:
    client_round_trip_s: float = 0.02
    api_ingest_s: float = 0.0
    api_ingest_s_per_tok: float = 0.0


def test_no_deferred_output_no_delay() -> None:
    assert Inbound.of(_Cost(), deferred=False).delay_s(1.0, 100) == 0.0


def test_round_trip_alone_is_the_same_for_every_request() -> None:
    inbound = Inbound.of(_Cost(), deferred=True)
    assert [inbound.delay_s(0.0, 100) for _ in range(3)] == [0.02, 0.02, 0.02]


def test_a_burst_queues_behind_the_ingest_and_a_lone_request_does_not() -> None:
    inbound = Inbound.of(_Cost(api_ingest_s=0.004, api_ingest_s_per_tok=1e-6), deferred=True)
    burst = [inbound.delay_s(0.0, 1000) for _ in range(3)]
    assert burst[0] == pytest.approx(0.02)  # the queue was empty
    assert burst[1] == pytest.approx(0.025) and burst[2] == pytest.approx(0.030)
    assert inbound.delay_s(10.0, 1000) == pytest.approx(0.02)  # long after: round trip only
