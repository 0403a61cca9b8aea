"""The result schema: every column of ``points.parquet`` and ``matched.parquet``, with its
unit and meaning.

A point row is assembled from four places: the grid point's keys (``grid.Point.keys``),
the run summary (``capsim.metrics.summarize`` and ``phases``, and ``capsim.simulate``:
metrics with vLLM's and ``vllm bench serve``'s definitions), and the columns
``runner.result_row`` derives for the knee and the report. This table is the one place
they are described: ``docs/reference/columns.md`` is generated from it at build time, and
``tests/docs/test_columns.py`` checks it against the columns a real sweep writes, so
neither can drift. Units are in the names (``_s``, ``_tok``, ``_req``, ``_bytes``...);
``Column.unit`` spells them out.
"""

from __future__ import annotations

from dataclasses import dataclass

from capsim.sweep.matched import ID_COLS, KEEP


@dataclass(frozen=True, slots=True)
class Column:
    unit: str
    meaning: str
    group: str


def _cols(group: str, rows: dict[str, tuple[str, str]]) -> dict[str, Column]:
    return {name: Column(unit, meaning, group) for name, (unit, meaning) in rows.items()}


_POINT = "point (what was simulated)"
_LOAD = "load and requests"
_LAT = "latency (vLLM bench serve definitions)"
_PHASE = "run phases"
_POOL = "KV/state pool and scheduler"
_PREFIX = "prefix caching"

_LATENCY: dict[str, tuple[str, str]] = {}
for _m, _what in (
    ("ttft", "time to first token: send to first output token"),
    ("tpot", "time per output token after the first: (E2EL - TTFT) / (output - 1), per request"),
    ("itl", "inter-token latency: gap between consecutive token emissions of a request"),
    ("e2el", "end-to-end latency: send to last token"),
    ("queue", "queueing delay: send to first scheduled"),
):
    for _stat in ("mean", "median", "p99"):
        _LATENCY[f"{_m}_{_stat}_s"] = ("s", f"{_stat} over requests of the {_what}")

POINT_COLUMNS: dict[str, Column] = {
    **_cols(
        _POINT,
        {
            "point_id": ("id", "hash of the point's full SimConfig (its file name under points/)"),
            "match_id": (
                "id",
                "the same hash without the commit mode: rows that differ only in "
                "commit mode share it (a matched point)",
            ),
            "block": ("name", "the grid block the point came from"),
            "model": ("name", "model preset (capsim.models)"),
            "gpu": ("name", "GPU preset (capsim.gpus)"),
            "tp": ("GPUs", "tensor-parallel size"),
            "gmu": ("fraction", "vLLM gpu_memory_utilization"),
            "workload": ("name", "workload (capsim traces list), with any +sys= suffix"),
            "tree": (
                "shape",
                "draft shape: 'chain' (k-deep chain) or tree widths per depth, e.g. 2x2x1",
            ),
            "tree_model": (
                "name",
                "draft-tree acceptance model: rank or independent (upper bound)",
            ),
            "temperature": ("1", "verification temperature (0 = greedy)"),
            "num_spec_tok": ("tok", "speculative tokens per step k (vLLM num_speculative_tokens)"),
            "commit": (
                "name",
                "GDN commit mode: storeall (vLLM's default), reconstruct (TreeWY) "
                "or deferred (TreeWY, deferred commit)",
            ),
            "prefix_caching": ("bool", "vLLM --enable-prefix-caching (GDN state in 'align' mode)"),
            "seed": ("1", "root seed: the request sample and acceptance draws"),
            "step_time_label": (
                "text",
                "the step-time model in words; a B200 figure says it is a projection",
            ),
        },
    ),
    **_cols(
        _LOAD,
        {
            "load_mode": (
                "name",
                "concurrency (closed loop, vllm bench --max-concurrency) or rate "
                "(open loop, --request-rate)",
            ),
            "load": ("req or req/s", "offered load: concurrent clients or arrival rate"),
            "offered_load": ("req or req/s", "the same offered load as recorded by the run"),
            "num_requests_offered": ("req", "requests the point sends (the grid's rule)"),
            "num_requests": ("req", "requests that finished"),
            "mean_prompt_tok": ("tok", "mean prompt length of the sample"),
            "mean_output_tok": ("tok", "mean output length of the sample"),
            "mean_context_tok": ("tok", "mean prompt + output length (integer) of the sample"),
            "total_output_tok": ("tok", "output tokens of every finished request"),
            "duration_s": ("s", "from the first send to the last finish"),
            "output_throughput_tok_per_s": ("tok/s", "output tokens / duration"),
            "total_token_throughput_tok_per_s": ("tok/s", "(prompt + output tokens) / duration"),
            "request_throughput_req_per_s": ("req/s", "finished requests / duration"),
            "mean_acceptance_len_tok": (
                "tok",
                "tokens emitted per verify step, bonus token included",
            ),
        },
    ),
    **_cols(_LAT, _LATENCY),
    **_cols(
        _PHASE,
        {
            "warmup_s": ("s", "warm-up: from 0 to the first finish"),
            "warmup_output_throughput_tok_per_s": ("tok/s", "output throughput during warm-up"),
            "cooldown_s": ("s", "cool-down: from the last send to the end (the drain)"),
            "cooldown_output_throughput_tok_per_s": ("tok/s", "output throughput in the drain"),
            "load_window_s": ("s", "under load: from 0 to the last send"),
            "load_output_throughput_tok_per_s": (
                "tok/s",
                "output throughput under load (the whole-run figure without the drain)",
            ),
            "steady_num_requests": (
                "req",
                "requests sent between the first finish and the last send",
            ),
            "steady_ttft_mean_s": ("s", "mean TTFT of those requests (NaN if none)"),
            "steady_ttft_p99_s": ("s", "p99 TTFT of those requests (NaN if none)"),
        },
    ),
    **_cols(
        _POOL,
        {
            "num_blocks": ("blocks", "KV/state blocks of the pool (vLLM num_gpu_blocks)"),
            "usable_blocks": ("blocks", "num_blocks - 1 (block 0 is the null block)"),
            "block_size_tok": (
                "tok",
                "attention block size (chosen so attention and GDN pages match)",
            ),
            "bytes_per_block": ("bytes", "group_size x page size: one block across all groups"),
            "gdn_blocks_per_request": (
                "blocks",
                "GDN state blocks one request holds for its "
                "life (1+k per group store-all chain, N+1 tree, "
                "1 TreeWY)",
            ),
            "blocks_per_mean_request": (
                "blocks",
                "blocks one more request of the mean prompt "
                "would take at admission (memory-bound rule)",
            ),
            "analytical_capacity_req": (
                "req",
                "usable_blocks // blocks per request at the mean context: the pool's capacity",
            ),
            "max_num_seqs": ("req", "vLLM max_num_seqs"),
            "peak_kv_usage": ("fraction", "highest used share of the usable blocks over steps"),
            "mean_kv_usage": ("fraction", "step-time-weighted mean used share"),
            "peak_kv_blocks": ("blocks", "peak_kv_usage x usable_blocks"),
            "peak_running": ("req", "most requests running in one step (admitted)"),
            "peak_waiting": ("req", "most requests waiting in one step"),
            "num_steps": ("steps", "engine steps of the run"),
            "num_preemptions": ("count", "preemptions summed over requests (recompute)"),
        },
    ),
    **_cols(
        _PREFIX,
        {
            "prefix_cache_queries_tok": (
                "tok",
                "prompt tokens looked up in the prefix cache (vLLM PrefixCacheStats.queries)",
            ),
            "prefix_cache_hits_tok": ("tok", "of those, tokens served from cached blocks (hits)"),
            "prefix_cache_hit_rate": (
                "fraction",
                "hits / queries (NaN when nothing was queried, e.g. caching off)",
            ),
            "num_cached_block_evictions": ("blocks", "cached blocks evicted to make room"),
            "mean_cached_tok_per_request": (
                "tok",
                "mean prompt tokens a request got from the cache",
            ),
        },
    ),
}
"""Every column of ``points.parquet`` (one row per simulated point)."""

_MATCH = "matched point"
_RATIO = "ratio (> 1 better for TreeWY)"

MATCHED_COLUMNS: dict[str, Column] = {
    **{
        c: Column(POINT_COLUMNS[c].unit, POINT_COLUMNS[c].meaning, "keys (as in points.parquet)")
        for c in ID_COLS
    },
    **_cols(
        _MATCH,
        {
            "mode": ("name", "the TreeWY commit mode compared with store-all in this row"),
            "memory_bound": (
                "bool",
                "store-all preempted, or its free blocks at peak could not "
                "hold one more request of the mean prompt",
            ),
        },
    ),
    **_cols(
        _RATIO,
        {
            "throughput_ratio": ("1", "output throughput TW / SA"),
            "kv_reduction": ("1", "peak pool blocks SA / TW"),
            "admitted_ratio": ("1", "peak running requests TW / SA (Table 1's 'b')"),
            "tpot_ratio": ("1", "mean TPOT SA / TW"),
            "ttft_p99_ratio": ("1", "p99 TTFT SA / TW"),
            "ttft_mean_ratio": ("1", "mean TTFT SA / TW"),
            "e2el_mean_ratio": ("1", "mean end-to-end latency SA / TW"),
        },
    ),
}
"""Every column of ``matched.parquet`` (one row per matched point and TreeWY mode), except
the ``<column>_sa`` / ``<column>_tw`` copies of ``MATCHED_KEEP``."""

MATCHED_KEEP: tuple[str, ...] = KEEP
"""Point columns copied into ``matched.parquet`` as ``<name>_sa`` and ``<name>_tw``."""


def matched_column(name: str) -> Column | None:
    """The description of a ``matched.parquet`` column (None when undocumented)."""
    if name in MATCHED_COLUMNS:
        return MATCHED_COLUMNS[name]
    for side, who in (("_sa", "store-all"), ("_tw", "TreeWY")):
        base = name.removesuffix(side)
        if name.endswith(side) and base in MATCHED_KEEP:
            col = POINT_COLUMNS[base]
            return Column(col.unit, f"{who}'s {base}: {col.meaning}", "both modes' values")
    return None


def markdown_table(columns: dict[str, Column]) -> str:
    """The columns as Markdown tables, one per group, in schema order."""
    out: list[str] = []
    group = None
    for name, col in columns.items():
        if col.group != group:
            group = col.group
            out += ["", f"### {group}", "", "| column | unit | meaning |", "|---|---|---|"]
        out.append(f"| `{name}` | {col.unit} | {col.meaning.replace('|', '/')} |")
    return "\n".join(out).strip() + "\n"
