from __future__ import annotations

import pytest
from trace_helpers import SHARED_TRACES, needs_shared, sharegpt_json, write

from capsim.traces import TraceFormatError, read_sharegpt

ENTRIES = [
    {
        "id": "a_0",
        "conversations": [{"from": "human", "value": "hi"}, {"from": "gpt", "value": "yo"}],
    },
    {"id": "b_0", "conversations": [{"from": "human", "value": "only one turn"}]},
    {
        "id": "c_1",
        "conversations": [
            {"from": "gpt", "value": "model first"},
            {"from": "human", "value": "then human"},
            {"from": "gpt", "value": "third"},
        ],
    },
    {"id": "d_0"},
]


@pytest.mark.parametrize("gz", [False, True])
def test_reads_pairs_plain_and_gzipped(tmp_path, gz):
    path = write(tmp_path / "s.json", sharegpt_json(ENTRIES), gz=gz)
    f = read_sharegpt(path)
    assert f.num_entries == 4
    assert f.num_short == 2  # one single-turn entry, one without conversations (vLLM drops both)
    assert [(p.index, p.entry_id, p.num_turns) for p in f.pairs] == [(0, "a_0", 2), (2, "c_1", 3)]
    # roles are ignored, as in vLLM: turn 0 is the prompt even when the model speaks first
    assert (f.pairs[1].prompt, f.pairs[1].completion) == ("model first", "then human")


def test_truncated_file_is_an_error(tmp_path):
    text = sharegpt_json(ENTRIES)
    path = write(tmp_path / "t.json", text[: len(text) // 2])
    with pytest.raises(TraceFormatError, match=r"t\.json.*(invalid JSON|truncated)"):
        read_sharegpt(path)


def test_not_an_array_is_an_error(tmp_path):
    with pytest.raises(TraceFormatError, match="JSON array"):
        read_sharegpt(write(tmp_path / "o.json", '{"id": 1}'))
    with pytest.raises(TraceFormatError, match="empty"):
        read_sharegpt(write(tmp_path / "e.json", "  \n"))
    with pytest.raises(TraceFormatError, match="no entries"):
        read_sharegpt(write(tmp_path / "z.json", "[]"))
    with pytest.raises(TraceFormatError, match="no such file"):
        read_sharegpt(tmp_path / "missing.json")


def test_malformed_entries_are_reported_with_lines(tmp_path):
    bad = [
        ENTRIES[0],
        {
            "id": "x",
            "conversations": [{"from": "human", "value": 3}, {"from": "gpt", "value": "a"}],
        },
        "not an object",
        {"id": "y", "conversations": "text"},
    ]
    text = sharegpt_json(bad)
    path = write(tmp_path / "bad.json", text)
    with pytest.raises(TraceFormatError) as info:
        read_sharegpt(path)
    issues = info.value.issues
    assert [i.reason.split(":")[0] for i in issues] == ["entry 1", "entry 2", "entry 3"]
    lines = text.splitlines()
    # each reported line is where that entry starts in the file
    assert '"id": "x"' in lines[issues[0].line] or lines[issues[0].line - 1].strip() == "{"
    assert lines[issues[1].line - 1].strip().startswith('"not an object"')
    assert "bad.json:" in str(info.value)


@needs_shared
def test_real_subset_counts():
    f = read_sharegpt(
        SHARED_TRACES / "raw/sharegpt/ShareGPT_V3_unfiltered_cleaned_split.first17671.json.gz"
    )
    # PROVENANCE.md: 17,671 entries, 17,400 with >= 2 turns
    assert (f.num_entries, len(f.pairs), f.num_short) == (17671, 17400, 271)
    assert f.pairs[0].entry_id == "QWJhYvA_0"
