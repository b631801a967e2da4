#!/usr/bin/env bash
# One chapter, for a contributor working on it: execute its pages (lesson and
# replication, fast mode) into the build's cache and render them as the site does
# (scripts/render_chapter.py: a broken directive, role, glue or ledger key fails here),
# and run its tests: its package folder's unit tests, the exercises' checks (every
# chapter's: 20 s), and its stored-result tests again under the perturbed numerics
# (TESTING.md). The other chapters' pages, the browser checks, the grader and the
# reader's environments are the full test command's (bash scripts/test.sh).
#   bash scripts/chapter.sh 3          # chapter 3: book/03_*, lncourse/majority, tests/majority
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
case "${1:-}" in
  1) folder=geometry ;; 2) folder=selectability ;; 3) folder=majority ;;
  4) folder=nope ;; 5) folder=norms ;;
  *) echo "usage: bash scripts/chapter.sh N   (N = 1 to 5)" >&2; exit 2 ;;
esac
start=$(date +%s)
unset PYTHONDONTWRITEBYTECODE
bash scripts/setup_env.sh
PY=.venv/bin/python
export LNCOURSE_DEVICE=${LNCOURSE_DEVICE:-cpu} LNCOURSE_NO_WIDGETS=1
export OMP_NUM_THREADS=${OMP_NUM_THREADS:-1} MKL_NUM_THREADS=${MKL_NUM_THREADS:-1}
mkdir -p _build
# the pages on one core (executed, then rendered), the tests on the other
{ $PY scripts/preexecute.py --cache _build/.jupyter_cache --jobs 1 --pages "book/0$1_" \
    && $PY scripts/render_chapter.py "$1"; } > "_build/chapter-$1-pages.log" 2>&1 &
pages=$!
status=0
$PY -m pytest -q -p no:cacheprovider -m "not slow and not notebooks and not site" \
  "tests/$folder" tests/checks || status=1
PY=$PY bash scripts/perturbed.sh -q -p no:cacheprovider \
  -m "replay and not slow and not notebooks and not site" "tests/$folder" || status=1
wait "$pages" || status=1
cat "_build/chapter-$1-pages.log"
echo "[chapter $1] $([ $status -eq 0 ] && echo passed || echo FAILED) in $(( $(date +%s) - start )) s"
exit $status
