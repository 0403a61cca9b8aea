#!/usr/bin/env bash
# The whole test suite on a fresh machine: install the project with every extra the tests
# need, then run pytest. Kernel tests run in Triton's CPU interpreter; the live vLLM tests
# build their own venv (.venv-live/, vLLM CPU build from PyPI, ~3 min the first time; set
# CAPSIM_LIVE_SETUP=0 to skip them); the report screenshot test needs Debian's chromium
# (skipped with a reason when absent).
set -euo pipefail
cd "$(dirname "$0")/.."
python3 -m pip install -q --disable-pip-version-check -e '.[dev,kernels,dask]'
export TRITON_INTERPRET=1
export CAPSIM_LIVE_SETUP="${CAPSIM_LIVE_SETUP:-1}"
exec python3 -m pytest "$@"
