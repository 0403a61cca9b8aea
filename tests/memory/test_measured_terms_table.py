"""The measured non-KV memory terms: loader rules and the committed H200 table."""

from __future__ import annotations

import csv
from pathlib import Path

import pytest

from capsim.memory.measured_terms import (
    COLUMNS,
    DEFAULT_PATH,
    MEASURED_LABEL,
    load_memory_terms,
)
from capsim.models import PRESETS

REQUIRED_TERMS = ("gdn_prefill_transient", "sampler_dummy_run", "moe_workspace", "cudagraph_pool")
MODELS = (("qwen3.5-35b-a3b", 1), ("qwen3.5-397b-a17b", 8))


def _write(path: Path, rows: list[dict[str, object]]) -> Path:
    with path.open("w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=COLUMNS)
        w.writeheader()
        for row in rows:
            w.writerow({c: row.get(c, "") for c in COLUMNS})
    return path


def _row(term: str, tokens: int = 0, seqs: int = 0, cap: int = 0, nbytes: int = 0) -> dict:
    return {
        "term": term,
        "model": "m",
        "tp": 1,
        "max_num_batched_tokens": tokens,
        "max_num_seqs": seqs,
        "capture_size": cap,
        "bytes": nbytes,
        "kernel": "k",
        "source": "s",
        "command": "c",
        "date": "d",
    }


# ----------------------------------------------------------------------------- rules


def test_lookup_interpolates_between_points_and_hits_them(tmp_path):
    path = _write(
        tmp_path / "t.csv",
        [_row("gdn", tokens=2048, nbytes=1000), _row("gdn", tokens=8192, nbytes=4000)],
    )
    terms = load_memory_terms(path)
    assert terms.axis("gdn", "m", 1) == "max_num_batched_tokens"
    assert terms.bytes_at("gdn", "m", 1, 2048) == 1000
    mid = terms.lookup("gdn", "m", 1, 5120)
    assert mid.value_bytes == pytest.approx(2500.0)
    assert mid.interpolated and mid.label == MEASURED_LABEL
    assert not terms.lookup("gdn", "m", 1, 8192).interpolated


@pytest.mark.parametrize("tokens", [1024, 8193])
def test_lookup_refuses_outside_the_measured_range(tmp_path, tokens):
    path = _write(
        tmp_path / "t.csv",
        [_row("gdn", tokens=2048, nbytes=1000), _row("gdn", tokens=8192, nbytes=4000)],
    )
    with pytest.raises(
        ValueError, match=rf"max_num_batched_tokens={tokens} is outside .*2048, 8192"
    ):
        load_memory_terms(path).lookup("gdn", "m", 1, tokens)


def test_axis_follows_the_setting_that_varies(tmp_path):
    rows = [_row("pool", seqs=256, cap=c, nbytes=c * 10) for c in (1, 8, 512)]
    rows += [_row("sampler", seqs=n, nbytes=n) for n in (256, 1024)]
    terms = load_memory_terms(_write(tmp_path / "t.csv", rows))
    assert terms.axis("pool", "m", 1) == "capture_size"
    assert terms.axis("sampler", "m", 1) == "max_num_seqs"
    assert terms.bytes_at("pool", "m", 1, 260) == pytest.approx(2600.0)


def test_unknown_model_names_what_was_measured(tmp_path):
    terms = load_memory_terms(_write(tmp_path / "t.csv", [_row("gdn", tokens=1, nbytes=1)]))
    with pytest.raises(ValueError, match=r"no measurement for model='x' tp=2 .*m/tp1"):
        terms.lookup("gdn", "x", 2, 1)


@pytest.mark.parametrize(
    ("row", "match"),
    [
        (_row("gdn", tokens=-1), r"max_num_batched_tokens=-1 must be >= 0"),
        ({**_row("gdn"), "bytes": "lots"}, r"bytes='lots' is not an integer"),
        ({**_row("gdn"), "tp": 0}, r"tp=0 must be >= 1"),
        ({**_row("gdn"), "term": ""}, r"term is empty"),
    ],
)
def test_bad_rows_give_one_line_errors(tmp_path, row, match):
    with pytest.raises(ValueError, match=match):
        load_memory_terms(_write(tmp_path / "t.csv", [row]))


def test_duplicate_points_and_bad_files_are_refused(tmp_path):
    dup = [_row("gdn", tokens=8, nbytes=1), _row("gdn", tokens=8, nbytes=2)]
    with pytest.raises(ValueError, match="two rows"):
        load_memory_terms(_write(tmp_path / "d.csv", dup))
    with pytest.raises(ValueError, match="does not exist"):
        load_memory_terms(tmp_path / "missing.csv")
    (tmp_path / "h.csv").write_text("term,bytes\ngdn,1\n")
    with pytest.raises(ValueError, match="columns="):
        load_memory_terms(tmp_path / "h.csv")


# ----------------------------------------------------------------------------- committed table


def test_committed_table_has_every_required_term_for_both_models():
    terms = load_memory_terms()
    assert terms.path == DEFAULT_PATH
    for term in REQUIRED_TERMS:
        for model, tp in MODELS:
            points = terms.points(term, model, tp)
            assert points, (term, model)
            for p in points:
                assert p.kernel and p.source and p.command and p.date
            # cudagraph_pool rows are per-capture increments in one shared pool: the
            # smaller sizes often fit in what the largest capture reserved (0 bytes)
            assert max(p.bytes for p in points) > 0, (term, model)
            if term != "cudagraph_pool":
                assert min(p.bytes for p in points) > 0, (term, model)


def test_committed_table_grids_and_orders():
    terms = load_memory_terms()
    for model, tp in MODELS:
        gdn = terms.points("gdn_prefill_transient", model, tp)
        assert [p.max_num_batched_tokens for p in gdn] == [2048, 8192, 16384]
        # the chunk rule's scratch grows with the prefill length
        assert gdn[0].bytes < gdn[1].bytes < gdn[2].bytes
        moe = terms.points("moe_workspace", model, tp)
        assert [p.max_num_batched_tokens for p in moe] == [2048, 8192, 16384]
        samp = terms.points("sampler_dummy_run", model, tp)
        assert [p.max_num_seqs for p in samp] == [256, 512, 1024]
        assert samp[0].bytes < samp[1].bytes < samp[2].bytes
        pool = terms.points("cudagraph_pool", model, tp)
        assert max(p.capture_size for p in pool) == 512
        total = terms.points("cudagraph_pool_total", model, tp)
        assert len(total) == 1 and total[0].capture_size == 512
        # the pool total is the sum of the per-size increments (same run, same pool)
        assert total[0].bytes >= sum(p.bytes for p in pool) * 0.95
        # interpolation stays between its neighbours
        mid = terms.bytes_at("gdn_prefill_transient", model, tp, 12288)
        assert gdn[1].bytes <= mid <= gdn[2].bytes
        with pytest.raises(ValueError, match="outside the measured range"):
            terms.lookup("gdn_prefill_transient", model, tp, 32768)


def test_moe_workspace_is_at_least_vllm_workspace_shapes():
    """vLLM 0.33's TritonExperts buffers (bf16) are a floor for the measured workspace."""
    bench = _bench_module()
    terms = load_memory_terms()
    for shape in bench.SHAPES:
        for p in terms.points("moe_workspace", shape.model, shape.tp):
            common, ws2 = bench.vllm_moe_workspace_elems(p.max_num_batched_tokens, shape)
            assert p.bytes >= 2 * (common + ws2)
            assert p.bytes <= 2 * (common + ws2) * 1.1 + (64 << 20)


def _bench_module():
    from capsim_kernels.bench.memory import memory_terms

    return memory_terms


def test_bench_shapes_match_the_model_presets():
    """The GPU script's per-GPU shapes (derived from capsim.models): the presets split over
    TP."""
    bench = _bench_module()
    for shape in bench.SHAPES:
        m = PRESETS[shape.model]
        tp = shape.tp
        assert shape.hidden == m.hidden_size
        assert (shape.hk, shape.hv) == (
            m.linear_num_key_heads // tp,
            m.linear_num_value_heads // tp,
        )
        assert (shape.dk, shape.dv) == (m.linear_key_head_dim, m.linear_value_head_dim)
        assert shape.hq == m.num_attention_heads // tp
        assert shape.hkv == max(m.num_kv_heads // tp, 1)
        assert shape.head_dim == m.head_dim
        assert (shape.experts, shape.topk) == (m.num_experts, m.num_experts_per_tok)
        assert shape.moe_inter == m.moe_intermediate_size // tp
        assert shape.shared_inter == m.shared_expert_intermediate_size // tp
        assert shape.vocab == m.vocab_size


def test_bench_capture_sizes_follow_vllm_rule():
    bench = _bench_module()
    sizes = bench.vllm_capture_sizes(256, 8192)
    assert sizes[:4] == [1, 2, 4, 8] and sizes[-1] == 512
    assert len(sizes) == 3 + 31 + 17
    assert bench.vllm_capture_sizes(1024, 8192) == sizes
    assert bench.vllm_capture_sizes(512, 8192) == sizes
    small = bench.vllm_capture_sizes(100, 8192)
    assert small[-1] == 200 and 100 in small
