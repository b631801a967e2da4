#!/usr/bin/env bash
# Run every test: unit tests, exercise checks, the website build (which executes every
# chapter), the student notebooks in full mode scaled down, nbval's re-execution of every
# chapter, and a headless-browser check of every page.
#
# Two lanes of one thread each keep both cores busy (measured in issue 11: one chapter
# alone on two threads is faster, but two one-thread lanes finish the whole run sooner):
#   lane A: the site build (fast mode), then nbval re-executes chapters 1, 4 and 5 (2 and 3
#           are `slow`: tests/book/test_nbval.py) and compares the cells they tag
#           `deterministic` with the site's outputs, then the reader's environments
#           (tests/book/test_colab.py, which needs the package index);
#   lane B: every student notebook with FULL = True, SCALE = 0.01 (the stubs raise, full
#           mode's code paths run), the unit tests, then what needs the built site: the
#           solution editions against the executed chapters, every page in Chromium, and
#           a chapter run beside CPU hogs (tests/book/test_build_watch.py).
# Measured on a fresh clone of the merge of issues 16-22 (2 cores, idle), with nbval of every
# chapter: set-up 67 s, lane A 297 s of build + 195 s of nbval; lane B 215 s of student
# notebooks + about 330 s of unit tests; over 700 s in all, hence the split above.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
start=$(date +%s)
bash scripts/setup_env.sh
PY=.venv/bin/python

# Debian's Chromium for the browser test.
if ! command -v chromium >/dev/null 2>&1; then
  echo "[test] installing chromium (Debian package)"
  SUDO=""; [ "$(id -u)" -ne 0 ] && SUDO="sudo"
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq chromium >/dev/null
fi
# Debian's bubblewrap contains the grader's learner processes (lncourse.grading.contain).
if ! command -v bwrap >/dev/null 2>&1; then
  echo "[test] installing bubblewrap (Debian package)"
  SUDO=""; [ "$(id -u)" -ne 0 ] && SUDO="sudo"
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq bubblewrap >/dev/null
fi
export LNCOURSE_DEVICE=${LNCOURSE_DEVICE:-cpu}
# No widgets in executed notebooks: nobody can move a slider there, and ipywidgets' comm
# traffic was the cause of the stall of issue 11 (see scripts/build_site.sh).
export LNCOURSE_NO_WIDGETS=1
export OMP_NUM_THREADS=${OMP_NUM_THREADS:-1} MKL_NUM_THREADS=${MKL_NUM_THREADS:-1}
mkdir -p _build
stamp() { echo "[test] $1 at $(( $(date +%s) - start )) s"; }

# What needs the built site waits for lane A's marker (or its failure).
rm -f _build/.site-built _build/.site-failed
stamp "lane B (student notebooks in full mode at SCALE 0.01, unit tests, then the site's tests) started"
(
  $PY -m pytest -m notebooks -k student -p no:cacheprovider -q --durations=0
  $PY -m pytest -m "not slow and not notebooks and not site" -p no:cacheprovider -q \
    --ignore=tests/book/test_colab.py --durations=10 "$@"
  while [ ! -e _build/.site-built ] && [ ! -e _build/.site-failed ]; do sleep 2; done
  if [ -e _build/.site-built ]; then
    $PY -m pytest -p no:cacheprovider -q -m "(notebooks or site) and not slow" \
      -k "not student and not deterministic" --durations=5
  else
    exit 1
  fi
) > _build/lane-b.log 2>&1 &
lane_b=$!

stamp "lane A: site build"
lane_a=0
bash scripts/build_site.sh || lane_a=$?
if [ "$lane_a" -eq 0 ]; then
  touch _build/.site-built
  stamp "lane A: nbval re-executes chapters 1, 4 and 5"
  $PY -m pytest -m "notebooks and not slow" -k deterministic -p no:cacheprovider -q \
    --durations=0 || lane_a=$?
  stamp "lane A: the reader's environments"
  $PY -m pytest tests/book/test_colab.py -m "not slow" -p no:cacheprovider -q \
    --durations=0 || lane_a=$?
else
  touch _build/.site-failed
fi
stamp "lane A done; waiting for lane B"
b_status=0
wait $lane_b || b_status=$?
echo "[test] lane B:"
cat _build/lane-b.log
stamp "lanes done"
[ "$lane_a" -eq 0 ] || { echo "[test] lane A (site build, nbval or the reader's environments) failed"; exit "$lane_a"; }
[ "$b_status" -eq 0 ] || { echo "[test] lane B (student notebooks, unit tests or the site's tests) failed"; exit "$b_status"; }
stamp "all tests passed"
