#!/usr/bin/env bash
# Run every test: unit tests, exercise checks, the website build (which executes every
# chapter), the student notebooks in full mode scaled down, nbval's re-execution of every
# chapter, and a headless-browser check of every page.
#
# Two lanes of one thread each keep both cores busy (measured in issue 11: one chapter
# alone on two threads is faster, but two one-thread lanes finish the whole run sooner):
#   lane A: the site build (fast mode), then nbval re-executes chapters 2 and 3 (and any
#           later one) and compares the cells they tag `deterministic` with the site's
#           outputs;
#   lane B: every student notebook with FULL = True, SCALE = 0.01 (the stubs raise, full
#           mode's code paths run), the unit tests, then nbval of chapters 1 and 4.
# Measured on a fresh clone (2 cores) before nbval was split: set-up 61 s; lane A 246 s of
# build + 204 s of nbval, lane B 179 + 175 s; 544 s in all. Split: 477 to 496 s in all
# (four runs), the lanes ending within 5 s of each other.
# Finally the solution editions are checked against what the site executed, and every
# page is opened in Chromium.
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

# nbval needs the site's execution cache: lane A marks when the build is done (or failed).
# Lane B re-executes chapters 1 and 4 after its own work, lane A every other chapter,
# which evens the lanes (measured on a fresh clone, lane A alone with all four: 204 s of
# nbval after a 246 s build, while lane B finished 96 s earlier).
rm -f _build/.site-built _build/.site-failed
stamp "lane B (student notebooks in full mode at SCALE 0.01, unit tests, nbval of chapters 1 and 4) started"
(
  $PY -m pytest -m notebooks -k student -p no:cacheprovider -q --durations=0
  $PY -m pytest -m "not slow and not notebooks and not site" -p no:cacheprovider -q \
    --durations=10 "$@"
  while [ ! -e _build/.site-built ] && [ ! -e _build/.site-failed ]; do sleep 2; done
  if [ -e _build/.site-built ]; then
    $PY -m pytest -m notebooks -k "deterministic and (01_ or 04_)" -p no:cacheprovider -q \
      --durations=0
  fi
) > _build/lane-b.log 2>&1 &
lane_b=$!

stamp "lane A: site build"
lane_a=0
bash scripts/build_site.sh || lane_a=$?
if [ "$lane_a" -eq 0 ]; then
  touch _build/.site-built
  stamp "lane A: nbval re-executes every chapter but 1 and 4"
  $PY -m pytest -m notebooks -k "deterministic and not (01_ or 04_)" -p no:cacheprovider -q \
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
[ "$lane_a" -eq 0 ] || { echo "[test] lane A (site build or nbval) failed"; exit "$lane_a"; }
[ "$b_status" -eq 0 ] || { echo "[test] lane B (student notebooks, unit tests or nbval) failed"; exit "$b_status"; }

# What needs the built site: the solution editions against the executed chapters, and
# every page in a browser (two threads again: nothing else runs now).
OMP_NUM_THREADS=2 MKL_NUM_THREADS=2 $PY -m pytest -p no:cacheprovider -q \
  -m "notebooks or site" -k "not student and not deterministic"
stamp "all tests passed"
