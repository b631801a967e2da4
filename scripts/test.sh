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

bash scripts/build_site.sh
export LNCOURSE_DEVICE=${LNCOURSE_DEVICE:-cpu}
.venv/bin/python -m pytest -m "not slow" "$@"
