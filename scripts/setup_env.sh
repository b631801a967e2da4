#!/usr/bin/env bash
# Create (or reuse) the project's virtual environment in .venv with the pinned set of
# packages from requirements-lock.txt (CPU torch 2.13.0) and lncourse installed editable.
# Run by build_site.sh and test.sh; safe to run again (it skips what is done).
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

PYTHON=${PYTHON:-python3}
VENV=.venv
STAMP=$VENV/.lock-installed
# pip warns about every package for mirror folders this machine's pip.conf lists but
# lacks; the noise hides real errors, so those lines are dropped.
pip_install() { "$VENV/bin/python" -m pip install "$@" 2> >(grep -v "is ignored: it is neither a file nor a directory" >&2); }

if [ ! -x "$VENV/bin/python" ]; then
  echo "[setup] creating $VENV"
  "$PYTHON" -m venv "$VENV"
fi
if [ ! -f "$STAMP" ] || ! cmp -s requirements-lock.txt "$STAMP"; then
  echo "[setup] installing the pinned packages (requirements-lock.txt)"
  pip_install -q --upgrade pip
  # torch first, alone, so that nothing else can pull a CUDA build.
  pip_install -q "$(grep -E '^torch==' requirements-lock.txt)"
  pip_install -q --no-deps -r requirements-lock.txt
  cp requirements-lock.txt "$STAMP"
fi
pip_install -q --no-deps -e . >/dev/null 2>&1 || pip_install --no-deps -e .
echo "[setup] environment ready: $VENV ($("$VENV/bin/python" -c 'import torch; print("torch", torch.__version__)'))"
