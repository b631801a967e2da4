#!/usr/bin/env bash
# Run the tests: the unit tests, the exercises' checks, the grader, the website build
# (which executes every chapter), the student notebooks, nbval, the reader's
# environments and a headless-browser check of every page. The tasks and what each
# needs are in scripts/test.mk; make runs four at a time, so both cores stay busy.
# Each task prints one line when it ends; its full output is in _build/tasks/<task>.log.
#
# CI (.ci/run) runs this, then the perturbed pass (scripts/perturbed.sh): every test
# that reads a stored result again under other numerics, which stands in for the CPUs
# CI never runs on (TESTING.md).
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
start=$(date +%s)
mkdir -p _build
rm -rf _build/tasks _build/margins/native
mkdir -p _build/tasks

# The pinned environment (.venv; Debian's bubblewrap and Chromium are a task of their
# own). Its processes write the bytecode of what they import later, once, even where
# the machine sets PYTHONDONTWRITEBYTECODE.
unset PYTHONDONTWRITEBYTECODE
bash scripts/setup_env.sh

export LNCOURSE_DEVICE=${LNCOURSE_DEVICE:-cpu}
# No widgets in executed notebooks: nobody can move a slider there, and ipywidgets'
# comm traffic once made nbclient miss a cell's reply (scripts/build_site.sh).
export LNCOURSE_NO_WIDGETS=1
# One torch thread a process, two notebook pages at once in the build: the other tasks
# keep the cores busy already, and more threads would only contend.
export OMP_NUM_THREADS=${OMP_NUM_THREADS:-1} MKL_NUM_THREADS=${MKL_NUM_THREADS:-1}
export LNCOURSE_BUILD_JOBS=${LNCOURSE_BUILD_JOBS:-2}
# The PDF is the site command's (scripts/build_pdf.sh); the slow suite checks it.
export LNCOURSE_PDF_LATER=1

echo "[test] running the tasks of scripts/test.mk, four at a time"
make -f scripts/test.mk -j4 -k -s PY=.venv/bin/python all 2> _build/tasks/make.log || true
failed=()
for name in $(make -f scripts/test.mk -s tasks); do
  if [ ! -e "_build/tasks/$name.rc" ]; then
    failed+=("$name (not run: a task it needs failed)")
  elif [ "$(cat "_build/tasks/$name.rc")" -ne 0 ]; then
    failed+=("$name")
    echo "[test] ---- the end of _build/tasks/$name.log ----"
    tail -n 40 "_build/tasks/$name.log"
  fi
done
echo "[test] done in $(( $(date +%s) - start )) s"
if [ "${#failed[@]}" -gt 0 ]; then
  echo "[test] FAILED: ${failed[*]}"
  exit 1
fi
echo "[test] all tests passed"
