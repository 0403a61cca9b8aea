"""Ingest a kernels device call (round6.py --plan r7 / r8 / r9 / r10 / r11 / r12) into the results and calibration tables.

    python3 scripts/kbench_ingest.py --src /work/notes/s3/kbench_results [--no-build]

``--src`` holds what the call returned: ``r7/`` (round7_gdn_<phase>.csv,
round7_step_ops.csv, round7_meta.json), ``round7_log.txt`` and ``nvsmi.txt``; or, from
round 8, ``r8.tar.gz`` (``r8/round8_*``, ``nvsmi.txt``: the device returns at most 8 files),
unpacked next to it into ``x/`` first, and ``round8_log.txt`` (round 9: ``r9.tar.gz``,
``round9_log.txt``; round 10: ``r10.tar.gz``, ``round10_log.txt``; round 11: ``r11.tar.gz``,
``round11_log.txt``; round 12: ``r12.tar.gz``, ``round12_log.txt``). The round (``round7``,
``round8``) is read from the metadata's file name (``--prefix`` forces it). Steps:

1. the GDN CSVs, metadata, log and nvidia-smi output go to ``kernels/results/h200/``
   under their round's names (``round7_*``, ``round8_*``); when the call was cut after its last save
   (the metadata counts fewer rows than the CSVs hold), the checks summary is recomputed
   from the CSVs with round6._collect's rule and the metadata says so;
2. the step operators go to ``model_step_run<N>_round7.csv`` (N = --step-run) and a run
   entry is appended to ``model_step_meta.json`` (command, date, versions, jobs);
   ``--step-src DIR`` takes them (round7_step_ops.csv, round7_meta.json) from another run
   of the step phase than the GDN files' (``--step-note`` says why, in the entry);
3. ``capsim.calibration.build`` rebuilds ``capsim/calibration/data`` (the round-7 GDN rows
   take precedence per point: build.ROUND6_RUNS; the step run replaces the classes it
   measured) unless ``--no-build``.

Refuses (one line, non-zero exit) a call whose metadata is missing or whose timed GDN
rows failed a float64 check. Same inputs -> the same files.

Round 13's stream ceiling (``capsim_kernels.bench.gdn.stream_ceiling --out $OUT``): when
``--src`` holds ``round13_stream_meta.json``, its CSV, table, metadata, log and nvidia-smi
output go to ``kernels/results/h200/round13_stream_{ceiling.csv,table.md,meta.json,log.txt,
nvsmi.txt}`` and nothing else happens (no GDN rows, no calibration build); refused when the
metadata is missing a copy bandwidth or a timed row failed its check.

Round 14's ladder (``capsim_kernels.bench.gdn.ladder --out $OUT``): when ``--src`` holds
``round14_ladder_meta.json``, the same way into ``kernels/results/h200/round14_ladder{.csv,
_table.md,_meta.json,_log.txt,_nvsmi.txt}`` (the same refusals; no calibration build).
"""

from __future__ import annotations

import argparse
import csv
import json
import os
import shutil
import sys
import tarfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
PREFIXES = ("round12", "round11", "round10", "round9", "round8", "round7")
STREAM = "round13_stream"
LADDER = "round14_ladder"


def _atomic_text(path: Path, text: str) -> None:
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(text)
    os.replace(tmp, path)


def _copy(src: Path, dst: Path) -> None:
    tmp = dst.with_name(dst.name + ".tmp")
    shutil.copyfile(src, tmp)
    os.replace(tmp, dst)


def _rows(path: Path) -> list[dict]:
    with path.open(newline="") as fh:
        return list(csv.DictReader(fh))


def checks_summary(gdn_rows: list[dict]) -> dict:
    """round6._collect's checks summary of ``gdn_rows``."""
    timed = [r for r in gdn_rows if r.get("p50_us")]
    return {
        "num_rows": len(gdn_rows), "num_timed": len(timed),
        "checks_ok": bool(timed) and all(r["check_ok"] == "True" for r in timed),
        "failed_checks": [f"{r['kernel']} {r['model_shape']} {r['tree']} B={r['B']}"
                          for r in gdn_rows if r["check_ok"] != "True"],
        "contract_misses": [f"{r['kernel']} {r['model_shape']} {r['tree']} B={r['B']} "
                            f"{r['err_max_req_head']}" for r in gdn_rows
                            if r["contract_ok"] != "True"],
    }  # fmt: skip


def ingest_gdn(run: Path, src: Path, dst: Path, prefix: str) -> dict:
    meta_path = run / f"{prefix}_meta.json"
    if not meta_path.is_file():
        raise SystemExit(f"--src={src}: no {prefix}_meta.json under {run}")
    meta = json.loads(meta_path.read_text())
    gdn = sorted(run.glob(f"{prefix}_gdn_*.csv"))
    rows = [r for p in gdn for r in _rows(p)]
    summary = checks_summary(rows)
    if meta.get("num_rows") != summary["num_rows"]:
        meta["checks_recomputed_offline"] = (
            f"the call was cut after its last save ({meta.get('num_rows')} rows then, "
            f"{summary['num_rows']} in the CSVs): checks summary recomputed from the CSVs "
            "with round6._collect's rule (scripts/kbench_ingest.py)"
        )
        meta.update(summary)
    for key, value in summary.items():  # a metadata without the summary: the CSVs'
        meta.setdefault(key, value)
    if not summary["checks_ok"]:
        raise SystemExit(f"{meta_path}: checks_ok=False ({summary['failed_checks'][:3]}): "
                         "refusing to ingest GDN timings that failed their float64 check")  # fmt: skip
    for p in gdn:
        _copy(p, dst / p.name)
    for name, new in ((f"{prefix}_log.txt", f"{prefix}_log.txt"),
                      ("nvsmi.txt", f"{prefix}_nvsmi.txt")):  # fmt: skip
        cand = next((c for c in (src / name, run / name, run.parent / name) if c.is_file()),
                    None)  # fmt: skip
        if cand is not None:
            _copy(cand, dst / new)
    _atomic_text(dst / f"{prefix}_meta.json", json.dumps(meta, indent=1, default=str) + "\n")
    return meta


def ingest_stream(src: Path, dst: Path, prefix: str = STREAM,
                  csv_name: str = f"{STREAM}_ceiling.csv") -> dict:  # fmt: skip
    """Round 13's stream-ceiling call (module docstring) into ``dst``; with ``prefix`` /
    ``csv_name`` round 14's ladder (LADDER, ``round14_ladder.csv``) the same way."""
    meta = json.loads((src / f"{prefix}_meta.json").read_text())
    csv_path = src / csv_name
    if not csv_path.is_file() or not meta.get("copy_gbps"):
        raise SystemExit(f"--src={src}: no {csv_path.name} or no copy_gbps in the metadata")
    rows = _rows(csv_path)
    bad = [r["variant"] for r in rows if r["p50_us"] and r["check_ok"] != "True"]
    if bad:
        raise SystemExit(f"{csv_path}: timed rows failed their check ({bad[:3]}): refusing")
    for name in (csv_name, f"{prefix}_table.md", f"{prefix}_log.txt"):
        if (src / name).is_file():
            _copy(src / name, dst / name)
    if (src / "nvsmi.txt").is_file():
        _copy(src / "nvsmi.txt", dst / f"{prefix}_nvsmi.txt")
    _atomic_text(dst / f"{prefix}_meta.json", json.dumps(meta, indent=1, default=str) + "\n")
    return meta


def _nvsmi_lines(src: Path) -> list[str]:
    path = src / "nvsmi.txt"
    if not path.is_file():
        return []
    return [ln.rstrip() for ln in path.read_text().splitlines() if "H200" in ln or "Driver" in ln][:4]


def step_rows(run: Path, prefix: str) -> list[dict] | None:
    """The call's step-operator rows (None: no such file); refuses a non-positive timing."""
    path = run / f"{prefix}_step_ops.csv"
    if not path.is_file():
        return None
    rows = _rows(path)
    bad = [r for r in rows if not (float(r["p50_us"]) > 0.0)]
    if bad:
        raise SystemExit(f"{path}: p50_us={bad[0]['p50_us']!r} in row {bad[0]['op']} "
                         f"{bad[0]['key']}: refusing non-positive step timings")  # fmt: skip
    return rows


def ingest_step(run: Path, src: Path, dst: Path, meta: dict, step_run: int, prefix: str,
                note: str = "") -> Path | None:  # fmt: skip
    rows = step_rows(run, prefix)
    if rows is None:
        return None
    path = run / f"{prefix}_step_ops.csv"
    out = dst / f"model_step_run{step_run}_{prefix}.csv"
    _copy(path, out)
    step = meta.get("step_ops", {})
    entry = {
        "schema_version": 1, "run": f"run{step_run}", "started_utc": meta.get("date_utc"),
        "command": meta.get("command"), "commit": meta.get("commit"), "device": meta.get("gpu"),
        "torch": meta.get("torch"), "triton": meta.get("triton"), "python": meta.get("python"),
        "kernels": "vllm", "vllm": "0.33.0 op files (vllm_shim --extract)", "replays": 15,
        "seed": 7, "grid": step.get("grid"), "jobs": step.get("jobs"),
        "fp8": step.get("fp8"), "op_rows": len(rows), "phase_s": meta.get("phase_s", {}).get(
            "step_ops"), "nvidia_smi": _nvsmi_lines(src),
        "files": {"ops": out.name},
        "note": note or ("round 7's step operators (kernels/bench/step/round7_ops.py), one "
                         "kernels device call with the GDN phases (round7_meta.json)"),
    }  # fmt: skip
    meta_path = dst / "model_step_meta.json"
    all_meta = json.loads(meta_path.read_text())
    all_meta["runs"] = [r for r in all_meta["runs"] if r.get("run") != entry["run"]] + [entry]
    _atomic_text(meta_path, json.dumps(all_meta, indent=1) + "\n")
    return out


def unpack(src: Path) -> Path:
    """``src`` itself, or, when it holds a round-8 .. 12 tarball (r12.tar.gz, r11.tar.gz, r10.tar.gz / r9.tar.gz /
    r8.tar.gz) and no r10/ / r9/ / r8/ folder, the tarball unpacked into ``src/x`` (members
    outside it refused), with the log returned next to the tarball (round10_log.txt, ...)
    copied in."""
    for n in (12, 11, 10, 9, 8):
        tar = src / f"r{n}.tar.gz"
        if (src / f"r{n}").is_dir():
            return src
        if not tar.is_file():
            continue
        out = src / "x"
        if not (out / f"r{n}").is_dir():
            with tarfile.open(tar) as tf:
                tf.extractall(out, filter="data")
        name = f"round{n}_log.txt"
        if (src / name).is_file() and not (out / name).is_file():
            _copy(src / name, out / name)
        return out
    return src


def run_dir(src: Path, prefix: str | None) -> tuple[Path, str]:
    """The folder holding ``<prefix>_meta.json`` (src/r10, src/r9, ..., or src) and the prefix."""
    for pre in (prefix,) if prefix else PREFIXES:
        for run in (src / f"r{pre.removeprefix('round')}", src):
            if (run / f"{pre}_meta.json").is_file():
                return run, pre
    want = prefix or "/".join(PREFIXES)
    raise SystemExit(f"--src={src}: no {want}_meta.json under it or its r7/ .. r12/ folder")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--src", type=Path, required=True)
    ap.add_argument("--results", type=Path, default=REPO / "kernels/results/h200")
    ap.add_argument("--step-run", type=int, default=11)
    ap.add_argument("--no-build", action="store_true")
    ap.add_argument("--step-src", type=Path, default=None,
                    help="folder of round7_step_ops.csv + round7_meta.json (default: --src's)")
    ap.add_argument("--step-note", default="")
    ap.add_argument("--prefix", choices=PREFIXES, default=None,
                    help="the round's file prefix (default: the metadata found)")  # fmt: skip
    args = ap.parse_args(argv)
    if (args.src / f"{STREAM}_meta.json").is_file():
        meta = ingest_stream(args.src, args.results)
        print(f"stream ceiling: {meta.get('num_timed')} timed rows of {meta.get('num_rows')}, "
              f"copy {meta['copy_gbps']} GB/s -> {args.results}")  # fmt: skip
        return 0
    if (args.src / f"{LADDER}_meta.json").is_file():
        meta = ingest_stream(args.src, args.results, LADDER, f"{LADDER}.csv")
        print(f"ladder: {meta.get('num_timed')} timed rows of {meta.get('num_rows')}, "
              f"copy {meta['copy_gbps']} GB/s -> {args.results}")  # fmt: skip
        return 0
    src = unpack(args.src)
    run, prefix = run_dir(src, args.prefix)
    step_run = args.step_src or run
    step_rows(step_run, prefix)  # every refusal before anything is written
    step_meta = None
    if args.step_src is not None:
        path = args.step_src / f"{prefix}_meta.json"
        if not path.is_file():
            raise SystemExit(f"--step-src={args.step_src}: no {prefix}_meta.json")
        step_meta = json.loads(path.read_text())
    meta = ingest_gdn(run, src, args.results, prefix)
    step = ingest_step(step_run, src, args.results, step_meta or meta, args.step_run, prefix,
                       args.step_note)  # fmt: skip
    print(f"GDN: {meta['num_timed']} timed rows, checks_ok {meta['checks_ok']}, "
          f"contract misses {len(meta.get('contract_misses', []))}; step rows -> {step}")  # fmt: skip
    if not args.no_build:
        sys.path.insert(0, str(REPO))
        from capsim.calibration.build import build

        results = args.results.resolve()
        if results.is_relative_to(Path.cwd().resolve()):  # the manifest records the path:
            results = results.relative_to(Path.cwd().resolve())  # not the checkout's place
        files = build(results)["files"]
        print("built", sorted(files))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
