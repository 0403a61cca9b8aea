#!/usr/bin/env bash
# The whole test suite on a fresh machine: install the project with every extra the tests
# need, then run pytest (skip reasons printed). Kernel tests run in Triton's CPU interpreter;
# the tokenizer recount test needs the 'traces' extra (installed here) and shared/traces; the
# live vLLM tests build their own venv (.venv-live/, vLLM CPU build from PyPI, ~3 min the
# first time; set CAPSIM_LIVE_SETUP=0 to skip them); the report screenshot test needs
# Debian's chromium (skipped with a reason when absent); the docs extra builds the MkDocs
# site strictly (tests/docs).
set -euo pipefail
cd "$(dirname "$0")/.."
echo "test.sh: installing capsim with extras dev,kernels,dask,traces,docs" >&2
python3 -m pip install -q --disable-pip-version-check -e '.[dev,kernels,dask,traces,docs]'
export TRITON_INTERPRET=1
export CAPSIM_LIVE_SETUP="${CAPSIM_LIVE_SETUP:-1}"
live_venv="${CAPSIM_LIVE_VENV:-.venv-live}"
if [ "$CAPSIM_LIVE_SETUP" = "1" ] && [ ! -x "$live_venv/bin/python" ]; then
  echo "test.sh: the live vLLM tests will first build $live_venv (vLLM CPU build from PyPI," \
    "about 3 minutes, silent while it runs); CAPSIM_LIVE_SETUP=0 skips them" >&2
fi
case " $* " in
  *" -r"*) exec python3 -m pytest "$@" ;;
  *) exec python3 -m pytest -rs "$@" ;;
esac
