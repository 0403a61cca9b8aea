"""capsim/live/engine_device.sh up to the vLLM import, on a fake payload (no GPU, no vLLM):
the carried datasets reach the model dir whichever of the two forms is present."""

from __future__ import annotations

import hashlib
import io
import json
import lzma
import os
import subprocess
import sys
import tarfile
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
SCRIPT = REPO / "capsim" / "live" / "engine_device.sh"


def _tar_xz(path: Path, name: str, data: bytes) -> str:
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as tar:
        info = tarfile.TarInfo(name)
        info.size = len(data)
        tar.addfile(info, io.BytesIO(data))
    path.write_bytes(lzma.compress(buf.getvalue()))
    return hashlib.sha256(path.read_bytes()).hexdigest()


def _payload(tmp: Path, datasets: dict[str, bytes]) -> tuple[Path, dict[str, str]]:
    here = tmp / "engine"
    here.mkdir()
    sha = {p: _tar_xz(here / f"{p}.tar.xz", f"{p}.txt", p.encode()) for p in ("site", "model")}
    files = {f"{p}.tar.xz": {"sha256": s} for p, s in sha.items()}
    (here / "MANIFEST.json").write_text(json.dumps({"files": files}))
    (here / "engine_device.sh").write_text(SCRIPT.read_text())
    (here / "datasets").mkdir()
    for name, data in datasets.items():
        (here / "datasets" / name).write_bytes(data)
    # a python3 that runs everything but the torch/vllm import (exits 4 there, as on a machine
    # without vLLM), so the script stops right after the dataset copy
    bindir = tmp / "bin"
    bindir.mkdir()
    fake = bindir / "python3"
    fake.write_text(
        "#!/usr/bin/env bash\n"
        'case "$*" in *"import sys, torch, vllm"*) exit 1;; esac\n'
        f'exec {sys.executable} "$@"\n'
    )
    fake.chmod(0o755)
    env = dict(os.environ)
    env.update(
        PATH=f"{bindir}{os.pathsep}{env.get('PATH', '')}",
        OUT=str(tmp / "out"),
        CAPSIM_ENGINE_ROOT=str(tmp / "root"),
        CAPSIM_ENGINE_CACHE=str(tmp / "cache"),
    )
    return here, env


@pytest.mark.parametrize(
    "datasets",
    [
        {"plain.jsonl": b'{"a": 1}\n'},  # only the plain form (session 12's lost start-ups)
        {"packed.jsonl.xz": lzma.compress(b'{"b": 2}\n')},  # only the xz form
        {"plain.jsonl": b'{"a": 1}\n', "packed.jsonl.xz": lzma.compress(b'{"b": 2}\n')},
    ],
)
def test_datasets_reach_the_model_dir(tmp_path: Path, datasets: dict[str, bytes]) -> None:
    here, env = _payload(tmp_path, datasets)
    r = subprocess.run(
        ["bash", str(here / "engine_device.sh"), "jobs.json", "30"],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert r.returncode == 4, r.stdout + r.stderr  # stopped at the vLLM import, not before
    got = {p.name: p.read_bytes() for p in (tmp_path / "root" / "model" / "datasets").iterdir()}
    want = {
        n.removesuffix(".xz"): (lzma.decompress(d) if n.endswith(".xz") else d)
        for n, d in datasets.items()
    }
    assert got == want
    log = (tmp_path / "out" / "device.log").read_text()
    assert all(f"engine_device: dataset {n}" in log for n in want)
