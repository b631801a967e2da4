#!/usr/bin/env bash
# Run every test: unit tests, exercise checks, the website build (which executes every
# chapter), the student notebooks, and a headless-browser check of every page.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
bash scripts/setup_env.sh

# Debian's Chromium for the browser test.
if ! command -v chromium >/dev/null 2>&1; then
  echo "[test] installing chromium (Debian package)"
  SUDO=""; [ "$(id -u)" -ne 0 ] && SUDO="sudo"
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq chromium >/dev/null
fi
export LNCOURSE_DEVICE=${LNCOURSE_DEVICE:-cpu}
mkdir -p _build

# The student notebooks run while the site builds, one core each: PyTorch's threads are
# capped at one per process, since two processes each spinning two threads on two cores
# were measured to run the majority chapter five times slower.
export OMP_NUM_THREADS=${OMP_NUM_THREADS:-1} MKL_NUM_THREADS=${MKL_NUM_THREADS:-1}
echo "[test] executing the student notebooks (in the background) while the site builds"
.venv/bin/python -m pytest -m notebooks -k student -p no:cacheprovider -q --durations=0 \
  > _build/student-notebooks.log 2>&1 &
students=$!
site_status=0
bash scripts/build_site.sh || site_status=$?
student_status=0
wait $students || student_status=$?
echo "[test] student notebooks:"
cat _build/student-notebooks.log
[ "$site_status" -eq 0 ] || { echo "[test] the site build failed"; exit "$site_status"; }
[ "$student_status" -eq 0 ] || { echo "[test] a student notebook failed"; exit "$student_status"; }

.venv/bin/python -m pytest -m "not slow" \
  --deselect tests/test_notebooks.py::test_student_notebook_raises_only_not_implemented "$@"
