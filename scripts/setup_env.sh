#!/usr/bin/env bash
# Create (or reuse) the project's virtual environment in .venv with the pinned set of
# packages from requirements-lock.txt (CPU torch 2.13.0) and lncourse installed editable.
# Sourced by build_site.sh and test.sh; safe to run again (it skips what is done).
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

PYTHON=${PYTHON:-python3}
VENV=.venv
STAMP=$VENV/.lock-installed
if [ ! -x "$VENV/bin/python" ]; then
  echo "[setup] creating $VENV"
  "$PYTHON" -m venv "$VENV"
fi
if [ ! -f "$STAMP" ] || ! cmp -s requirements-lock.txt "$STAMP"; then
  echo "[setup] installing the pinned packages (requirements-lock.txt)"
  "$VENV/bin/python" -m pip install -q --upgrade pip
  # torch first, alone, so that nothing else can pull a CUDA build.
  "$VENV/bin/python" -m pip install -q "$(grep -E '^torch==' requirements-lock.txt)"
  "$VENV/bin/python" -m pip install -q --no-deps -r requirements-lock.txt
  cp requirements-lock.txt "$STAMP"
fi
"$VENV/bin/python" -m pip install -q --no-deps -e . >/dev/null
echo "[setup] environment ready: $VENV ($("$VENV/bin/python" -c 'import torch; print("torch", torch.__version__)'))"
