from __future__ import annotations

import numpy as np
import pytest
from trace_helpers import SHARED_TRACES, needs_shared, write

from capsim.traces import TraceFormatError, read_azure

HEADER = "TIMESTAMP,ContextTokens,GeneratedTokens\n"


def test_arrivals_are_offsets_from_first_row(tmp_path):
    text = HEADER + (
        "2023-11-16 18:15:46.6805900,374,44\n"
        "2023-11-16 18:15:50.9951690,396,109\n"
        "2023-11-16 18:15:50.9951690,10,1"
    )
    t = read_azure(write(tmp_path / "a.csv", text), name="x")
    assert t.name == "x"
    np.testing.assert_allclose(t.arrival_s, [0.0, 4.314579, 4.314579], atol=1e-9)
    assert t.prompt_tok.tolist() == [374, 396, 10]
    assert t.output_tok.tolist() == [44, 109, 1]


def test_bad_rows_and_headers(tmp_path):
    text = HEADER + (
        "2023-11-16 18:15:46.6805900,374,44\n"
        "2023-11-16 18:15:45.0000000,10,10\n"  # earlier than the row before
        "2023-13-16 18:15:47.0000000,10,10\n"  # month 13
        "2023-11-16 18:15:48.0000000,0,10\n"  # empty prompt
        "2023-11-16 18:15:49.0000000,12\n"  # missing field
    )
    with pytest.raises(TraceFormatError) as info:
        read_azure(write(tmp_path / "a.csv", text))
    assert [i.line for i in info.value.issues] == [3, 4, 5, 6]
    with pytest.raises(TraceFormatError, match="header"):
        read_azure(write(tmp_path / "h.csv", "time,in,out\n1,2,3\n"))


@needs_shared
@pytest.mark.parametrize(
    ("stem", "rows", "span_s"), [("conv", 19366, 3501.7), ("code", 8819, 3435.9)]
)
def test_real_traces(stem, rows, span_s):
    t = read_azure(SHARED_TRACES / f"raw/azure_llm_2023/AzureLLMInferenceTrace_{stem}.csv")
    assert t.num_requests == rows  # PROVENANCE.md row counts
    assert t.arrival_s[0] == 0.0
    assert t.arrival_s[-1] == pytest.approx(span_s, abs=0.05)
