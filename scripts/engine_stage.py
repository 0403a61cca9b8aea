"""Stage the real-engine harness beside a built payload, for one device call (CPU work, here).

    python3 scripts/engine_stage.py experiments/engine/jobs/call46.json [...] [--dest DEST]

Copies what the device runs from this checkout into DEST (git-ignored): the runner
(capsim/live/engine_runner.py), its job definitions (engine_jobs.py), the device script
(engine_device.sh), the step-log hook (capsim/live/engine_steplog/, which engine_jobs.py
finds beside itself: a job with ``server.step_log`` fails without it) and the named job
lists, each parsed first (a bad job file stops here, not on the device). The payload
(site.tar.xz or its .part pieces, model.tar.xz, MANIFEST.json) comes from
scripts/engine_payload.py and is checked to be present.
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
LIVE = ROOT / "capsim" / "live"
CODE = ("engine_runner.py", "engine_jobs.py", "engine_device.sh")


def _check_payload(dest: Path) -> None:
    if not (dest / "MANIFEST.json").is_file() or not (dest / "model.tar.xz").is_file():
        raise SystemExit(f"engine_stage: {dest} has no payload (run scripts/engine_payload.py)")
    site = list(dest.glob("site.tar.xz")) + list(dest.glob("site.tar.xz.part*"))
    if not site:
        raise SystemExit(f"engine_stage: {dest} has no site.tar.xz (or .part pieces)")


def stage(jobs: list[Path], dest: Path) -> list[str]:
    """Copy the harness and the job lists into ``dest``; the names written."""
    sys.path.insert(0, str(ROOT))
    from capsim.live.engine_jobs import parse_jobs

    for path in jobs:
        try:
            parse_jobs(json.loads(path.read_text()))
        except (OSError, ValueError) as err:
            raise SystemExit(f"engine_stage: {path}: {err}") from None
    _check_payload(dest)
    written = []
    for name in CODE:
        shutil.copy2(LIVE / name, dest / name)
        written.append(name)
    hook = dest / "engine_steplog"
    shutil.rmtree(hook, ignore_errors=True)
    shutil.copytree(LIVE / "engine_steplog", hook, ignore=shutil.ignore_patterns("__pycache__"))
    written.append("engine_steplog/")
    for path in jobs:
        shutil.copy2(path, dest / path.name)
        written.append(path.name)
    return written


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("jobs", nargs="+", type=Path)
    ap.add_argument("--dest", type=Path, default=ROOT / ".devstage" / "engine")
    args = ap.parse_args()
    print("engine_stage:", " ".join(stage(args.jobs, args.dest)), "->", args.dest)


if __name__ == "__main__":
    main()
