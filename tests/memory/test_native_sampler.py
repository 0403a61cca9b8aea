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
    # bf16 logits (padded vocab) + the sort moment on the fp32 copy: copy 4, values 4, int64
    # indices 8, int64 reverse indices 8, cub keys 4 and values 8 = 2 + 36 B per entry from
    # 128 rows on (H200 probe: 36.00 / 36.02 at 1024 rows, sort_probe_s11.json)
    m = get_model("qwen3-next-80b-a3b")
    got = native_topk_topp_sampler_peak_bytes(m, 1024)
    assert got == 1024 * (padded_vocab(m) * 2 + m.vocab_size * 36)
    assert got > 2.5 * sampler_peak_bytes(m, 1024)  # the 0.33 path holds 2 + 12


def test_native_path_few_rows_is_the_64_row_measurement() -> None:
    # below 128 rows torch.sort takes another branch: 48.59 B per entry measured at 64 rows
    m = get_model("qwen3-next-80b-a3b")
    got = native_topk_topp_sampler_peak_bytes(m, 64)
    assert got == 64 * padded_vocab(m) * 2 + round(64 * m.vocab_size * 48.586)
    per_entry_127 = native_topk_topp_sampler_peak_bytes(m, 127) / (127 * m.vocab_size)
    per_entry_128 = native_topk_topp_sampler_peak_bytes(m, 128) / (128 * m.vocab_size)
    assert per_entry_127 > per_entry_128 + 12  # the branch switch, not a smooth curve


def _row(row_id: str) -> lv.RowResult:
    rows = [r for r in lv.validate_dir(LOGS) if r.row_id == row_id]
    assert len(rows) == 1 and rows[0].comparison is not None
    return rows[0]


def test_qwen3_next_0_10_2_peak_and_pool() -> None:
    # excerpt qwen3next-80b-h200-tp2-arxivconfi.log: "5.58 GiB for peak activation"; on the
    # 0.33 sampler path capsim charged 2.57 (-54 %) and the pool read +5.2 %; with the sort
    # moment measured on the H200 (torch 2.11, 36 B per entry) it charges 5.97 (+7 %) and the
    # pool reads -2.4 % (the row logs vLLM 0.10.2 on torch 2.8, whose sort was not probed)
    r = _row("qwen3next-80b-h200-tp2-arxivconfi")
    assert r.comparison is not None
    peak = next(t for t in r.comparison.rows if t.term.startswith("peak activation"))
    assert peak.log == 5.58 and peak.capsim is not None
    assert 0 < peak.capsim / peak.log - 1 < 0.10
    assert "PyTorch-native top-k/top-p" in peak.source
    kv = r.err("available_kv")
    assert kv is not None and -0.03 < kv < 0


def test_later_releases_keep_the_0_33_path() -> None:
    # the H200 0.26.0 k=0 start-up: "4.26 GiB for peak activation", unchanged by the rule
    r = _row("h200-35b-g090-k0-s2call4")
    assert r.comparison is not None
    peak = next(t for t in r.comparison.rows if t.term.startswith("peak activation"))
    assert (peak.log, peak.capsim) == (4.26, 4.23)
