"""``capsim memory --validate DIR``: reproduce every real start-up of ``DIR/startups.csv``.

Each row is planned with its own settings (``log_compare.settings_from_log``); model
configs come from ``DIR/models/*.json`` (matched on ``_hf_id``) or capsim's presets.
Per row: attention block size and mamba padding (exact), weights (2 %), available KV
(5 % median, 10 % max) and the "GPU KV cache size" tokens of the pool pinned to the
row's available KV (page/group math). A row that misses gets a ``why``: the notes of its
settings (what the row does not state), and the terms capsim does not model.

``ROLES`` says which rows were used to decide anything while building the plan ("fit");
every other row is a pure prediction.
"""

from __future__ import annotations

import csv
import json
import statistics
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from capsim.config import EngineConfig, SpecDecodeConfig
from capsim.drafter import DrafterSpec, drafter_from_json, drafters_in
from capsim.gpus import GpuSpec, get_gpu
from capsim.memory.log_compare import Comparison, compare, settings_from_log
from capsim.memory.log_fixes import dev_build
from capsim.memory.release_dates import release_from_date_text
from capsim.memory.release_rules import rule
from capsim.memory.terms import Source
from capsim.memory.vllm_log import VllmLog
from capsim.models import PRESETS, ModelSpec, model_from_hf_config
from capsim.units import GiB

# Rows whose figures informed a decision in capsim, for a startups.csv without a ``role``
# column (experiments/vllm_logs/startups.csv has one: "fit: ..." or "prediction").
ROLES: dict[str, str] = {}


@dataclass(frozen=True, slots=True)
class RowResult:
    row_id: str
    model: str
    gpu: str
    tp: int | None
    version: str
    comparison: Comparison | None
    role: str
    why: str

    def err(self, key: str) -> float | None:
        if self.comparison is None:
            return None
        return self.comparison.errors.get(key)


def _num(text: str | None, conv: type = float) -> Any:
    if text is None or str(text).strip() in ("", "unknown", "None"):
        return None
    try:
        return conv(float(text)) if conv is int else conv(text)
    except ValueError:
        return None


def _bool(text: str | None) -> bool | None:
    if text is None or text.strip() == "":
        return None
    return text.strip().lower() in ("true", "1", "yes", "on")


def _version(text: str | None) -> str | None:
    if not text:
        return None
    head = text.strip().split()[0]
    return head if head[:1].isdigit() else None


def _quant(text: str | None) -> str | None:
    if not text or text.strip().lower().startswith("none"):
        return None
    head = text.strip().split()[0].lower()
    if "nvfp4" in text.lower():
        return "modelopt_fp4"
    return head


def _set_cudagraph_figure(log: VllmLog, gib: float | None) -> None:
    """The CSV's ``cudagraph_gib``: vLLM's estimate, or the pool the captures took where the
    row's release has no estimator (release rule ``cudagraph_estimator``: 0.10.2-0.17.1 log only
    "Graph capturing finished in s secs, took X GiB"), which is not an estimate to compare."""
    version = log.vllm_version
    if gib is not None and version and not dev_build(version):
        try:
            estimator = bool(rule("cudagraph_estimator", version))
        except ValueError:
            estimator = True
        if not estimator:
            log.cudagraph_actual_gib = gib
            return
    log.cudagraph_estimate_gib = gib


def log_from_row(row: dict[str, str]) -> VllmLog:
    """A validation row as a parsed log (the CSV's columns are the log's figures)."""
    log = VllmLog()
    log.vllm_version = _version(row.get("vllm_version"))
    log.model = row.get("model_hf_id") or None
    log.tp = _num(row.get("tp"), int)
    log.gmu = _num(row.get("gmu"))
    log.max_model_len = _num(row.get("max_model_len"), int)
    log.max_num_seqs = _num(row.get("max_num_seqs"), int)
    log.max_num_batched_tokens = _num(row.get("max_num_batched_tokens"), int)
    kv = (row.get("kv_cache_dtype") or "").strip()
    log.kv_cache_dtype = kv or None
    log.quantization = _quant(row.get("quantization"))
    log.enforce_eager = _bool(row.get("enforce_eager"))
    log.enable_prefix_caching = _bool(row.get("enable_prefix_caching"))
    spec = (row.get("speculative_config") or "").strip()
    if spec:
        try:
            parsed = json.loads(spec)
            log.num_speculative_tokens = int(parsed.get("num_speculative_tokens", 0))
            log.speculative_method = str(parsed.get("method", "mtp"))
            log.speculative_model = str(parsed["model"]) if parsed.get("model") else None
        except (ValueError, AttributeError):
            pass
    mm = (row.get("limit_mm_per_prompt") or "").strip()
    if mm:
        try:
            parsed_mm = json.loads(mm)
            values = parsed_mm.values() if isinstance(parsed_mm, dict) else [parsed_mm]
            log.limit_mm_per_prompt = max(int(v) for v in values)
        except (ValueError, TypeError):
            pass
    log.gpu_total_gib = _num(row.get("gpu_total_gib"))
    log.weights_gib = _num(row.get("weights_gib"))
    log.peak_activation_gib = _num(row.get("peak_activation_gib"))
    log.non_torch_gib = _num(row.get("non_torch_gib"))
    _set_cudagraph_figure(log, _num(row.get("cudagraph_gib")))
    log.available_kv_gib = _num(row.get("available_kv_gib"))
    log.kv_cache_tokens = _num(row.get("kv_cache_tokens"), int)
    log.max_concurrency = _num(row.get("max_concurrency"))
    log.max_concurrency_tokens = _num(row.get("max_concurrency_tokens"), int)
    log.attention_block_size = _num(row.get("attention_block_size"), int)
    log.mamba_page_padding_pct = _num(row.get("mamba_page_padding_pct"))
    log.num_gpu_blocks = _num(row.get("num_gpu_blocks"), int)
    return log


# Figures an excerpt states more exactly than the CSV (the CSV's cudagraph_gib is the actual
# pool on some rows, the estimate on others; the excerpt's "Estimated CUDA graph memory" line
# is the estimate). From 0.27.0 the accounting line's "GiB for peak activation" is the
# transient peak PLUS the charged graph estimate (v1/worker/gpu_worker.py:
# determine_available_memory, peak_activation_memory); the CSV keeps the printed figure and
# the excerpt's parse takes the estimate out, so the excerpt's value is the torch peak.
_EXCERPT_WINS: tuple[str, ...] = ("cudagraph_estimate_gib", "peak_activation_gib")
_EXCERPT_FILLS: tuple[str, ...] = (
    "full_graphs",
    "cudagraph_piecewise",
    "cudagraph_full",
    "cudagraph_largest",
    "attention_block_size",
    "mamba_page_padding_pct",
    "num_speculative_tokens",
    "architecture",
    "consumed_gib",
)


def with_excerpt(log: VllmLog, path: Path) -> VllmLog:
    """The row's log completed by its excerpt's lines (parsed with ``parse_vllm_log``)."""
    if not path.is_file():
        return log
    from capsim.memory.vllm_log import read_vllm_log

    try:
        ex = read_vllm_log(path)
    except ValueError:
        return log
    for name in _EXCERPT_WINS:
        if getattr(ex, name) is not None:
            setattr(log, name, getattr(ex, name))
    for name in _EXCERPT_FILLS:
        if getattr(log, name) is None and getattr(ex, name) is not None:
            setattr(log, name, getattr(ex, name))
    log.cudagraph_samples_mib = dict(ex.cudagraph_samples_mib)
    return log


def model_configs(directory: Path) -> dict[str, Path]:
    """HF id -> config.json path of ``directory/models``."""
    out: dict[str, Path] = {}
    for path in sorted((directory / "models").glob("*.json")):
        try:
            hf_id = json.loads(path.read_text()).get("_hf_id")
        except ValueError:
            continue
        if hf_id:
            out[str(hf_id).lower()] = path
    return out


REPO_PREFIX = "repo:"  # a model_hf_id naming a config file by its repository path


def repo_config(hf_id: str, directory: Path) -> Path:
    """The file a ``repo:PATH`` model names: PATH under ``directory`` or the first of its
    parents that has it (the validation set lives in the repository, e.g. experiments/
    vllm_logs/, so a repository-relative path resolves from there)."""
    rel = Path(hf_id.strip().removeprefix(REPO_PREFIX))
    if rel.is_absolute() or not rel.parts:
        raise ValueError(f"model_hf_id={hf_id!r}: {REPO_PREFIX} needs a repository-relative path")
    root = directory.resolve()
    for base in (root, *root.parents):
        if (base / rel).is_file():
            return base / rel
    raise ValueError(f"model_hf_id={hf_id!r}: no file {rel} above {directory}")


def resolve_model(hf_id: str, configs: dict[str, Path], directory: Path | None = None) -> ModelSpec:
    """A row's model: ``repo:PATH`` (a config.json in the repository, e.g. an emulated shape
    no checkpoint has), a ``models/*.json`` by ``_hf_id``, or a preset by the id's last part."""
    if hf_id.strip().startswith(REPO_PREFIX):
        path = repo_config(hf_id, directory or Path("."))
        return replace(model_from_hf_config(path), name=path.name.removesuffix(".json"))
    key = hf_id.strip().lower()
    if key in configs:
        spec = model_from_hf_config(configs[key])
        return replace(spec, name=hf_id.split("/")[-1].lower())
    short = key.split("/")[-1]
    for name in (short, short.removesuffix("-instruct"), short.removesuffix("-thinking")):
        if name in PRESETS:
            return PRESETS[name]
    raise ValueError(f"model_hf_id={hf_id!r}: no models/*.json with that _hf_id and no preset")


def resolve_drafter(hf_id: str | None, drafters: dict[str, Path]) -> DrafterSpec | None:
    """The drafter file (``drafters/*.json``, by ``_hf_id``) of a row's speculative model."""
    if not hf_id:
        return None
    path = drafters.get(hf_id.strip().lower())
    return drafter_from_json(path) if path else None


def gpu_from_text(text: str, total_gib: float | None) -> GpuSpec:
    """A row's GPU: a registry entry by name (a parenthetical note is dropped), else, when
    the row logs the total memory, an unnamed GPU of that size (vLLM's tier and capture
    ceiling then follow from the size alone: not an A100, not SM100)."""
    name = text.split("(")[0].strip()
    try:
        return get_gpu(name)
    except ValueError:
        if total_gib is None:
            raise ValueError(
                f"gpu={text!r} is not in the registry and the row has no gpu_total_gib"
            ) from None
    base = get_gpu("H100")
    return replace(
        base,
        name=f"unnamed {total_gib:g} GiB GPU",
        device_name="",
        total_memory_bytes=round(total_gib * GiB),
        non_torch_bytes=None,
        sources=(f"row: gpu {text!r}, total {total_gib} GiB; other fields are the H100's",),
    )


def _why(row: dict[str, str], c: Comparison | None, failure: str | None) -> str:
    reasons: list[str] = []
    if failure:
        reasons.append(f"cannot plan: {failure}")
    if c is not None:
        reasons.extend(c.settings.notes)
        terms = c.plan.terms if c.plan else {}
        for term, t in terms.items():
            # vLLM charges neither graphs (before 0.20) nor runner buffers: not a miss reason
            if t.source is Source.NOT_CHARGED and term not in ("cudagraph", "runner_buffers"):
                reasons.append(f"{term}: {t.label()}")
        if c.differing:
            reasons.append("differs: " + ", ".join(c.differing))
    return "; ".join(reasons)


def validate_dir(directory: Path, *, default_engine: EngineConfig | None = None) -> list[RowResult]:
    csv_path = directory / "startups.csv"
    if not csv_path.is_file():
        raise ValueError(f"--validate {directory}: no startups.csv there")
    configs = model_configs(directory)
    drafters = drafters_in(directory / "drafters")
    base = default_engine or EngineConfig()
    results: list[RowResult] = []
    with csv_path.open(newline="") as fh:
        rows = list(csv.DictReader(fh))
    for row in rows:
        rid = row.get("id", "?")
        role = (row.get("role") or "").strip() or ROLES.get(rid, "prediction")
        log = with_excerpt(log_from_row(row), directory / "excerpts" / f"{rid}.log")
        comparison = None
        failure = None
        if (row.get("pp") or "1").strip() not in ("", "1"):
            failure = (
                f"pipeline parallel (pp={row['pp']}) is not modelled: capsim plans one "
                "TP rank holding every layer"
            )
            results.append(
                RowResult(
                    rid,
                    row.get("model_hf_id", ""),
                    row.get("gpu", ""),
                    log.tp,
                    log.vllm_version or "?",
                    None,
                    role,
                    failure,
                )
            )
            continue
        dated = None if log.vllm_version else release_from_date_text(row.get("vllm_version"))
        if dated:  # a date only: the newest release on or before it (memory/release_dates.py)
            log.vllm_version = dated[0]
            estimate, log.cudagraph_estimate_gib = log.cudagraph_estimate_gib, None
            _set_cudagraph_figure(log, estimate)  # the estimator rule, at the dated release
        try:
            model = resolve_model(row.get("model_hf_id", ""), configs, directory)
            gpu = gpu_from_text(row.get("gpu", ""), log.gpu_total_gib)
            settings = settings_from_log(
                log,
                model=model,
                gpu=gpu,
                engine=base,
                spec=SpecDecodeConfig(num_spec_tok=0),
                drafter=resolve_drafter(log.speculative_model, drafters),
            )
            if dated:
                settings = replace(settings, notes=(dated[1], *settings.notes))
            comparison = compare(settings, log)
            failure = comparison.failure
        except ValueError as exc:
            failure = str(exc)
        results.append(
            RowResult(
                row_id=rid,
                model=row.get("model_hf_id", ""),
                gpu=row.get("gpu", ""),
                tp=log.tp,
                version=log.vllm_version or "?",
                comparison=comparison,
                role=role,
                why=_why(row, comparison, failure),
            )
        )
    return results


def _pct(x: float | None) -> str:
    return "-" if x is None else f"{100 * x:+.1f}%"


def _abs_pct(x: float | None) -> str:
    return "-" if x is None else f"{100 * x:.1f}%"


def _cell(c: Comparison | None, term_prefix: str) -> str:
    if c is None:
        return "-"
    for r in c.rows:
        if r.term.startswith(term_prefix):
            if r.log is None:
                return f"-/{r.capsim:g}" if r.capsim is not None else "-"
            mine = "-" if r.capsim is None else f"{r.capsim:g}"
            return f"{r.log:g}/{mine}"
    return "-"


def summary(results: list[RowResult]) -> dict[str, Any]:
    out: dict[str, Any] = {"rows": len(results)}
    for key in ("available_kv", "weights", "kv_cache_tokens_pinned", "cudagraph_estimate"):
        for subset in ("all", "fit", "prediction"):
            signed = [
                e
                for r in results
                if (e := r.err(key)) is not None
                and (subset == "all" or (r.role == "prediction") == (subset == "prediction"))
            ]
            vals = [abs(e) for e in signed]
            out[f"{key}_{subset}_n"] = len(vals)
            out[f"{key}_{subset}_median_abs"] = statistics.median(vals) if vals else None
            out[f"{key}_{subset}_max_abs"] = max(vals) if vals else None
            out[f"{key}_{subset}_median_signed"] = statistics.median(signed) if signed else None
            out[f"{key}_{subset}_within_20pct"] = sum(v <= 0.2 for v in vals)
    exact = [_exact(r) for r in results]
    out["block_and_padding_logged"] = sum(1 for e in exact if e is not None)
    out["block_and_padding_exact"] = sum(1 for e in exact if e)
    return out


def _exact(r: RowResult) -> bool | None:
    """True when every logged block size / mamba padding matches; None when none is logged."""
    if r.comparison is None:
        return None
    rows = [
        t
        for t in r.comparison.rows
        if t.term.startswith(("attention block", "mamba page")) and t.log is not None
    ]
    if not rows:
        return None
    return all(t.status == "same" for t in rows)


def format_table(results: list[RowResult]) -> str:
    head = (
        f"{'id':<40}{'ver':<7}{'gpu':<10}{'tp':>3}  {'block log/capsim':<18}"
        f"{'pad% log/capsim':<18}{'weights':>9}{'avail KV':>10}{'tokens*':>9}  role  why"
    )
    lines = [head]
    for r in results:
        c = r.comparison
        lines.append(
            f"{r.row_id:<40}{r.version:<7}{r.gpu[:9]:<10}{(r.tp or 0):>3}  "
            f"{_cell(c, 'attention block'):<18}{_cell(c, 'mamba page'):<18}"
            f"{_pct(r.err('weights')):>9}{_pct(r.err('available_kv')):>10}"
            f"{_pct(r.err('kv_cache_tokens_pinned')):>9}  "
            f"{'fit' if r.role != 'prediction' else 'pred'}  {r.why}"
        )
    s = summary(results)
    lines.append("")
    lines.append("* tokens: vLLM's 'GPU KV cache size' from capsim's pool pinned to the row's KV")
    for key, tol in (
        ("available_kv", "predictions: 3% median, 10% max, signed median within 1%"),
        ("weights", "2%"),
        ("cudagraph_estimate", "within 20%"),
    ):
        lines.append(f"{key} (target {tol}):")
        for subset, label in (("prediction", "prediction rows"), ("fit", "fit rows")):
            n = s[f"{key}_{subset}_n"]
            lines.append(
                f"  {label:<16}{n:>3} rows, median |error| "
                f"{_abs_pct(s[f'{key}_{subset}_median_abs'])}, max "
                f"{_abs_pct(s[f'{key}_{subset}_max_abs'])}, median signed "
                f"{_pct(s[f'{key}_{subset}_median_signed'])}, within 20%: "
                f"{s[f'{key}_{subset}_within_20pct']}"
            )
    lines.append(
        f"block size and padding exact on {s['block_and_padding_exact']} of "
        f"{s['block_and_padding_logged']} rows that log them"
    )
    return "\n".join(lines)


TABLE_COLUMNS: tuple[str, ...] = (
    "id",
    "role",
    "vllm_version",
    "gpu",
    "tp",
    "block_log",
    "block_capsim",
    "padding_pct_log",
    "padding_pct_capsim",
    "weights_err",
    "available_kv_err",
    "kv_tokens_pinned_err",
    "why",
)


def write_table(path: Path, results: list[RowResult]) -> None:
    """The per-row table as CSV, written atomically."""
    import io

    from capsim.io.atomic import write_bytes_atomic

    def term(c: Comparison | None, prefix: str) -> tuple[object, object]:
        if c is None:
            return "", ""
        for r in c.rows:
            if r.term.startswith(prefix):
                return ("" if r.log is None else r.log), ("" if r.capsim is None else r.capsim)
        return "", ""

    buf = io.StringIO()
    w = csv.writer(buf, lineterminator="\n")
    w.writerow(TABLE_COLUMNS)
    for r in results:
        c = r.comparison
        bl, bc = term(c, "attention block")
        pl, pc = term(c, "mamba page")
        errs = [r.err(k) for k in ("weights", "available_kv", "kv_cache_tokens_pinned")]
        w.writerow(
            [r.row_id, r.role, r.version, r.gpu, r.tp or "", bl, bc, pl, pc]
            + ["" if e is None else f"{e:.4f}" for e in errs]
            + [r.why]
        )
    write_bytes_atomic(Path(path), buf.getvalue().encode())
