#!/usr/bin/env bash
# Build the website into _build/html, executing every chapter in fast mode.
# Then writes the student and solution notebooks (_build/notebooks, copied into the site),
# with the values of the executed build.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
# Notebook pages executed at once (scripts/preexecute.py), and torch's threads in each:
# from the cores other work leaves free when the build starts (the load average, read
# before the set-up adds its own), at most 4 pages at once, one torch thread each
# unless cores are left over: beside other CPU-bound work, a torch thread more than the
# free cores makes a page slower, not faster. LNCOURSE_BUILD_JOBS and OMP_NUM_THREADS,
# if set, decide.
cores=$(env -u OMP_NUM_THREADS -u OMP_THREAD_LIMIT nproc)   # (nproc obeys both)
busy=$(awk '{ printf "%d", $1 + 0.5 }' /proc/loadavg)
free=$(( cores - busy )); [ "$free" -ge 1 ] || free=1
jobs=${LNCOURSE_BUILD_JOBS:-$(( free < 4 ? free : 4 ))}
if [ -z "${OMP_NUM_THREADS:-}" ]; then
  threads=$(( free / jobs )); [ "$threads" -ge 1 ] || threads=1
  export OMP_NUM_THREADS=$threads MKL_NUM_THREADS=$threads
fi
echo "[site] $cores cores, load average $(cut -d' ' -f1 /proc/loadavg): $jobs page(s)" \
     "at once, $OMP_NUM_THREADS torch thread(s) each (LNCOURSE_BUILD_JOBS and" \
     "OMP_NUM_THREADS choose)"
# a module the set-up's bytecode (scripts/warm_imports.py) does not cover is compiled
# once, by the first kernel that imports it
unset PYTHONDONTWRITEBYTECODE
bash scripts/setup_env.sh
PY=.venv/bin/python
export LNCOURSE_DEVICE=${LNCOURSE_DEVICE:-cpu}   # the site is built in fast mode on the CPU
# A static page cannot run a widget, so chapters draw the static figure instead. This
# also removes the cause of a stall: amid ipywidgets' comm messages,
# nbclient would now and then miss a cell's reply and wait for its whole cell timeout
# while the kernel sat idle (3 of 29 repeated runs of a widget notebook; 0 of 25 without).
export LNCOURSE_NO_WIDGETS=1
# Figures are also drawn for a phone's column (panels stacked, text of at least 10 px),
# stored inside each figure's PNG and served to narrow screens by book/_ext/phone_figures.py.
export LNCOURSE_SITE_FIGURES=1
# A fast-mode run that two pages train (chapter 3's lesson and its replication page) is
# trained once per build and resumed at its end by the second page
# (lncourse.modes.shared_checkpoint); emptied here so each build trains it afresh.
export LNCOURSE_SHARED_RUNS=$PWD/_build/shared-runs
rm -rf "$LNCOURSE_SHARED_RUNS"

mkdir -p _build
# MathJax, served from the site itself (no CDN), fetched once: from the npm registry
# while the pages execute (only Sphinx needs it).
bash scripts/fetch_mathjax.sh > _build/mathjax.log 2>&1 &
mathjax=$!

# A busy machine makes the build slower, never failed. There is no short cell
# timeout (_config.yml: 3600 s, a backstop only): the watchdog scripts/build_watch.py tells
# a stalled kernel (no CPU used for STALL_AFTER s with a cell pending, or a reply the
# client never took) from a slow one (using CPU), stops only a stalled one, and names its
# notebook and cell. Kernels report their cells to it through an IPython start-up file.
STALL_AFTER=${LNCOURSE_STALL_AFTER:-120}
WATCH=_build/watch
rm -rf "$WATCH" && mkdir -p "$WATCH"
$PY scripts/build_watch.py --install-hook _build/ipython >/dev/null
export IPYTHONDIR=$PWD/_build/ipython LNCOURSE_WATCH_DIR=$PWD/$WATCH
$PY scripts/build_watch.py --dir "$WATCH" --stall-after "$STALL_AFTER" &
watch_pid=$!
trap 'kill $watch_pid 2>/dev/null || true' EXIT

# The teaching page's worked example grades chapter 1's editions, so they exist before
# the build (2 s; all chapters took 9 s); the grader reads only their code. Every
# chapter's are written after the build, with the build's values in their prose.
rm -rf _build/notebooks
$PY scripts/editions.py --out _build/notebooks book/01_layernorm_geometry.md \
  >/dev/null 2>&1 \
  || $PY scripts/editions.py --out _build/notebooks book/01_layernorm_geometry.md
start=$(date +%s)
stalled() {
  if [ -s "$WATCH/STALLED" ]; then
    echo "[site] FAILED: a notebook stalled:" >&2
    sed 's/^/[site]   /' "$WATCH/STALLED" >&2
    exit 1
  fi
}
# The notebook pages, executed $jobs at a time into the cache the build reads (an
# unchanged page is not executed again).
echo "[site] executing the notebook pages into _build/.jupyter_cache"
status=0
$PY scripts/preexecute.py --cache _build/.jupyter_cache --jobs "$jobs" || status=$?
stalled
[ "$status" -eq 0 ] || exit "$status"
if ! wait "$mathjax"; then
  echo "[site] FAILED to fetch MathJax (_build/mathjax.log):" >&2
  cat _build/mathjax.log >&2
  exit 1
fi
echo "[site] rendering the pages with Sphinx (log: _build/book-build.log)"
status=0
.venv/bin/jupyter-book build . --builder html -n -W --keep-going \
  > _build/book-build.log 2>&1 || status=$?
stalled
if [ "$status" -ne 0 ]; then
  echo "[site] FAILED: Sphinx's warnings and errors (warnings are errors here):" >&2
  grep -E "WARNING|ERROR|Error|Traceback" _build/book-build.log | head -n 40 >&2 \
    || tail -n 40 _build/book-build.log >&2
  exit "$status"
fi
# Every page was in the cache, so the build executed none itself: one it did means
# preexecute.py's cache key no longer matches myst-nb's (a changed myst-nb or
# jupyter-cache), and every page would run twice.
if grep -q "Executing notebook" _build/book-build.log; then
  echo "[site] FAILED: the build executed notebook pages itself (scripts/preexecute.py's" \
       "cache key did not match myst-nb's):" >&2
  grep -B2 "Executing notebook" _build/book-build.log | sed 's/^/[site]   /' >&2
  exit 1
fi
# The executed notebooks as MyST-NB would leave them had it executed them (it leaves a
# page found in the cache without outputs; scripts/preexecute.py).
$PY scripts/preexecute.py --cache _build/.jupyter_cache --write-executed \
  _build/jupyter_execute
# Every chapter's execution time, from the execution cache. Over the budget of 300 s is a
# warning (a busy machine is slow; that is not the reader's build failing).
$PY scripts/execution_report.py --cache _build/.jupyter_cache --warn-notebook 300
# The notebooks come after the build: every value their prose quotes ({glue:text} on the
# site) is filled in from the build's executed notebooks (_build/jupyter_execute), and
# they import lncourse.glue, not myst_nb, which neither Colab nor a reader has.
echo "[site] generating the student and solution notebooks (values from the executed build)"
rm -rf _build/notebooks
$PY scripts/editions.py --out _build/notebooks --executed _build/jupyter_execute
rm -rf _build/html/notebooks
cp -r _build/notebooks _build/html/notebooks
# What the notebooks' first cell installs in Colab, published with the site: lncourse's
# code as a wheel of this commit, and the stored results apart, one archive per folder
# of results/, downloaded by lncourse when a chapter first loads one.
$PY scripts/publish.py --out _build/html

# For offline readers (linked from the front page): the notebooks in one zip, and the
# book as a PDF (below).
mkdir -p _build/html/downloads
(cd _build/notebooks && rm -f ../html/downloads/notebooks.zip \
  && $OLDPWD/$PY -m zipfile -c ../html/downloads/notebooks.zip student solution)
# The PDF: scripts/build_pdf.sh. The test command sets LNCOURSE_PDF_LATER=1 and builds it
# as a task of its own once the site is built (beside the site's tests, which read
# _build/html and the execution cache, neither of which the LaTeX builder writes), so the
# 30-50 s of LaTeX are off the chain of build, then the tests that need it.
echo "[site] built _build/html in $(( $(date +%s) - start )) s"
if [ -z "${LNCOURSE_PDF_LATER:-}" ]; then
  bash scripts/build_pdf.sh
fi
