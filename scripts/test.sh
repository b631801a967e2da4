#!/usr/bin/env bash
# Run every test: unit tests, exercise checks, the website build (which executes every
# chapter), the student notebooks in full mode scaled down, nbval's re-execution of
# chapters 1 and 5, the reader's environments, and a headless-browser check of every
# page.
#
# Two lanes of one thread each keep both cores busy (measured in issue 11: one chapter
# alone on two threads is faster, but two one-thread lanes finish the whole run sooner).
# Lane A builds the site (fast mode), executing two notebook pages at a time
# (scripts/preexecute.py); meanwhile lane B takes tasks from one queue, and lane A
# joins it when the build is done. A lane claims the next unclaimed task (an
# atomic mkdir) that it can run now, so neither waits while work is left. (A third lane
# at nice 10, tried in issue 32 to fill the tasks' waits, finished later: 875 s against
# 845 s, with the unit tests starved behind lane A's tasks. The run is bound by its CPU
# time, about 1,230 s on two cores, not by idle time.) The grader's tests are the
# exception, with the student runs, the reader's environments and the browser checks:
# two more lanes (C and D) run them (LANE_C and LANE_D below; the browser checks took
# 110 s of wall time for 37 s of CPU at 0a07008). The grader's tests were put there as
# tasks that wait, but they do not: alone on an idle machine at 77be46b they kept a core
# busy for 182 of their 185 s (the machine's /proc/stat), where bash's `time` counts 42 s,
# because the learners bubblewrap starts are not reaped by pytest and their CPU is not
# counted as its children's. Most of it is the learners' start, PyTorch's import and
# warm-up, about 2.5 s each. So no lane here waits much: the run is its CPU.
#   students      every student notebook with FULL = True, SCALE = 0.01 (the stubs raise,
#                 full mode's code paths run)
#   unit-1        the unit tests of tests/norms, tests/nope and tests/majority
#   unit-2        the other unit tests but the grader's
#   site          every page in Chromium (one load per page and viewport, every check
#                 on it; tests/book/test_site.py), on lane C  [site]
#   site-other    the rest that needs the build: the solution editions against the
#                 executed chapters, the published notebooks, the stall watchdog's
#                 checks, one beside CPU hogs (tests/book/test_build_watch.py)  [site]
#   grading       the grader's tests (they start sandboxed learners), on lane C
#   colab         the reader's environments (tests/book/test_colab.py; the package index)
#   nbval         nbval re-executes chapters 1 and 5 and compares the cells tagged
#                 `deterministic` with the site's outputs (2, 3 and 4 are `slow`)  [site]
#   perturbed     every test that reads a stored result (marker `replay`, put on each
#                 by tests/stored_results_plugin.py) a second time, under the most
#                 different numerics this machine has: PyTorch's scalar kernels, MKL's
#                 and OpenBLAS's reproducible paths, numpy's SIMD at its baseline,
#                 oneDNN off, the course's portable C kernel and 3 threads
#                 (scripts/perturbed.sh; issue 49: it stands in for the CPUs that CI
#                 never runs on). The unit tasks run them on this CPU's own paths.
# (Run as a third process beside the lanes, the reader's environments slowed both lanes
# by about 55 s: pip's installs are not only waiting on the network.)
# Tasks marked [site] wait for the build. Each task's output is in _build/task-<name>.log,
# printed at the end with its start and end times.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
start=$(date +%s)
# MathJax's download waits on the npm registry: beside the set-up, not before the build.
mkdir -p _build
bash scripts/fetch_mathjax.sh > _build/mathjax.log 2>&1 &
mathjax=$!
# Debian's bubblewrap (it contains the grader's learner processes, lncourse.grading.contain)
# and Chromium (the browser checks), in the background: one apt-get update, bubblewrap
# first (the grader's tests wait for it, about 7 s), then Chromium (about 18 s of wall
# time; the browser checks start after the build). In front of the lanes, as before
# 2026-11-29, they were 26 s of the critical path.
rm -f _build/.apt-bubblewrap _build/.apt-chromium
system_packages() {
  local sudo="" pkg cmd updated=0
  [ "$(id -u)" -ne 0 ] && sudo="sudo"
  for pkg in bubblewrap:bwrap chromium:chromium; do
    cmd=${pkg#*:}; pkg=${pkg%%:*}
    if ! command -v "$cmd" >/dev/null 2>&1; then
      echo "[test] installing $pkg (Debian package)"
      [ "$updated" -eq 1 ] || { $sudo apt-get update -qq || true; updated=1; }
      DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq "$pkg" >/dev/null \
        || echo "[test] FAILED to install $pkg"
    fi
    touch "_build/.apt-$pkg"      # installed or not: its tests say what is missing
  done
}
system_packages > _build/apt.log 2>&1 &
# Bytecode: the set-up writes it for what the course imports (scripts/warm_imports.py);
# a module imported only later is compiled once, by the first process that imports it,
# not again by every process (this machine and CI set PYTHONDONTWRITEBYTECODE=1).
unset PYTHONDONTWRITEBYTECODE
bash scripts/setup_env.sh
PY=.venv/bin/python

export LNCOURSE_DEVICE=${LNCOURSE_DEVICE:-cpu}
# No widgets in executed notebooks: nobody can move a slider there, and ipywidgets' comm
# traffic was the cause of the stall of issue 11 (see scripts/build_site.sh).
export LNCOURSE_NO_WIDGETS=1
export OMP_NUM_THREADS=${OMP_NUM_THREADS:-1} MKL_NUM_THREADS=${MKL_NUM_THREADS:-1}
# The build executes two notebook pages at once (scripts/preexecute.py), whatever the
# load average says when it starts: at 9ff901b its ten pages, one after another, were
# 336 s of the test command's critical path.
export LNCOURSE_BUILD_JOBS=${LNCOURSE_BUILD_JOBS:-2}
mkdir -p _build
stamp() { echo "[test] $1 at $(( $(date +%s) - start )) s"; }
TIMEFORMAT="%0R s wall, %0U s user + %0S s system CPU"

# pip's resolution of requirements.txt for the reader's-environment test
# (tests/book/test_colab.py::test_requirements_resolve_to_newest), started now, so it
# overlaps the set-up and the build; the test runs pip itself if the report is not there.
# (Alone at 77be46b it took 28 s of wall time and 27 s of the machine's CPU: pip's own
# work, not a wait on the index.)
echo "torch==2.13.0" > _build/torch-pin.txt
rm -f _build/pip-report.json
( $PY -m pip install -q --dry-run --ignore-installed --report _build/pip-report.json.part \
    -r requirements.txt -c _build/torch-pin.txt >/dev/null 2>&1 \
  && mv _build/pip-report.json.part _build/pip-report.json ) &
export LNCOURSE_PIP_REPORT=$PWD/_build/pip-report.json

# The queues; [site] tasks wait for lane A's marker.
rm -rf _build/.site-built _build/.site-failed _build/.claim-* _build/task-* _build/margins
# Lanes C and D take the grader's tests, the student runs, the reader's environments and
# the site's tasks (chosen as tasks that wait; see the top: most of them do not); lanes A
# and B the unit tests and the build, each list in claim
# order. Once the site is built, C and D take its tasks (a task is claimed once): at
# d00f193 one lane C ran the grader's tests, the student runs and the reader's
# environments first, so the browser checks (133 s of wall time for 42 s of CPU) began
# 56 s after the build and that lane's tasks, 631 s end to end, ended last but one.
LANE_C=(grading site site-other nbval)
LANE_D=(students colab site site-other nbval)
LANES_AB=(unit-1 unit-2 perturbed site-other nbval)
TASKS=(grading students colab site unit-1 unit-2 perturbed site-other nbval)
NEEDS_SITE=" nbval site site-other "
NEEDS_PACKAGE=" grading:bubblewrap site:chromium "   # task:Debian package (above)
# The unit tests in two halves of about 135 s of CPU each (measured at 67ef50e), so that
# lane A takes the second half when the build is done instead of leaving lane B to run
# them all: at 67ef50e one unit task ran alone for the last 68 s of a 668 s run.
UNIT_1=(tests/norms tests/nope tests/majority)
# The tasks of notebooks and of the site collect tests/book only (4 s against 10 s for the
# whole suite, three times): every test marked `notebooks` or `site` lives there
# (tests/test_package.py::test_notebook_and_site_tests_live_in_tests_book).
task() {
  case "$1" in
    students) $PY -m pytest tests/book -m "notebooks and not slow" -k student \
                -p no:cacheprovider -q --durations=0 ;;
    unit-1) LNCOURSE_MARGINS=$PWD/_build/margins/native $PY -m pytest -m "not slow and not notebooks and not site" -p no:cacheprovider \
              -q --durations=5 "${UNIT_1[@]}" ;;
    unit-2) LNCOURSE_MARGINS=$PWD/_build/margins/native $PY -m pytest -m "not slow and not notebooks and not site" -p no:cacheprovider \
              -q --ignore=tests/book/test_colab.py --ignore=tests/grading --durations=5 \
              "${UNIT_1[@]/#/--ignore=}" ;;
    perturbed) PY=$PY LNCOURSE_MARGINS=$PWD/_build/margins/perturbed bash scripts/perturbed.sh ;;
    grading) $PY -m pytest tests/grading -m "not slow and not notebooks and not site" \
               -p no:cacheprovider -q --durations=5 ;;
    colab) $PY -m pytest tests/book/test_colab.py -m "not slow" -p no:cacheprovider -q \
             --durations=0 ;;
    nbval) $PY -m pytest tests/book -m "notebooks and not slow" -k deterministic \
             -p no:cacheprovider -q --durations=0 ;;
    site) $PY -m pytest tests/book/test_site.py -p no:cacheprovider -q \
            -m "(notebooks or site) and not slow" --durations=5 ;;
    site-other) $PY -m pytest tests/book -p no:cacheprovider -q \
                  -m "(notebooks or site) and not slow" -k "not student and not deterministic" \
                  --ignore=tests/book/test_site.py --durations=5 ;;
  esac
}
run_queue() {   # $1: the lane's name; $2...: the tasks it may take. Takes the first
  # unclaimed task it can run now; a [site] task before the build is done is left for
  # later, and the lane waits for the build only when nothing else is left.
  local name rc ran pending lane=$1; shift
  while :; do
    ran=0; pending=0
    for name in "$@"; do
      [ -e "_build/.claim-$name" ] && continue
      if [[ "$NEEDS_PACKAGE" =~ " $name:"([a-z]+)" " ]] \
          && [ ! -e "_build/.apt-${BASH_REMATCH[1]}" ]; then
        pending=1; continue
      fi
      if [[ "$NEEDS_SITE" == *" $name "* ]] && [ ! -e _build/.site-built ]; then
        if [ ! -e _build/.site-failed ]; then pending=1; continue; fi
        mkdir "_build/.claim-$name" 2>/dev/null || continue
        echo "not run: the site build failed" > "_build/task-$name.log"
        echo 1 > "_build/task-$name.rc"
        continue
      fi
      mkdir "_build/.claim-$name" 2>/dev/null || continue
      stamp "lane $lane: $name started"
      rc=0
      # bash's time keyword counts the CPU of the task's children too (kernels,
      # learners, Chromium): a lane's wall time alone hides what it took from the other
      { time { ( task "$name" ) > "_build/task-$name.log" 2>&1 || rc=$?; }; } \
        2> "_build/task-$name.time"
      echo "$rc" > "_build/task-$name.rc"
      stamp "lane $lane: $name done (exit $rc; $(cat "_build/task-$name.time"))"
      ran=1; break
    done
    [ "$ran" -eq 1 ] && continue
    [ "$pending" -eq 0 ] && return 0
    sleep 2
  done
}

# No PDF: the README's site command builds it (scripts/build_pdf.sh, about 65 s of LaTeX
# and 100 s of a lane), and the slow suite's test_offline_downloads_open checks it
# (issue 32: the test command's budget)
export LNCOURSE_PDF_LATER=1
run_queue B "${LANES_AB[@]}" > _build/lane-b.log 2>&1 &
lane_b=$!
# Lanes C and D, from the start, beside the two lanes: in the quiet run of efeb34a the grader's
# tests took 176 s of wall time for 70 s of CPU, the student runs 65 s for 46 s, the
# reader's environments 60 s for about 40 s, each holding a lane for all its wall time.
run_queue C "${LANE_C[@]}" > _build/lane-c.log 2>&1 &
lane_c=$!
run_queue D "${LANE_D[@]}" > _build/lane-d.log 2>&1 &
lane_d=$!

wait "$mathjax" || cat _build/mathjax.log   # (the build fetches it again if it failed)
stamp "lane A: site build"
if time bash scripts/build_site.sh; then
  touch _build/.site-built
  stamp "lane A: site built"
  run_queue A "${LANES_AB[@]}"
else
  touch _build/.site-failed
  echo 1 > _build/task-build.rc
  stamp "lane A: the site build failed"
fi
wait $lane_b || true
wait $lane_c || true
wait $lane_d || true
cat _build/apt.log _build/lane-b.log _build/lane-c.log _build/lane-d.log
failed=()
for name in "${TASKS[@]}" build; do
  [ -e "_build/task-$name.rc" ] || continue
  if [ -e "_build/task-$name.log" ]; then
    echo "[test] ---- $name (exit $(cat "_build/task-$name.rc")) ----"
    tail -n 40 "_build/task-$name.log"
  fi
  [ "$(cat "_build/task-$name.rc")" -eq 0 ] || failed+=("$name")
done
for name in "${TASKS[@]}"; do   # a task nobody ran is a failure too
  [ -e "_build/task-$name.rc" ] || failed+=("$name (never ran)")
done
# Every comparison with a stored number, on this machine's own paths and perturbed, at
# least ten times inside its tolerance (or with its reason: TESTING.md, "Margins")
if [ -e _build/task-unit-1.rc ] && [ -e _build/task-perturbed.rc ]; then
  $PY scripts/margins.py --check _build/margins/native _build/margins/perturbed \
    || failed+=("margins")
fi
stamp "lanes done"
if [ "${#failed[@]}" -gt 0 ]; then
  echo "[test] FAILED: ${failed[*]} (full output in _build/task-<name>.log)"
  exit 1
fi
stamp "all tests passed"
