"""Build the carry payload that runs a real vLLM 0.26.0 on the lent H200 (CPU work, here).

Steps (each skipped when its output already exists; --force redoes them):
  1. download  the vLLM 0.26.0 wheel and the light dependencies the device image lacks
               (PINS below; `pip download --no-deps --only-binary=:all:` for cp312/manylinux)
  2. install   unpack every wheel into one --target folder (a wheel is a zip; .data/purelib
               and .data/platlib are merged, scripts/headers dropped)
  3. strip     drop what an sm_90 GPU serving Qwen3.5 with these flags never loads (STRIP_PATHS),
               and zero the fat-binary entries of other GPU generations (scripts/fatbin_strip.py)
  4. model     the model dir: config.json from capsim's qwen3.5-35b-a3b config, the Qwen3
               tokenizer and the small configs vLLM's Qwen3.5 processor reads
  5. pack      tar + `xz -9e` into DEST (default .devstage/engine/): site.tar.xz, model.tar.xz,
               MANIFEST.json (sha256 and bytes of each, pins, strip report)

The payload is never committed (.devstage/ is git-ignored). Usage:
  python3 scripts/engine_payload.py [--work /work/engstage] [--dest .devstage/engine] [--force]
"""

from __future__ import annotations

import argparse
import glob
import hashlib
import json
import os
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import engine_model_dir
import fatbin_strip

# Versions: vLLM 0.26.0 (newest release pinning the image's torch 2.11.0); the named pins
# are from shared/REAL_VLLM_H200.md (openai 2.54.0 / anthropic 0.125.0: newer need httpx2;
# xgrammar 0.2.9 needs apache-tvm-ffi >= 0.1.11); the rest are what pip resolved on
# 2026-12-01, frozen here so the payload is reproducible. typing_extensions 4.16.0 travels
# because pydantic 2.14.4 requires >= 4.16.0 and the image's version is not recorded.
PINS: tuple[tuple[str, str], ...] = (
    ("vllm", "0.26.0"),
    ("cachetools", "8.0.2"),
    ("blake3", "1.0.11"),
    ("fastapi", "0.136.1"),
    ("starlette", "1.10.0"),
    ("uvicorn", "0.54.0"),
    ("httptools", "0.9.0"),
    ("websockets", "17.4"),
    ("python-dotenv", "1.2.4"),
    ("python-multipart", "0.0.34"),
    ("pydantic", "2.14.4"),
    ("pydantic-core", "2.50.5"),
    ("annotated-types", "0.8.0"),
    ("typing-inspection", "0.4.5"),
    ("openai", "2.54.0"),
    ("anthropic", "0.125.0"),
    ("prometheus-fastapi-instrumentator", "8.1.0"),
    ("partial-json-parser", "0.2.1.1.post7"),
    ("jsonschema", "4.26.0"),
    ("referencing", "0.37.0"),
    ("rpds-py", "2026.9.1"),
    ("jsonschema-specifications", "2025.9.1"),
    ("pyzmq", "27.3.0"),
    ("msgspec", "0.23.0"),
    ("mistral_common", "1.13.1"),
    ("pydantic-extra-types", "2.11.1"),
    ("pycountry", "26.2.16"),
    ("compressed-tensors", "0.17.0"),
    ("loguru", "0.7.3"),
    ("depyf", "0.20.0"),
    ("astor", "0.8.1"),
    ("dill", "0.4.1"),
    ("watchfiles", "1.3.0"),
    ("python-json-logger", "4.2.0"),
    ("pybase64", "1.5.1"),
    ("cbor2", "6.3.0"),
    ("ijson", "3.6.0"),
    ("setproctitle", "1.3.8"),
    ("openai-harmony", "0.0.8"),
    ("model-hosting-container-standards", "0.1.16"),
    ("jmespath", "1.1.0"),
    ("lark", "1.2.2"),
    ("nvtx", "0.2.15"),
    ("distro", "1.9.0"),
    ("jiter", "0.19.0"),
    ("sniffio", "1.3.1"),
    ("docstring-parser", "0.18.0"),
    ("llguidance", "1.7.6"),
    ("xgrammar", "0.2.9"),
    ("apache-tvm-ffi", "0.1.11"),
    ("typing_extensions", "4.16.0"),
)
PLATFORMS = (
    "manylinux_2_28_x86_64",
    "manylinux_2_27_x86_64",
    "manylinux_2_26_x86_64",
    "manylinux_2_24_x86_64",
    "manylinux_2_17_x86_64",
    "manylinux2014_x86_64",
    "manylinux_2_31_x86_64",
    "manylinux_2_34_x86_64",
    "manylinux_2_35_x86_64",
    "manylinux_2_5_x86_64",
    "manylinux1_x86_64",
)

# Paths (globs, relative to the target folder) an H200 serving this model does not load:
# FA2 (Hopper uses FA3), the Rust frontend, QuTLASS/FlashMLA (other models), Blackwell FMHA,
# DeepGEMM (FP8 MoE of other models), bytecode caches, mistral_common tokenizer data,
# pycountry locales.
STRIP_PATHS: tuple[str, ...] = (
    "vllm/vllm_flash_attn/_vllm_fa2_C*.so",
    "vllm/vllm-rs",
    "vllm/_qutlass_C*.so",
    "vllm/_flashmla_C*.so",
    "vllm/third_party/fmha_sm100",
    "vllm/third_party/deep_gemm",
    "**/__pycache__",
    "mistral_common/data",
    "pycountry/locales",
)
FATBIN_LIBS: tuple[str, ...] = (
    "vllm/_C_stable_libtorch*.so",
    "vllm/_moe_C_stable_libtorch*.so",
    "vllm/vllm_flash_attn/_vllm_fa3_C*.so",
)


def wheel_files(wheels: Path) -> list[Path]:
    return sorted(wheels.glob("*.whl"))


def download(wheels: Path) -> None:
    """pip download every pin (no deps, binaries only, cp312 manylinux x86-64)."""
    wheels.mkdir(parents=True, exist_ok=True)
    have = {p.name.split("-")[0].lower().replace("_", "-") for p in wheel_files(wheels)}
    todo = [f"{n}=={v}" for n, v in PINS if n.lower().replace("_", "-") not in have]
    if not todo:
        return
    cmd = [
        sys.executable,
        "-m",
        "pip",
        "download",
        "--no-deps",
        "--only-binary=:all:",
        "--python-version",
        "3.12",
        "--implementation",
        "cp",
        "-d",
        str(wheels),
    ]
    for plat in PLATFORMS:
        cmd += ["--platform", plat]
    subprocess.run([*cmd, "--platform", "any", *todo], check=True)


def install(wheels: Path, target: Path) -> None:
    """Unpack each wheel into `target` (what `pip install --no-deps --target` does)."""
    tmp = target.with_name(target.name + ".partial")
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir(parents=True)
    for whl in wheel_files(wheels):
        with zipfile.ZipFile(whl) as zf:
            for info in zf.infolist():
                parts = info.filename.split("/")
                if parts[0].endswith(".data"):
                    if len(parts) < 3 or parts[1] not in ("purelib", "platlib"):
                        continue
                    parts = parts[2:]
                dest = tmp.joinpath(*parts)
                if info.is_dir():
                    dest.mkdir(parents=True, exist_ok=True)
                    continue
                dest.parent.mkdir(parents=True, exist_ok=True)
                with zf.open(info) as src, open(dest, "wb") as out:
                    shutil.copyfileobj(src, out)
                if (info.external_attr >> 16) & 0o111:
                    dest.chmod(0o755)
    shutil.rmtree(target, ignore_errors=True)
    tmp.rename(target)


def strip(target: Path, keep_sm: int = 90) -> dict:
    """Remove STRIP_PATHS and zero other archs' fatbin entries; returns the report."""
    removed: list[str] = []
    for pattern in STRIP_PATHS:
        for p in sorted(glob.glob(str(target / pattern), recursive=True)):
            removed.append(os.path.relpath(p, target))
            shutil.rmtree(p) if os.path.isdir(p) else os.remove(p)
    zeroed: dict[str, dict] = {}
    for pattern in FATBIN_LIBS:
        for p in sorted(glob.glob(str(target / pattern))):
            r = fatbin_strip.strip_file(p, keep_sm)
            zeroed[os.path.relpath(p, target)] = {
                "containers": r.containers,
                "entries": r.entries,
                "kept_bytes": r.kept_bytes,
                "zeroed_bytes": r.zeroed_bytes,
                "kept_archs": list(r.kept_archs),
            }
    return {"removed": removed, "fatbin": zeroed, "keep_sm": keep_sm}


def sha256(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as fh:
        for chunk in iter(lambda: fh.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def pack(src: Path, out: Path, threads: int = 2) -> None:
    """Deterministic tar of `src`'s contents (sorted names, mtime 0, uid 0) through xz -9e."""
    tmp = out.with_name(out.name + ".tmp")
    cmd = [
        "tar",
        "--sort=name",
        "--mtime=@0",
        "--owner=0",
        "--group=0",
        "--numeric-owner",
        "-I",
        f"xz -9e -T{threads}",
        "-cf",
        str(tmp),
        "-C",
        str(src),
        ".",
    ]
    subprocess.run(cmd, check=True)
    os.replace(tmp, out)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description="build the vLLM 0.26.0 H200 carry payload")
    ap.add_argument("--work", default="/work/engstage", help="scratch dir (wheels, site, model)")
    ap.add_argument("--dest", default=".devstage/engine", help="where the packed payload goes")
    ap.add_argument("--config", default="experiments/vllm_logs/models/qwen3.5-35b-a3b.json")
    ap.add_argument("--tokenizer", default="/work/shared/traces/tokenizers/qwen3/tokenizer.json")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument(
        "--sharegpt", type=int, default=512, help="rows of the ShareGPT-like length list (0: none)"
    )
    ap.add_argument("--force", action="store_true")
    a = ap.parse_args(argv)
    work, dest = Path(a.work), Path(a.dest)
    wheels, site, model = work / "wheels", work / "site", work / "model"
    download(wheels)
    report_path = work / "strip_report.json"
    if a.force or not site.exists() or not report_path.exists():
        install(wheels, site)
        report_path.write_text(json.dumps(strip(site), indent=1, sort_keys=True))
    engine_model_dir.write_model_dir(Path(a.config), Path(a.tokenizer), model)
    if a.sharegpt:  # the ShareGPT-like length list travels inside the model dir
        from capsim.live.engine_dataset import workload_rows, write_custom_dataset

        jsonl = model / "datasets" / f"sharegpt{a.sharegpt}.jsonl"
        if a.force or not jsonl.exists():
            rows = workload_rows("sharegpt", a.sharegpt, 0, 4096, 1024)
            write_custom_dataset(
                rows,
                Path(a.tokenizer),
                jsonl,
                Path("experiments/engine/data") / f"sharegpt{a.sharegpt}.csv",
            )
    dest.mkdir(parents=True, exist_ok=True)
    files = {}
    for name, src in (("site.tar.xz", site), ("model.tar.xz", model)):
        if a.force or not (dest / name).exists():
            pack(src, dest / name, a.threads)
        files[name] = {"sha256": sha256(dest / name), "bytes": (dest / name).stat().st_size}
    manifest = {
        "vllm": "0.26.0",
        "python": "3.12",
        "keep_sm": 90,
        "files": files,
        "pins": [f"{n}=={v}" for n, v in PINS],
        "strip": json.loads(report_path.read_text()),
    }
    tmp = dest / "MANIFEST.json.tmp"
    tmp.write_text(json.dumps(manifest, indent=1, sort_keys=True))
    os.replace(tmp, dest / "MANIFEST.json")
    total = sum(f["bytes"] for f in files.values())
    print(json.dumps({k: v["bytes"] for k, v in files.items()}), f"total {total / 2**20:.1f} MiB")
    return 0


if __name__ == "__main__":
    sys.exit(main())
