"""Convert measured CSVs (``kernels/results/<gpu>/``) into the packaged calibration tables.

Inputs, in ``results_dir``::

    model_step_run*.csv          operator points from kernels/bench/step/model_step.py; a later
                                 run's rows replace earlier rows of the same (op, key)
    model_step_validation.csv    whole steps (held back by construction)
    vllm_gdn_verify.csv (opt.)   vLLM's store-all GDN op (kernel vllm_storeall), joins
                                 the GDN kernel table
    model_step_meta.json         device, versions, dates, commands of each run
    gdn_verify.csv (optional)    GDN verify/commit kernels (kernels/bench, kernels issue)

Outputs, in ``data_dir`` (atomic writes), see ``capsim.calibration.tables``. Run with::

    python -m capsim.calibration.build --results kernels/results/h200 --gpu H200
"""

from __future__ import annotations

import argparse
import csv
import itertools
import json
import os
from pathlib import Path

from capsim.calibration.tables import (
    DATA_DIR,
    GDN_FLOAT_FIELDS,
    GDN_INT_FIELDS,
    HOLDOUT_FRACTION,
    HOLDOUT_SEED,
    OP_FLOAT_FIELDS,
    OP_INT_FIELDS,
    SCHEMA_VERSION,
    VAL_INT_FIELDS,
    assign_splits,
    gdn_series,
    op_series,
    read_rows,
    sha256_file,
)


def _write_atomic(path: Path, text: str) -> None:
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(text)
    os.replace(tmp, path)


def _write_csv(path: Path, rows: list[dict], columns: list[str]) -> None:
    tmp = path.with_name(path.name + ".tmp")
    with tmp.open("w", newline="") as fh:
        writer = csv.DictWriter(fh, fieldnames=columns, extrasaction="ignore")
        writer.writeheader()
        writer.writerows(rows)
    os.replace(tmp, path)


def run_number(path: Path) -> tuple[int, str]:
    """Sort key of ``model_step_run<N>[_suffix].csv``: N as a number (run 10 after run 9)."""
    digits = path.stem.removeprefix("model_step_run")
    n = "".join(itertools.takewhile(str.isdigit, digits))
    return (int(n) if n else -1, path.name)


def _class(row: dict) -> tuple:
    """The class a later run replaces: (op, key); a GEMM's key names the linear, whose
    shape differs per (model, tp), so GEMM classes are (op, n, k)."""
    if row["op"] in ("gemm", "gemm_fp8"):
        return (row["op"], row["n"], row["k"])
    return (row["op"], row["key"])


def merge_runs(paths: list[Path]) -> list[dict]:
    """Rows of all runs in run-number order; a later run's classes (``_class``) replace
    the earlier ones."""
    merged: dict[tuple, list[dict]] = {}
    first: dict[tuple[str, str], int] = {}  # output grouped by (op, key) as first seen
    for path in sorted(paths, key=run_number):
        rows = read_rows(path, OP_INT_FIELDS, OP_FLOAT_FIELDS, ("op", "key"))
        fresh: dict[tuple, list[dict]] = {}
        for row in rows:
            row["source"] = path.name
            fresh.setdefault(_class(row), []).append(row)
            first.setdefault((row["op"], row["key"]), len(first))
        for cls in fresh:  # a replaced class moves to the end, as dict.update re-inserts
            merged.pop(cls, None)
        merged.update(fresh)
    out = [r for group in merged.values() for r in group]
    return sorted(out, key=lambda r: first[r["op"], r["key"]])


def _gdn_key(row: dict) -> tuple:
    return (row["kernel"], row["Hv"], row["Hk"], row["dk"], row["dv"], row["state_dtype"],
            row["T"], row["tree"], row["B"])  # fmt: skip


# the round-6 runs, newest first: (CSV glob, metadata); a run's rows are used only when its
# metadata says checks_ok (every timed row passed its float64 check)
ROUND6_RUNS: tuple[tuple[str, str], ...] = (
    ("round9_gdn_*.csv", "round9_meta.json"),  # 2026-12-02 session-5 call (--plan r9)
    ("round8_gdn_*.csv", "round8_meta.json"),  # 2026-12-02 session-4 call (--plan r8)
    ("round7_gdn_*.csv", "round7_meta.json"),  # 2026-12-02 session-3 call (round7.py plan)
    ("round6_rerun_gdn_*.csv", "round6_rerun_meta.json"),  # 2026-12-02 call (session 2)
    ("round6_gdn_*.csv", "round6_meta.json"),  # 2026-12-01 20:53 call
)


def _round6_run(results_dir: Path, pattern: str, meta_name: str) -> list[dict]:
    paths = sorted(results_dir.glob(pattern))
    if not paths:
        return []
    meta_path = results_dir / meta_name
    ok = json.loads(meta_path.read_text()).get("checks_ok") if meta_path.is_file() else None
    if ok is not True:
        raise ValueError(f"{meta_path}: checks_ok={ok!r}; refusing the round-6 GDN timings")
    out = []
    for path in paths:
        with path.open(newline="") as fh:
            timed = [r for r in csv.DictReader(fh) if r.get("p50_us")]  # checked and timed
        for row in timed:
            for col in GDN_INT_FIELDS:
                row[col] = int(float(row[col]))
            for col in GDN_FLOAT_FIELDS:
                row[col] = float(row[col])
            row["impl"] = row.get("label", "")
            row["source"] = path.name
            out.append(row)
    return out


def round6_rows(results_dir: Path, older: list[dict]) -> list[dict]:
    """The GDN table's rows by precedence: the round-6 runs (ROUND6_RUNS, newest first;
    CUDA graphs, L2 flushed, float64 over all requests: the method of the benchmark), then
    ``older`` (round 5's gdn_verify.csv, the same method on the kernels before round 6)
    where no round-6 run measured the point. One row per (kernel, heads, state, T, tree,
    B). The slow-gate accuracy cell (gate_floor 0.9) is a check, not a timing of the
    serving inputs: not used."""
    seen: set = set()
    out: list[dict] = []
    runs = [_round6_run(results_dir, pat, meta) for pat, meta in ROUND6_RUNS]
    for row in [r for run in runs for r in run] + list(older):
        if float(row.get("gate_floor") or 0.3) != 0.3 or _gdn_key(row) in seen:
            continue
        seen.add(_gdn_key(row))
        out.append(row)
    return out


def require_checks_ok(results_dir: Path) -> None:
    """Refuse GDN kernel timings whose float64 checks failed (or cannot be read): the
    benchmark records ``checks_ok`` in meta.json next to gdn_verify.csv."""
    if not (results_dir / "gdn_verify.csv").is_file():
        return
    meta_path = results_dir / "meta.json"
    if not meta_path.is_file():
        raise ValueError(f"{meta_path}: missing, so checks_ok of gdn_verify.csv is unknown")
    ok = json.loads(meta_path.read_text()).get("checks_ok")
    if ok is not True:
        raise ValueError(
            f"{meta_path}: checks_ok={ok!r}: the kernels failed their float64 checks; "
            "refusing to build calibration tables from these timings"
        )


def _write_ops(
    runs: list[Path], data_dir: Path, prefix: str, seed: int, fraction: float, files: dict[str, str]
) -> None:
    """The merged operator table, with its holdout split."""
    ops = merge_runs(runs)
    for row, split in zip(
        ops, assign_splits(ops, op_series, seed=seed, fraction=fraction), strict=True
    ):
        row["split"] = split
    with runs[0].open() as fh:
        op_columns = next(csv.reader(fh))
    name = f"{prefix}_model_step.csv"
    _write_csv(data_dir / name, ops, [*op_columns, "source", "split"])
    files[name] = sha256_file(data_dir / name)


def _write_validation(
    results_dir: Path, data_dir: Path, prefix: str, files: dict[str, str]
) -> None:
    """The end-to-end validation table, if the results have one."""
    val_path = results_dir / "model_step_validation.csv"
    if not val_path.is_file():
        return
    val = read_rows(val_path, VAL_INT_FIELDS, ("p50_us",), ("model",))
    with val_path.open() as fh:
        val_columns = next(csv.reader(fh))
    name = f"{prefix}_model_step_validation.csv"
    _write_csv(data_dir / name, val, val_columns)
    files[name] = sha256_file(data_dir / name)


def _write_gdn(
    gdn_path: Path,
    vllm_gdn_path: Path,
    results_dir: Path,
    data_dir: Path,
    prefix: str,
    seed: int,
    fraction: float,
    files: dict[str, str],
) -> None:
    """The GDN kernel table (with vLLM's store-all rows and round 6's), with its split."""
    gdn = read_rows(gdn_path, GDN_INT_FIELDS, GDN_FLOAT_FIELDS, ("kernel", "tree"))
    with gdn_path.open() as fh:
        gdn_columns = next(csv.reader(fh))
    if vllm_gdn_path.is_file():
        gdn += read_rows(vllm_gdn_path, GDN_INT_FIELDS, GDN_FLOAT_FIELDS, ("kernel", "tree"))
    gdn = round6_rows(results_dir, gdn)
    gdn_columns += ["impl", "source"]
    for row, split in zip(
        gdn, assign_splits(gdn, gdn_series, seed=seed, fraction=fraction), strict=True
    ):
        row["split"] = split
    name = f"{prefix}_gdn_verify.csv"
    _write_csv(data_dir / name, gdn, [*gdn_columns, "split"])
    files[name] = sha256_file(data_dir / name)


def build(
    results_dir: Path,
    data_dir: Path = DATA_DIR,
    *,
    gpu: str = "H200",
    seed: int = HOLDOUT_SEED,
    fraction: float = HOLDOUT_FRACTION,
) -> dict:
    """Write ``<gpu>_*`` tables and manifest into ``data_dir``; returns the manifest."""
    results_dir, data_dir = Path(results_dir), Path(data_dir)
    require_checks_ok(results_dir)
    runs = sorted(results_dir.glob("model_step_run*.csv"), key=run_number)
    if not runs:
        raise ValueError(f"results_dir={results_dir}: no model_step_run*.csv")
    data_dir.mkdir(parents=True, exist_ok=True)
    prefix = gpu.lower()
    files: dict[str, str] = {}

    _write_ops(runs, data_dir, prefix, seed, fraction, files)
    _write_validation(results_dir, data_dir, prefix, files)

    gdn_path = results_dir / "gdn_verify.csv"
    # vLLM's own store-all op (kernel "vllm_storeall"), timed by model_step.py next to
    # the operators; its rows join the GDN kernel table
    vllm_gdn_path = results_dir / "vllm_gdn_verify.csv"
    if gdn_path.is_file():
        _write_gdn(gdn_path, vllm_gdn_path, results_dir, data_dir, prefix, seed, fraction, files)

    meta_path = results_dir / "model_step_meta.json"
    meta = json.loads(meta_path.read_text()) if meta_path.is_file() else {}
    # the kernels benchmark writes its metadata to meta.json next to gdn_verify.csv
    gdn_meta = sorted(results_dir.glob("gdn_verify*meta*.json"))
    if gdn_path.is_file() and (results_dir / "meta.json").is_file():
        gdn_meta.append(results_dir / "meta.json")
    manifest = {
        "schema_version": SCHEMA_VERSION,
        "gpu": gpu.upper(),
        "measured": True,
        "sources": {
            "model_step_runs": [p.name for p in runs],
            "model_step_sha256": {p.name: sha256_file(p) for p in runs},
            "gdn_verify": gdn_path.name if gdn_path.is_file() else None,
            "gdn_verify_sha256": sha256_file(gdn_path) if gdn_path.is_file() else None,
            "vllm_gdn_verify_sha256": (
                sha256_file(vllm_gdn_path) if vllm_gdn_path.is_file() else None
            ),
            "results_dir": str(results_dir),
        },
        "holdout": {"seed": seed, "fraction": fraction, "rule": "interior points per series"},
        "model_step_meta": meta,
        "gdn_verify_meta": [json.loads(p.read_text()) for p in gdn_meta],
        "files": files,
    }
    _write_atomic(data_dir / f"{prefix}_manifest.json", json.dumps(manifest, indent=1) + "\n")
    return manifest


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--results", type=Path, required=True)
    ap.add_argument("--data", type=Path, default=DATA_DIR)
    ap.add_argument("--gpu", default="H200")
    ap.add_argument("--seed", type=int, default=HOLDOUT_SEED)
    args = ap.parse_args(argv)
    manifest = build(args.results, args.data, gpu=args.gpu, seed=args.seed)
    print(json.dumps(manifest["files"], indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
