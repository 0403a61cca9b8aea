from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
from trace_helpers import write

from capsim.traces import TraceFormatError, load_file


def test_csv_with_arrivals(tmp_path):
    path = write(tmp_path / "w.csv", "arrival_s,prompt_tok,output_tok\n0,10,5\n0.5,20,6\n2,30,7\n")
    t = load_file(path)
    assert t.arrival_s.tolist() == [0.0, 0.5, 2.0]
    assert t.prompt_tok.tolist() == [10, 20, 30]
    assert t.source_id[0] == "w.csv:2"


def test_jsonl_closed_loop_and_gzip(tmp_path):
    text = (
        '{"prompt_tok": 3, "output_tok": 4, "source_id": "a"}\n'
        '\n{"prompt_tok": 5, "output_tok": 6}\n'
    )
    t = load_file(write(tmp_path / "w.jsonl.gz", text, gz=True))
    assert t.arrival_s is None
    assert t.source_id == ("a", "w.jsonl.gz:3")


def test_parquet_roundtrip(tmp_path):
    path = tmp_path / "w.parquet"
    pd.DataFrame({"prompt_tok": [1, 2], "output_tok": [3, 4]}).to_parquet(path)
    t = load_file(path)
    np.testing.assert_array_equal(t.output_tok, [3, 4])
    # fmt overrides the suffix
    assert load_file(path.rename(tmp_path / "w.bin"), fmt="parquet").num_requests == 2


def test_bad_rows_reported(tmp_path):
    text = "arrival_s,prompt_tok,output_tok\n0,10,5\n1,2,5\n0.5,3,3\n1,0,5\n2,abc,1\n3,4\n-1,2,2\n"
    with pytest.raises(TraceFormatError) as info:
        load_file(write(tmp_path / "b.csv", text))
    assert [i.line for i in info.value.issues] == [4, 5, 6, 7, 8]
    assert "earlier" in info.value.issues[0].reason
    assert "prompt_tok=0" in info.value.issues[1].reason
    assert "arrival_s=-1.0 must be >= 0" in info.value.issues[4].reason


def test_bad_files(tmp_path):
    with pytest.raises(TraceFormatError, match="unknown \\['prompt_tokens'\\]"):
        load_file(write(tmp_path / "c.csv", "prompt_tokens,output_tok\n1,2\n"))
    with pytest.raises(ValueError, match="suffix"):
        load_file(write(tmp_path / "c.txt", "x"))
    with pytest.raises(TraceFormatError, match="Parquet"):
        load_file(write(tmp_path / "c.parquet", "not parquet"))
    with pytest.raises(TraceFormatError, match="invalid JSON"):
        load_file(write(tmp_path / "c.jsonl", '{"prompt_tok": 1, "output_tok": 2}\n{oops\n'))
    with pytest.raises(TraceFormatError, match="no rows"):
        load_file(write(tmp_path / "d.csv", "prompt_tok,output_tok\n"))
