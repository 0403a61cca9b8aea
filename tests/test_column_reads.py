"""Column reads by name fail with one line naming the column and the ones there are."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from capsim.core.request import RequestColumns
from capsim.metrics import summarize


def test_an_unknown_request_counter_names_itself_and_the_known_ones() -> None:
    cols = RequestColumns.zeros(4)
    assert cols["index"] is cols.index
    with pytest.raises(KeyError, match="request column 'idx' is unknown: one of prompt_tok"):
        cols["idx"]


@pytest.mark.parametrize("as_frame", [False, True])
def test_summarize_names_a_missing_request_column(as_frame: bool) -> None:
    n = 3
    req = {
        "prompt_tok": np.full(n, 10),
        "output_tok": np.full(n, 5),
        "finish_s": np.arange(1.0, n + 1),
        "first_scheduled_s": np.zeros(n),
        "send_s": np.zeros(n),
        # ttft_s is missing (the summary reads the queue time first: send/first_scheduled)
    }
    steps = pd.DataFrame({"t_start_s": [0.0], "step_s": [1.0]})
    table = pd.DataFrame(req) if as_frame else req
    with pytest.raises(ValueError, match=r"metrics: column 'ttft_s' is missing \(columns: "):
        summarize(table, steps, np.zeros(0))
