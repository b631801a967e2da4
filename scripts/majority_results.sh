#!/usr/bin/env bash
# Write chapter 3's stored results (results/majority/*.json), one run after another, then
# its ledger (results/majority/reported.json). Commit first: a run refuses a modified
# checkout (lncourse/results.py; --allow-dirty overrides).
# Each run checkpoints every evaluation in results/checkpoints/ and resumes from there
# when started again, so this script can be stopped and rerun. Hours on two CPU cores;
# results/README.md lists the wall time of each run.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
PY=${PY:-.venv/bin/python}
DEVICE=${DEVICE:-cpu}
# Idle OpenMP threads sleep instead of spinning: when other work shares the cores, spinning
# threads were measured to make a step 1.5-2x slower.
export OMP_WAIT_POLICY=${OMP_WAIT_POLICY:-PASSIVE}
# "preset[:steps]": data_seed1/2 run the first 5,000 steps (what chapter 3 compares)
for spec in three_d grid_b500 grid_b6000 data_seed1:5000 data_seed2:5000; do
  preset=${spec%%:*}
  steps=$([ "$spec" != "$preset" ] && echo "--steps ${spec#*:}" || true)
  # a result is complete when its last evaluation is its configuration's last step
  if [ -f "results/majority/$preset.json" ] && $PY -c "import json, sys; \
      r = json.load(open('results/majority/$preset.json')); \
      sys.exit(0 if r['step'][-1] == r['config']['steps'] else 1)"; then
    echo "[majority] results/majority/$preset.json is complete; skipping"
    continue
  fi
  echo "[majority] $preset: started $(date -u +%FT%TZ)"
  # shellcheck disable=SC2086
  $PY -m lncourse.evidence.majority.runs --preset "$preset" $steps --device "$DEVICE" --quiet
done
# the paper run, with the parameter snapshots this command records (results/README.md:
# what the tests guard)
if ! $PY -c "import json, sys; r = json.load(open('results/majority/paper_snapshots.json')); \
    sys.exit(0 if r['step'][-1] == r['config']['steps'] else 1)" 2>/dev/null; then
  echo "[majority] paper (paper_snapshots.json): started $(date -u +%FT%TZ)"
  $PY -m lncourse.evidence.majority.runs --preset paper --out results/majority/paper_snapshots.json \
    --device "$DEVICE" --quiet
fi
# chapter 3's ledger of reported numbers, from whatever is stored now
$PY -m lncourse.evidence.majority.ledger
