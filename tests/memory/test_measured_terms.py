"""Measured non-KV terms replace the shape estimates and are labelled 'measured (H200)'."""

from __future__ import annotations

from pathlib import Path

from capsim.config import EngineConfig, SpecDecodeConfig
from capsim.gpus import get_gpu
from capsim.memory.measured_terms import COLUMNS, load_memory_terms
from capsim.memory.memory_plan import plan_memory
from capsim.memory.term_lookup import lookup_from_table, measured_term
from capsim.memory.terms import Source
from capsim.memory.weights import padded_vocab
from capsim.models import get_model

GIB = 1 << 30


def _table(tmp_path: Path, rows: list[tuple]) -> Path:  # type: ignore[type-arg]
    p = tmp_path / "terms.csv"
    lines = [",".join(COLUMNS)]
    for term, model, tp, mnbt, seqs, cap, b in rows:
        lines.append(f"{term},{model},{tp},{mnbt},{seqs},{cap},{b},k,s,c,2026-11-30")
    p.write_text("\n".join(lines) + "\n")
    return p


def test_measured_sampler_is_used_and_labelled(tmp_path: Path) -> None:
    m = "qwen3.5-35b-a3b"
    path = _table(
        tmp_path,
        [
            ("sampler_dummy_run", m, 1, 0, 512, 0, 2 * GIB),
            ("sampler_dummy_run", m, 1, 0, 2048, 0, 8 * GIB),
            ("moe_workspace", m, 1, 8192, 0, 0, GIB // 4),
            ("moe_workspace", m, 1, 32768, 0, 0, GIB),
        ],
    )
    lookup = lookup_from_table(load_memory_terms(path))
    # k=0: without drafts there is no rejection-sampler dummy run, the sampler is the peak
    model, gpu, spec = get_model(m), get_gpu("B200"), SpecDecodeConfig(num_spec_tok=0)
    engine = EngineConfig(gmu=0.9, limit_mm_per_prompt=0)
    plan = plan_memory(model, gpu, engine, spec, lookup=lookup)
    # max_num_seqs 1024 lies between the measured 512 and 2048: linear, 4 GiB, plus the bf16
    # logits [1024, padded vocab] that _dummy_sampler_run holds beside the sampler (the
    # table's row is the peak over them)
    # and the dummy forward's hidden states profile_run holds: [mnbt + 2 x 1024, hidden] bf16
    logits = 1024 * padded_vocab(model) * 2
    held = (plan.max_num_batched_tokens + 2 * 1024) * model.hidden_size * 2
    assert plan.activation_parts_bytes["sampler.held_hidden_states"] == held
    assert plan.activation_parts_bytes["sampler"] == 4 * GIB + logits + held
    assert plan.activation_parts_bytes["forward.moe"] == GIB // 2  # 16384 tokens
    assert plan.terms["activation_peak"].source is Source.MEASURED
    assert "sampler_dummy_run" in plan.terms["activation_peak"].detail
    # another tp is not measured: modelled
    other = plan_memory(
        get_model("qwen3.5-397b-a17b"), gpu, EngineConfig(tp=8, gmu=0.9), spec, lookup=lookup
    )
    assert other.terms["activation_peak"].source is Source.MODELLED


def test_log_terms_are_labelled_from_log() -> None:
    model, gpu, spec = get_model("qwen3.5-35b-a3b"), get_gpu("B200"), SpecDecodeConfig()
    plan = plan_memory(
        model,
        gpu,
        EngineConfig(gmu=0.9),
        spec,
        log_terms={"activation_peak": 5 * GIB, "non_torch": GIB // 8},
        lookup=lambda *a: None,
    )
    assert plan.activation_peak_bytes == 5 * GIB
    assert plan.terms["activation_peak"].source is Source.FROM_LOG
    assert plan.terms["non_torch"].source is Source.FROM_LOG


def test_text_only_drops_the_vision_tower_and_encoder_profile() -> None:
    model, gpu, spec = get_model("qwen3.5-35b-a3b"), get_gpu("B200"), SpecDecodeConfig()
    mm = plan_memory(model, gpu, EngineConfig(gmu=0.9), spec, lookup=lambda *a: None)
    text = plan_memory(
        model, gpu, EngineConfig(gmu=0.9, limit_mm_per_prompt=0), spec, lookup=lambda *a: None
    )
    assert mm.multimodal and not text.multimodal
    assert mm.weights_breakdown_bytes["vision"] > 0 == text.weights_breakdown_bytes["vision"]
    assert text.activation_parts_bytes["encoder_cache"] == 0
    assert mm.activation_parts_bytes["encoder_cache"] > 0


def test_committed_h200_table_labels_the_default_plan() -> None:
    """With capsim/calibration/data/h200_memory_terms.csv (kernels/MEMORY_TERMS.md), the
    35B TP1 plan at 1024 rows takes the measured sampler and MoE workspace."""
    plan = plan_memory(
        get_model("qwen3.5-35b-a3b"),
        get_gpu("H200"),
        EngineConfig(gmu=0.9),
        SpecDecodeConfig(num_spec_tok=0),
        lookup=measured_term,
    )
    assert plan.terms["activation_peak"].source is Source.MEASURED
    table = load_memory_terms()
    # the table's peak over the bf16 logits, plus those logits (held by _dummy_sampler_run)
    logits = 1024 * padded_vocab(get_model("qwen3.5-35b-a3b")) * 2
    held = (8192 + 2 * 1024) * 2048 * 2  # hidden states profile_run holds (mnbt 8192)
    assert plan.activation_parts_bytes["sampler"] == logits + held + round(
        table.bytes_at("sampler_dummy_run", "qwen3.5-35b-a3b", 1, 1024)
    )
