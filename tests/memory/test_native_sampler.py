"""V1 releases whose wheel does not bring FlashInfer (before 0.12.0: no flashinfer in 0.9.2's
Requires-Dist, only the 'flashinfer' extra in 0.10.2 / 0.11.0) warm the sampler up on the
PyTorch-native top-k/top-p: a full-vocabulary sort of the fp32 logits (0.9.2 / 0.10.2
v1/sample/ops/topk_topp_sampler.py apply_top_k_top_p)."""

from __future__ import annotations

from pathlib import Path

from capsim.memory import log_validate as lv
from capsim.memory.activation import native_topk_topp_sampler_peak_bytes, sampler_peak_bytes
from capsim.memory.release_rules import rule
from capsim.memory.weights import padded_vocab
from capsim.models import get_model

LOGS = Path(__file__).resolve().parents[2] / "experiments" / "vllm_logs"


def test_rule_switches_at_0_12() -> None:
    assert not rule("flashinfer_installed_by_default", "0.9.2")
    assert not rule("flashinfer_installed_by_default", "0.11.0")
    assert rule("flashinfer_installed_by_default", "0.12.0")


def test_native_path_bytes_per_entry() -> None:
    # bf16 logits (padded vocab) + fp32 copy, sorted values, int64 indices, top-k mask,
    # sorted softmax, top-p mask, scattered result: 2 + 26 B per entry
    m = get_model("qwen3-next-80b-a3b")
    got = native_topk_topp_sampler_peak_bytes(m, 1024)
    assert got == 1024 * (padded_vocab(m) * 2 + m.vocab_size * 26)
    assert got > 1.8 * sampler_peak_bytes(m, 1024)  # the 0.33 path holds 2 + 12


def _row(row_id: str) -> lv.RowResult:
    rows = [r for r in lv.validate_dir(LOGS) if r.row_id == row_id]
    assert len(rows) == 1 and rows[0].comparison is not None
    return rows[0]


def test_qwen3_next_0_10_2_peak_and_pool() -> None:
    # excerpt qwen3next-80b-h200-tp2-arxivconfi.log: "5.58 GiB for peak activation"; on the
    # 0.33 sampler path capsim charged 2.57 (-54 %) and the pool read +5.2 %
    r = _row("qwen3next-80b-h200-tp2-arxivconfi")
    assert r.comparison is not None
    peak = next(t for t in r.comparison.rows if t.term.startswith("peak activation"))
    assert peak.log == 5.58 and peak.capsim is not None
    assert abs(peak.capsim / peak.log - 1) < 0.25
    assert "PyTorch-native top-k/top-p" in peak.source
    kv = r.err("available_kv")
    assert kv is not None and abs(kv) < 0.02


def test_later_releases_keep_the_0_33_path() -> None:
    # the H200 0.26.0 k=0 start-up: "4.26 GiB for peak activation", unchanged by the rule
    r = _row("h200-35b-g090-k0-s2call4")
    assert r.comparison is not None
    peak = next(t for t in r.comparison.rows if t.term.startswith("peak activation"))
    assert (peak.log, peak.capsim) == (4.26, 4.23)
