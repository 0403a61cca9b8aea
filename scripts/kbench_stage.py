"""Stage the kernels device call's payload: a self-contained folder the command cds into.

    python3 scripts/kbench_stage.py --dest /work/main/.devstage/kbench --vllm-src DIR
    python3 scripts/kbench_stage.py --dest .devstage/kbench --no-vllm   # rounds 13 / 14

Writes into DEST (replacing what was there; DEST is git-ignored, never committed):
``capsim/`` (this checkout's package, calibration data included), ``capsim_kernels/``
(``kernels/`` without its results and notes), ``vllm_src/`` (vLLM 0.33.0's op files, as
``python3 -m capsim_kernels.bench.vllm_shim --extract`` writes them; copied from
``--vllm-src``; left out with ``--no-vllm``, for benches that import no vLLM file, e.g.
``capsim_kernels.bench.gdn.stream_ceiling`` (round 13) and ``capsim_kernels.bench.gdn.ladder``
(round 14)), ``COMMIT`` (this checkout's short commit) and
``DIRTY`` when the checkout has uncommitted changes. Prints the stage's size.
"""

from __future__ import annotations

import argparse
import shutil
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
SKIP = shutil.ignore_patterns("__pycache__", "*.pyc", "*.md", "results", "*.tmp")


def _git(*args: str) -> str:
    return subprocess.run(["git", "-C", str(REPO), *args], capture_output=True, text=True,
                          check=True).stdout.strip()  # fmt: skip


def stage(dest: Path, vllm_src: Path | None) -> int:
    if vllm_src is not None and not (vllm_src / "vllm").is_dir():
        raise SystemExit(f"--vllm-src={vllm_src}: no vllm/ folder (extract the wheel first)")
    tmp = dest.with_name(dest.name + ".new")
    if tmp.exists():
        shutil.rmtree(tmp)
    tmp.mkdir(parents=True)
    shutil.copytree(REPO / "capsim", tmp / "capsim", ignore=shutil.ignore_patterns(
        "__pycache__", "*.pyc", "*.tmp"))  # fmt: skip
    shutil.copytree(REPO / "kernels", tmp / "capsim_kernels", ignore=SKIP)
    if vllm_src is not None:
        shutil.copytree(vllm_src, tmp / "vllm_src", ignore=shutil.ignore_patterns("__pycache__"))
    (tmp / "COMMIT").write_text(_git("rev-parse", "--short", "HEAD") + "\n")
    if _git("status", "--porcelain", "--untracked-files=no"):
        (tmp / "DIRTY").write_text(_git("status", "--porcelain", "--untracked-files=no") + "\n")
    if dest.exists():
        shutil.rmtree(dest)
    tmp.rename(dest)
    size = sum(p.stat().st_size for p in dest.rglob("*") if p.is_file())
    print(f"staged {dest} at {(dest / 'COMMIT').read_text().strip()}: {size / 2**20:.1f} MiB"
          + (" (DIRTY)" if (dest / "DIRTY").exists() else ""))  # fmt: skip
    return 0


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--dest", type=Path, required=True)
    src = ap.add_mutually_exclusive_group(required=True)
    src.add_argument("--vllm-src", type=Path)
    src.add_argument("--no-vllm", action="store_true", help="stage without vllm_src/")
    args = ap.parse_args(argv)
    if args.vllm_src is not None and args.dest.resolve() == args.vllm_src.resolve().parent:
        print("--vllm-src lies inside --dest: copy it elsewhere first", file=sys.stderr)
        return 2
    return stage(args.dest, args.vllm_src)


if __name__ == "__main__":
    raise SystemExit(main())
