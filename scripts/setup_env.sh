#!/usr/bin/env bash
# Create (or reuse) the project's virtual environment in .venv with the pinned set of
# packages from requirements-lock.txt (CPU torch 2.13.0) and lncourse installed editable.
# Run by build_site.sh and test.sh; safe to run again (it skips what is done).
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

PYTHON=${PYTHON:-python3}
VENV=.venv
STAMP=$VENV/.lock-installed
BYTECODE=$VENV/.bytecode-compiled   # the .pyc files of that install are written
# pip warns about every package for mirror folders this machine's pip.conf lists but
# lacks; the noise hides real errors, so those lines are dropped.
pip_install() { "$VENV/bin/python" -m pip install "$@" 2> >(grep -v "is ignored: it is neither a file nor a directory" >&2); }

if [ ! -x "$VENV/bin/python" ]; then
  echo "[setup] creating $VENV"
  "$PYTHON" -m venv "$VENV"
fi
# uv installs the ~170 pinned wheels several times faster than pip; it is pinned,
# installed by pip into the environment, and
# any failure of it falls back to pip. uv does not read pip.conf, so the local CPU torch is
# named by its file when it is there.
UV_VERSION=0.13.9
uv_install() {
  [ -x "$VENV/bin/uv" ] || pip_install -q "uv==$UV_VERSION" || return 1
  local links=(); [ -d /opt/wheels ] && links=(--find-links /opt/wheels)
  "$VENV/bin/uv" pip install -q --python "$VENV/bin/python" \
    "${links[@]}" "$@"
}
torch_spec() {
  local pin wheel
  pin=$(grep -E '^torch==' requirements-lock.txt)
  wheel=$(ls /opt/wheels/torch-"${pin#torch==}"+cpu-*.whl 2>/dev/null | head -1 || true)
  echo "${wheel:-$pin}"
}
if [ ! -f "$STAMP" ] || ! cmp -s requirements-lock.txt "$STAMP"; then
  echo "[setup] installing the pinned packages (requirements-lock.txt)"
  # torch first, alone, so that nothing else can pull a CUDA build.
  if uv_install "$(torch_spec)" && uv_install --no-deps -r requirements-lock.txt; then
    echo "[setup] installed with uv $UV_VERSION"
  else
    echo "[setup] uv failed; installing with pip"
    pip_install -q --upgrade pip
    pip_install -q "$(grep -E '^torch==' requirements-lock.txt)"
    pip_install -q --no-deps -r requirements-lock.txt
  fi
  cp requirements-lock.txt "$STAMP"
fi
# lncourse, editable: by uv where the environment has it (1.6 s against pip's 5.7 s)
{ [ -x "$VENV/bin/uv" ] && "$VENV/bin/uv" pip install -q --no-deps --python "$VENV/bin/python" \
    -e . >/dev/null 2>&1; } || pip_install -q --no-deps -e . >/dev/null 2>&1 \
  || pip_install --no-deps -e .
# Bytecode for the modules the course's processes import (why, and what it replaced:
# scripts/warm_imports.py's docstring).
if [ ! -f "$BYTECODE" ] || ! cmp -s requirements-lock.txt "$BYTECODE" \
    || [ scripts/warm_imports.py -nt "$BYTECODE" ]; then
  env -u PYTHONDONTWRITEBYTECODE OMP_NUM_THREADS=1 "$VENV/bin/python" scripts/warm_imports.py
  cp requirements-lock.txt "$BYTECODE"
fi
# and of every lncourse module, imported or not (a no-op when they are current)
"$VENV/bin/python" -m compileall -q -j 0 lncourse >/dev/null
echo "[setup] environment ready: $VENV ($("$VENV/bin/python" -c 'import torch; print("torch", torch.__version__)'))"
