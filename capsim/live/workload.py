"""The request table a live run sends: a capsim workload, cut to the server's length."""

from __future__ import annotations

import numpy as np

from capsim.traces.table import RequestTable


def live_table(
    workload: str, num_requests: int, seed: int, max_model_len: int | None = None
) -> RequestTable:
    """``num_requests`` rows of ``workload``; rows longer than ``max_model_len`` are dropped
    (the tiny live models serve short contexts) and the sample is drawn larger to refill."""
    from capsim.traces import load_workload

    if num_requests < 1:
        raise ValueError(f"live.num_requests={num_requests} must be >= 1")
    want = num_requests if max_model_len is None else num_requests * 2
    table = load_workload(workload, num_requests=want, seed=seed)
    keep = np.arange(table.num_requests)
    if max_model_len is not None:
        keep = np.nonzero(table.prompt_tok + table.output_tok <= max_model_len)[0]
    keep = keep[:num_requests]
    if keep.size < num_requests:
        raise ValueError(
            f"workload {workload!r}: only {keep.size} of {want} rows fit "
            f"max_model_len={max_model_len}; lower --num-requests or raise the length"
        )
    return length_rows(table, keep, workload)


def length_rows(table: RequestTable, keep: np.ndarray, name: str) -> RequestTable:
    """Rows ``keep`` of ``table`` as lengths only, named ``name``: a live run sends at its
    own pace, so arrivals, shared segments and parents are not carried (``take`` keeps them)."""
    return RequestTable(
        name=name,
        prompt_tok=table.prompt_tok[keep],
        output_tok=table.output_tok[keep],
        source_id=tuple(table.source_id[i] for i in keep),
    )
