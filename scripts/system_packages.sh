#!/usr/bin/env bash
# The Debian packages the tests need, installed if missing: bubblewrap (the grader's
# sandbox, which the teaching page's worked example uses in the site build too) and
# Chromium (the browser checks). Without them the grader falls back to a weaker
# sandbox and the browser checks cannot run, so a failed install fails this task.
set -euo pipefail
sudo=""; [ "$(id -u)" -ne 0 ] && sudo="sudo"
missing=()
command -v bwrap >/dev/null 2>&1 || missing+=(bubblewrap)
command -v chromium >/dev/null 2>&1 || missing+=(chromium)
if [ "${#missing[@]}" -eq 0 ]; then
  echo "bubblewrap and chromium are installed"
  exit 0
fi
echo "installing ${missing[*]} (Debian packages)"
$sudo apt-get update -qq
DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq "${missing[@]}"
