from __future__ import annotations

import json
from collections import Counter

import pytest
from trace_helpers import SHARED_TRACES, needs_shared, write

from capsim.traces import TraceFormatError, read_spec_bench


def _line(qid, cat="qa", turns=("What?",)):
    return json.dumps({"question_id": qid, "category": cat, "turns": list(turns)})


def test_reads_first_turn(tmp_path):
    text = "\n".join([_line(1, "writing", ("t1", "t2")), "", _line(2)]) + "\n"
    qs = read_spec_bench(write(tmp_path / "q.jsonl", text))
    assert [(q.question_id, q.category, q.first_turn, q.line) for q in qs] == [
        (1, "writing", "t1", 1),
        (2, "qa", "What?", 3),
    ]


def test_bad_lines_reported_with_numbers(tmp_path):
    text = "\n".join(
        [
            _line(1),
            "{not json",
            json.dumps({"question_id": "3", "category": "qa", "turns": ["x"]}),
            json.dumps({"question_id": 4, "category": "qa", "turns": []}),
            _line(1),
        ]
    )
    with pytest.raises(TraceFormatError) as info:
        read_spec_bench(write(tmp_path / "q.jsonl", text))
    assert [i.line for i in info.value.issues] == [2, 3, 4, 5]
    assert "repeats line 1" in info.value.issues[-1].reason
    assert "q.jsonl:3: question_id='3'" in str(info.value)


@needs_shared
def test_real_file():
    qs = read_spec_bench(SHARED_TRACES / "raw/spec_bench/question.jsonl")
    assert len(qs) == 480
    cats = Counter(q.category for q in qs)
    # PROVENANCE.md: five 80-question tasks and MT-bench as 8 categories of 10
    assert cats["translation"] == cats["rag"] == cats["qa"] == 80
    assert cats["writing"] == 10
