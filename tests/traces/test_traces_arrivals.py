from __future__ import annotations

import numpy as np
import pytest

from capsim.traces import RequestTable, attach_arrivals, load_workload, rescale_rate
from capsim.traces.stats import workload_stats


def test_rescale_keeps_burstiness_and_hits_rate():
    code = load_workload("azure-code", num_requests=2000, seed=0)
    before = workload_stats(code).arrival
    fast = rescale_rate(code, 16.0)
    after = workload_stats(fast).arrival
    assert after.rate_req_per_s == pytest.approx(16.0)
    assert after.gap_cv == pytest.approx(before.gap_cv)
    assert after.gap_cv > 3  # the code trace stays bursty at any rate
    np.testing.assert_array_equal(fast.prompt_tok, code.prompt_tok)


def test_attach_standin_lengths_to_azure_timing():
    lengths = load_workload("burstgpt-standin", num_requests=500, seed=1)
    timing = rescale_rate(load_workload("azure-conv", num_requests=500, seed=1), 8.0)
    t = attach_arrivals(lengths, timing)
    assert t.name == "burstgpt-standin@azure-conv"
    np.testing.assert_array_equal(t.prompt_tok, lengths.prompt_tok)
    np.testing.assert_array_equal(t.arrival_s, timing.arrival_s)


def test_errors():
    closed = RequestTable(name="c", prompt_tok=[1, 2], output_tok=[1, 1])
    timed = RequestTable(name="t", prompt_tok=[1, 2, 3], output_tok=[1, 1, 1], arrival_s=[0, 1, 2])
    with pytest.raises(ValueError, match="no arrival_s"):
        rescale_rate(closed, 1.0)
    with pytest.raises(ValueError, match="rate_req_per_s=0"):
        rescale_rate(timed, 0)
    with pytest.raises(ValueError, match="has 2 requests"):
        attach_arrivals(closed, timed)
