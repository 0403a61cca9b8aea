#!/usr/bin/env bash
# The whole test suite on a fresh machine: install the project with every extra the tests
# need, then run pytest (kernel tests through Triton's CPU interpreter, live vLLM tests in
# their own environment when experiments/live/setup_env.sh has built it).
set -euo pipefail
cd "$(dirname "$0")/.."
python3 -m pip install -q --disable-pip-version-check -e '.[dev,kernels,dask]'
export TRITON_INTERPRET=1
exec python3 -m pytest "$@"
