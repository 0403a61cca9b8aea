"""The request tables a live run and an engine run send: a capsim workload's own rows, cut
to the length caps, in order, with their source ids, and lengths only."""

from __future__ import annotations

import numpy as np
import pytest

from capsim.live.engine_dataset import workload_rows
from capsim.live.workload import live_table
from capsim.traces import load_workload


def test_engine_rows_are_the_first_rows_that_fit_the_caps() -> None:
    rows = workload_rows("sharegpt", 40, seed=3, max_prompt_tok=512, max_output_tok=256)
    full = load_workload("sharegpt", num_requests=80, seed=3)
    keep = np.nonzero((full.prompt_tok <= 512) & (full.output_tok <= 256))[0][:40]
    assert rows.name == "sharegpt" and rows.num_requests == 40
    assert np.array_equal(rows.prompt_tok, full.prompt_tok[keep])
    assert np.array_equal(rows.output_tok, full.output_tok[keep])
    assert rows.source_id == tuple(full.source_id[i] for i in keep)
    assert rows.arrival_s is None and rows.segments is None and rows.parent is None
    with pytest.raises(ValueError, match=r"workload 'sharegpt': only \d+ rows fit the caps"):
        workload_rows("sharegpt", 40, seed=3, max_prompt_tok=2, max_output_tok=2)


def test_live_rows_fit_max_model_len_and_keep_their_source_ids() -> None:
    rows = live_table("sharegpt", 30, seed=4, max_model_len=1024)
    full = load_workload("sharegpt", num_requests=60, seed=4)
    keep = np.nonzero(full.prompt_tok + full.output_tok <= 1024)[0][:30]
    assert np.array_equal(rows.prompt_tok, full.prompt_tok[keep])
    assert rows.source_id == tuple(full.source_id[i] for i in keep)
    uncut = live_table("sharegpt", 30, seed=4)
    assert np.array_equal(
        uncut.output_tok, load_workload("sharegpt", num_requests=30, seed=4).output_tok
    )
    with pytest.raises(ValueError, match=r"only \d+ of 60 rows fit max_model_len=8"):
        live_table("sharegpt", 30, seed=4, max_model_len=8)
