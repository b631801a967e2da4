#!/usr/bin/env bash
# Run the tests: the unit tests, the exercises' checks, the grader, the website build
# (which executes every chapter), the student notebooks, nbval and a headless-browser
# check of every page. The tasks and what each needs are in scripts/test.mk; make runs
# four at a time, so both cores stay busy. Each task prints one line when it ends; its
# full output is in _build/tasks/<task>.log.
#   bash scripts/test.sh       the README's test command (make's target `all`)
#   bash scripts/test.sh ci    what CI adds after it (.ci/run): the stored runs
#                              recomputed, natively and under other numerics, and the
#                              reader's environments (TESTING.md, "The test command")
set -euo pipefail
stage=${1:-all}
case "$stage" in all|ci) ;; *) echo "usage: bash scripts/test.sh [ci]" >&2; exit 2 ;; esac
cd "$(dirname "${BASH_SOURCE[0]}")/.."
start=$(date +%s)
mkdir -p _build/tasks
if [ "$stage" = all ]; then
  # The executed notebooks of an earlier build go too: tests that run beside this
  # build read the values pages quote from them, and an earlier build's lack the
  # names a page has gained since (those tests read none until this build writes them)
  rm -rf _build/tasks/* _build/margins _build/jupyter_execute
else
  for name in $(make -f scripts/test.mk -s tasks-ci); do rm -f "_build/tasks/$name".*; done
  rm -rf _build/margins/perturbed
fi

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

tasks=$(make -f scripts/test.mk -s "tasks-$stage")
echo "[test] running $tasks (scripts/test.mk), four at a time"
make -f scripts/test.mk -j4 -k -s PY=.venv/bin/python "$stage" \
  2> "_build/tasks/make-$stage.log" || true
failed=()
for name in $tasks; do
  if [ ! -e "_build/tasks/$name.rc" ]; then
    failed+=("$name (not run: a task it needs failed)")
  elif [ "$(cat "_build/tasks/$name.rc")" -ne 0 ]; then
    failed+=("$name")
    echo "[test] ---- the end of _build/tasks/$name.log ----"
    tail -n 40 "_build/tasks/$name.log"
  fi
done
# CI's stage: every comparison with a stored number, natively and perturbed, at least
# ten times inside its tolerance, or with its reason (TESTING.md, "Margins")
if [ "$stage" = ci ] && ! .venv/bin/python scripts/margins.py --check \
    _build/margins/native _build/margins/perturbed; then
  failed+=("margins")
fi
echo "[test] done in $(( $(date +%s) - start )) s"
if [ "${#failed[@]}" -gt 0 ]; then
  echo "[test] FAILED: ${failed[*]}"
  exit 1
fi
echo "[test] all tests passed"
