#!/usr/bin/env bash
# MathJax is served from the site itself (no CDN): fetch it once from the npm registry
# into book/_static/mathjax (atomically: a folder appears complete or not at all).
# scripts/build_site.sh calls it.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
MATHJAX_VERSION=3.2.2
[ -f book/_static/mathjax/tex-chtml.js ] && exit 0
echo "[site] fetching mathjax@$MATHJAX_VERSION from the npm registry"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
(cd "$tmp" && npm pack --silent "mathjax@$MATHJAX_VERSION" >/dev/null)
tar -xzf "$tmp"/mathjax-*.tgz -C "$tmp"
mkdir -p book/_static
rm -rf book/_static/mathjax.part
cp -r "$tmp"/package/es5 book/_static/mathjax.part
rm -rf book/_static/mathjax
mv book/_static/mathjax.part book/_static/mathjax
