"""The command-specific flags of the option registry (``OPTIONS`` merges them).

Keys are ``<command>.<flag>``; each entry is written in ``click.option``'s keywords
(``raw_opt``). Engine, speculation and load flags shared by several commands are the
named entries of ``capsim.commands.options``.
"""

from __future__ import annotations

from pathlib import Path

import click

from capsim.commands.opt import Opt, raw_opt
from capsim.commands.param_types import EngineOverheadType, FiniteFloat, ListOf, OutDir, TreeShapes
from capsim.commit_modes import COMMIT_MODES
from capsim.config import MAX_CONCURRENCY, MAX_TOKENS
from capsim.sweep.grid import PUBLISHED_GRID

MODES = ListOf(click.Choice(COMMIT_MODES))
"""Commit modes, comma-separated (``--modes storeall,reconstruct``)."""

COMMAND_FLAGS: dict[str, Opt] = {
    "stats.block_size": raw_opt(
        "--block-size",
        "block_size_tok",
        type=click.IntRange(1, MAX_TOKENS),
        default=1,
        show_default=True,
        help="also report the ideal prefix hit rate in blocks of this many tokens",
    ),
    "calibrate.check": raw_opt(
        "--check", is_flag=True, help="Report predicted vs measured on held-back points."
    ),
    "calibrate.build": raw_opt(
        "--build",
        "build_from",
        type=click.Path(exists=True, file_okay=False, path_type=Path),
        default=None,
        help="Rebuild the packaged tables from a results dir (e.g. kernels/results/h200).",
    ),
    "calibrate.tpot": raw_opt(
        "--tpot", is_flag=True, help="Print predicted decode TPOT per commit mode."
    ),
    "calibrate.running": raw_opt(
        "--running",
        type=ListOf(click.IntRange(1, MAX_CONCURRENCY)),
        default="1,64,256",
        show_default=True,
        help="running requests for --tpot",
    ),
    "calibrate.ctx_tok": raw_opt(
        "--ctx-tok",
        type=click.IntRange(1, MAX_TOKENS),
        default=2048,
        show_default=True,
        help="decode context for --tpot",
    ),
    "calibrate.data_dir": raw_opt(
        "--data-dir",
        type=click.Path(path_type=Path),
        default=None,
        help="tables dir (default: packaged)",
    ),
    "calibrate.json_out": raw_opt(
        "--json-out", type=click.Path(path_type=Path), default=None, help="write data as JSON"
    ),
    "traces.root": raw_opt(
        "--root",
        type=click.Path(file_okay=False, path_type=Path),
        default=None,
        help="folder of compact Parquet files (default: the shipped ones)",
    ),
    "live.url": raw_opt(
        "--url", required=True, help="OpenAI-compatible vLLM server, e.g. http://127.0.0.1:8077"
    ),
    "live.served_name": raw_opt(
        "--served-name", default="tiny", show_default=True, help="--served-model-name"
    ),
    "live.vocab_size": raw_opt(
        "--vocab-size",
        type=click.IntRange(4, 1 << 24),
        default=512,
        show_default=True,
        help="prompt token ids are drawn from [3, vocab)",
    ),
    "live.max_model_len": raw_opt(
        "--max-model-len",
        type=click.IntRange(1, MAX_TOKENS),
        default=None,
        help="drop workload rows with prompt+output above this (server's max_model_len)",
    ),
    "live.step_log": raw_opt(
        "--step-log",
        type=click.Path(path_type=Path),
        default=None,
        help="engine step log the server writes (CAPSIM_STEP_LOG); copied into --out",
    ),
    "live.server_json": raw_opt(
        "--server-json",
        type=click.Path(path_type=Path, exists=True),
        default=None,
        help="the server's engine arguments (for crosscheck); copied into --out",
    ),
    "live.out": raw_opt(
        "--out",
        "out_dir",
        type=OutDir(),
        required=True,
        help="directory for summary.json, requests.parquet and the copied logs",
    ),
    "stepcheck.scenario": raw_opt(
        "--scenario", "names", multiple=True, help="scenario name (repeatable); default: the CI set"
    ),
    "stepcheck.trace_dir": raw_opt(
        "--trace-dir",
        type=click.Path(path_type=Path),
        default=None,
        help="where vLLM traces are (default .live/traces)",
    ),
    "stepcheck.run_vllm": raw_opt(
        "--run-vllm/--no-run-vllm",
        default=True,
        show_default=True,
        help="record the traces now with the live venv (else reuse existing ones)",
    ),
    "stepcheck.out": raw_opt(
        "--out",
        "out_path",
        type=click.Path(path_type=Path),
        default=None,
        help="write the per-scenario summaries as JSON",
    ),
    "stepcheck.admit_with_lookahead": raw_opt(
        "--admit-with-lookahead",
        is_flag=True,
        help="apply vLLM 0.32's rule: drafter lookahead slots reserved at admission too",
    ),
    "sweep.grid": raw_opt(
        "--grid",
        "grid_path",
        type=click.Path(exists=True, dir_okay=False, path_type=Path),
        default=None,
        help=f"grid TOML (default: the published grid, {PUBLISHED_GRID.name})",
    ),
    "sweep.model": raw_opt(
        "--model", "models", multiple=True, help="keep only this model (repeatable)"
    ),
    "sweep.workload": raw_opt(
        "--workload", "workloads", multiple=True, help="keep only this workload"
    ),
    "sweep.tree_block": raw_opt(
        "--tree-block/--no-tree-block",
        "--trees/--no-trees",
        "trees",
        default=True,
        show_default=True,
        help="include the blocks that list tree shapes",
    ),
    "sweep.modes": raw_opt(
        "--modes", type=MODES, default=None, help="commit modes, e.g. storeall,reconstruct"
    ),
    "sweep.out": raw_opt(
        "--out",
        "out_dir",
        type=OutDir(),
        default=Path("runs/sweep"),
        show_default=True,
        help="results directory; rerunning into it resumes",
    ),
    "sweep.steps": raw_opt(
        "--steps/--no-steps", default=True, help="keep per-step time series in steps/"
    ),
    "knee.csv": raw_opt(
        "--csv", "csv_out", is_flag=True, help="also write knee.csv and memory_bound.csv"
    ),
    "report.out": raw_opt(
        "--out",
        "out_dir",
        type=click.Path(file_okay=False, path_type=Path),
        default=None,
        help="where to write PNGs and report.html (default: RESULT_DIR/report)",
    ),
    "whatif.tpot_ms": raw_opt(
        "--tpot-ms",
        type=FiniteFloat(0.0, None, min_open=True),
        default=None,
        help="TPOT target (ms)",
    ),
    "whatif.tpot_stat": raw_opt(
        "--tpot-stat",
        type=click.Choice(["mean", "p99"]),
        default="mean",
        show_default=True,
        help="which TPOT --tpot-ms bounds",
    ),
    "whatif.tree": raw_opt(
        "--tree",
        type=TreeShapes(),
        default="chain",
        show_default=True,
        help="shapes to try, e.g. chain,2x2x1 (see simulate --tree)",
    ),
    "whatif.modes": raw_opt(
        "--modes",
        type=MODES,
        default="storeall,reconstruct",
        show_default=True,
        help="commit modes",
    ),
    "whatif.load_mode": raw_opt(
        "--load-mode",
        type=click.Choice(["concurrency", "rate"]),
        default="concurrency",
        show_default=True,
        help="search concurrent clients (closed loop) or an arrival rate in req/s (open loop)",
    ),
    "whatif.max_load": raw_opt(
        "--max-load",
        type=FiniteFloat(0.0, float(MAX_CONCURRENCY), min_open=True),
        default=1024.0,
        show_default=True,
        help="search limit (concurrent requests or req/s)",
    ),
    "main.debug": raw_opt(
        "--debug", is_flag=True, help="show Python tracebacks (also CAPSIM_DEBUG=1)"
    ),
    "memory.json": raw_opt("--json", "as_json", is_flag=True, help="print the plan as JSON"),
    "simulate.replay": raw_opt("--replay", is_flag=True, help="send at the trace's own timestamps"),
    "simulate.json": raw_opt("--json", "as_json", is_flag=True, help="print the summary as JSON"),
    "simulate.save_result": raw_opt(
        "--save-result",
        is_flag=True,
        help="also write the result as vllm bench serve does (its metric names, ms)",
    ),
    "simulate.result_filename": raw_opt(
        "--result-filename",
        type=click.Path(dir_okay=False, path_type=Path),
        default=Path("capsim-bench-result.json"),
        show_default=True,
        help="where --save-result writes",
    ),
    "simulate.streaming": raw_opt(
        "--streaming/--exact",
        default=None,
        help="bounded memory: no per-request/per-step table kept unless asked, ITL quantiles "
        "from (value, count) runs (default: streaming above 200000 requests)",
    ),
    "simulate.keep_requests": raw_opt(
        "--keep-requests/--no-keep-requests",
        default=None,
        help="keep the per-request table (requests.parquet); default: not when streaming",
    ),
    "simulate.keep_steps": raw_opt(
        "--keep-steps/--no-keep-steps",
        default=None,
        help="keep the per-step table (steps.parquet); default: not when streaming",
    ),
    "engine.jobs.gmu": raw_opt(
        "--gmu",
        "gpu_memory_utilization",
        type=click.FloatRange(0, 1, min_open=True),
        default=0.9,
        show_default=True,
        help="vLLM --gpu-memory-utilization",
    ),
    "engine.jobs.num_speculative_tokens": raw_opt(
        "-k",
        "--num-speculative-tokens",
        type=click.IntRange(0, 16),
        default=3,
        show_default=True,
        help="MTP depth (synthetic acceptance, capsim's default chain)",
    ),
    "engine.jobs.max_num_seqs": raw_opt(
        "--max-num-seqs",
        type=click.IntRange(1),
        default=None,
        help="vLLM --max-num-seqs (default: vLLM's)",
    ),
    "engine.jobs.max_concurrency": raw_opt(
        "--max-concurrency",
        "concurrency",
        default="1,16,64",
        show_default=True,
        help="closed-loop concurrencies, comma-separated",
    ),
    "engine.jobs.input_len": raw_opt(
        "--input-len", type=click.IntRange(1), default=1024, show_default=True, help="prompt tokens"
    ),
    "engine.jobs.output_len": raw_opt(
        "--output-len", type=click.IntRange(1), default=256, show_default=True, help="output tokens"
    ),
    "engine.jobs.waves": raw_opt(
        "--waves",
        type=click.IntRange(1),
        default=4,
        show_default=True,
        help="measured prompts = waves x concurrency (one warm-up wave first)",
    ),
    "engine.jobs.dummy_weights": raw_opt(
        "--dummy-weights/--real-weights",
        default=True,
        show_default=True,
        help="add --load-format dummy",
    ),
    "engine.jobs.out": raw_opt(
        "-o",
        "--out",
        type=click.Path(dir_okay=False, path_type=Path),
        required=True,
        help="job list file to write",
    ),
    "engine.run.jobs": raw_opt(
        "--jobs",
        "jobs_file",
        type=click.Path(exists=True, dir_okay=False),
        required=True,
        help="job list (capsim engine jobs writes one)",
    ),
    "engine.run.model": raw_opt(
        "--model", required=True, help="model dir or HF name given to vllm serve"
    ),
    "engine.run.out": raw_opt(
        "-o",
        "--out",
        type=click.Path(file_okay=False),
        required=True,
        help="results folder (one sub-folder per job)",
    ),
    "engine.run.deadline_s": raw_opt(
        "--deadline-s",
        type=click.FloatRange(1),
        default=3600.0,
        show_default=True,
        help="wall-clock budget: a job whose est_s does not fit what is left is skipped",
    ),
    "engine.run.payload_flags": raw_opt(
        "--payload-flags/--no-payload-flags",
        default=False,
        show_default=True,
        help="the lent-H200 payload's flags (dummy weights, Triton GDN prefill, no "
        "FlashInfer sampler); a normal `pip install vllm` needs none",
    ),
    "engine.record.dest": raw_opt(
        "--dest",
        type=click.Path(file_okay=False, path_type=Path),
        default=Path("experiments/engine"),
        show_default=True,
        help="where runs/, startups/ and startups.csv go",
    ),
    "engine.compare.dest": raw_opt(
        "--dest",
        type=click.Path(exists=True, file_okay=False, path_type=Path),
        default=Path("experiments/engine"),
        show_default=True,
        help="a folder `capsim engine record` wrote",
    ),
    "engine.compare.engine_overhead": raw_opt(
        "--engine-overhead",
        type=EngineOverheadType(),
        default="measured-h200-vllm0.26",
        show_default=True,
        help="the async column's engine fit: a registered one or a `capsim engine host-fit` file",
    ),
    "engine.host_fit.out": raw_opt(
        "--out",
        type=click.Path(dir_okay=False, path_type=Path),
        required=True,
        help="the fit's JSON file (pass it as --engine-overhead FILE.json)",
    ),
    "engine.host_fit.base": raw_opt(
        "--base",
        default="measured-h200-vllm0.26",
        show_default=True,
        help="the registered fit whose FULL-graph terms are kept",
    ),
    "doctor.command": raw_opt(
        "--command", "command", default=None, help="a 'vllm serve MODEL --flags' line (or a file)"
    ),
    "doctor.from_log": raw_opt(
        "--from-log",
        "log_path",
        type=click.Path(exists=True, dir_okay=False, path_type=Path),
        default=None,
        help="a vLLM start-up log instead of a command line",
    ),
    "doctor.vllm_version": raw_opt(
        "--vllm-version",
        default=None,
        help="the vLLM release, e.g. 0.26.0 (default with --from-log: the log's version line)",
    ),
    "doctor.gpu": raw_opt(
        "--gpu", "-g", "gpu_name", default=None, help="GPU registry name (e.g. H200)"
    ),
    "doctor.gpu_total_gib": raw_opt(
        "--gpu-total-gib", type=float, default=None, help="GPU memory as torch reports it"
    ),
    "doctor.model": raw_opt(
        "--model", "-m", "model_name", default=None, help="preset or config.json"
    ),
    "doctor.context": raw_opt(
        "--context", "contexts", type=int, multiple=True, help="context lengths (tokens) to admit"
    ),
    "doctor.json": raw_opt("--json", "as_json", is_flag=True, help="print the report as JSON"),
    "memory.from_log": raw_opt(
        "--from-log",
        type=click.Path(exists=True, dir_okay=False, path_type=Path),
        default=None,
        help="a vLLM start-up log: plan with its settings and compare term by term",
    ),
    "memory.validate": raw_opt(
        "--validate",
        type=click.Path(exists=True, file_okay=False, path_type=Path),
        default=None,
        help="a directory with startups.csv (+ models/): reproduce every row",
    ),
    "memory.validate_out": raw_opt(
        "--validate-out",
        type=click.Path(dir_okay=False, path_type=Path),
        default=None,
        help="with --validate: also write the per-row table as CSV here",
    ),
    "memory.version_rules": raw_opt(
        "--version-rules", is_flag=True, help="print the vLLM version rules table and exit"
    ),
    "memory.drafter": raw_opt(
        "--drafter",
        type=click.Path(exists=True, dir_okay=False, path_type=Path),
        default=None,
        help="an external draft model's spec file (experiments/vllm_logs/drafters/*.json): its "
        "weights, KV layers and runner are planned with the speculative config's k",
    ),
    "memory.gpu_total_gib": raw_opt(
        "--gpu-total-gib",
        type=click.FloatRange(min=1.0, max=4096.0),
        default=None,
        help="the GPU's total memory as torch reports it (vLLM's 'Free memory on device "
        "(F/T GiB)' T); default: the registry's",
    ),
}
