"""The shipped compact files are exactly what the derive script makes from shared/traces."""

from __future__ import annotations

import importlib.util
import shutil
import subprocess
import sys

import pandas as pd
import pytest
from trace_helpers import REPO, SHARED_TRACES, needs_shared

from capsim.traces.compact import COMPACT_COLUMNS, DATA_DIR, read_compact
from capsim.traces.derive import SHAREGPT_DERIVED, derive_frames
from capsim.traces.multiturn import STEM as MULTITURN_STEM

HAVE_TOKENIZERS = all(importlib.util.find_spec(m) for m in ("tokenizers", "tiktoken"))


def test_shipped_files_small_and_well_formed():
    total = sum(p.stat().st_size for p in DATA_DIR.glob("*.parquet"))
    assert total < 3_000_000
    for stem in COMPACT_COLUMNS:
        assert len(read_compact(stem)) > 0


@needs_shared
def test_shipped_defaults_match_derive_output(tmp_path):
    frames = derive_frames(SHARED_TRACES, verify_sample=40 if HAVE_TOKENIZERS else 0)
    for stem, frame in frames.items():
        pd.testing.assert_frame_equal(frame, read_compact(stem), check_like=False)


@needs_shared
def test_derive_script_writes_the_shipped_files(tmp_path):
    """The committed script itself, run as a user would, reproduces every shipped file."""
    script = REPO / "scripts" / "derive_traces" / "derive.py"
    cmd = [sys.executable, str(script), "--shared", str(SHARED_TRACES), "--out", str(tmp_path)]
    done = subprocess.run([*cmd, "--verify-sample", "0"], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    for stem in COMPACT_COLUMNS:
        if stem == MULTITURN_STEM:  # its own script, below
            continue
        assert f"{stem}.parquet" in done.stdout
        pd.testing.assert_frame_equal(read_compact(stem, tmp_path), read_compact(stem))


@needs_shared
@pytest.mark.skipif(
    not HAVE_TOKENIZERS, reason="needs 'tokenizers' and 'tiktoken' (capsim[traces])"
)
def test_multiturn_script_writes_the_shipped_file(tmp_path):
    script = REPO / "scripts" / "derive_traces" / "derive_multiturn.py"
    cmd = [sys.executable, str(script), "--shared", str(SHARED_TRACES), "--out", str(tmp_path)]
    done = subprocess.run(cmd, capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    pd.testing.assert_frame_equal(
        read_compact(MULTITURN_STEM, tmp_path), read_compact(MULTITURN_STEM)
    )


@needs_shared
@pytest.mark.skipif(
    not HAVE_TOKENIZERS, reason="needs 'tokenizers' and 'tiktoken' (capsim[traces])"
)
def test_tokenizer_recount_of_a_sample_matches_shipped():
    # derive_frames raises on the first mismatch between tokenizer and shipped counts
    derive_frames(SHARED_TRACES, verify_sample=150)


@needs_shared
def test_derive_rejects_counts_that_do_not_match_the_text(tmp_path):
    fake = tmp_path / "traces"
    fake.mkdir()
    for sub in ("raw", "tokenizers"):
        (fake / sub).symlink_to(SHARED_TRACES / sub)
    (fake / "derived").mkdir()
    shutil.copy(SHARED_TRACES / "derived/spec_bench_question_lengths.csv", fake / "derived")
    csv = pd.read_csv(SHARED_TRACES / SHAREGPT_DERIVED)
    csv.loc[5, "chars0"] += 1
    csv.to_csv(fake / SHAREGPT_DERIVED, index=False)
    with pytest.raises(ValueError, match="chars0 of row 5"):
        derive_frames(fake)


def test_derive_script_has_help():
    script = REPO / "scripts" / "derive_traces" / "derive.py"
    done = subprocess.run([sys.executable, str(script), "--help"], capture_output=True, text=True)
    assert done.returncode == 0 and "--counts" in done.stdout and "--verify-sample" in done.stdout
