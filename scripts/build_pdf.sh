#!/usr/bin/env bash
# The book as a PDF (linked from the front page for offline readers), from Jupyter Book's
# LaTeX builder, after scripts/build_site.sh: the chapters are not executed again (it
# reads the site build's execution cache). TeX comes from Debian, like Chromium in
# scripts/test.sh. Writes _build/latex and _build/html/downloads/the-geometry-of-layernorm.pdf.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
[ -f _build/html/index.html ] || { echo "[pdf] build the site first: bash scripts/build_site.sh" >&2; exit 1; }
export LNCOURSE_DEVICE=${LNCOURSE_DEVICE:-cpu} LNCOURSE_NO_WIDGETS=1 LNCOURSE_SITE_FIGURES=1
if ! command -v xelatex >/dev/null 2>&1 || ! command -v latexmk >/dev/null 2>&1; then
  echo "[pdf] installing TeX for the PDF (Debian packages)"
  SUDO=""; [ "$(id -u)" -ne 0 ] && SUDO="sudo"
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends \
    latexmk texlive-xetex texlive-latex-extra texlive-fonts-recommended \
    texlive-plain-generic fonts-freefont-otf >/dev/null
fi
pdf_start=$(date +%s)
.venv/bin/jupyter-book build . --builder pdflatex >_build/pdf.log 2>&1 \
  || { echo "[pdf] the PDF failed; see _build/pdf.log" >&2; tail -30 _build/pdf.log >&2; exit 1; }
mkdir -p _build/html/downloads
cp _build/latex/book.pdf _build/html/downloads/the-geometry-of-layernorm.pdf
echo "[pdf] PDF built in $(( $(date +%s) - pdf_start )) s"
