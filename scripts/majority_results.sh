#!/usr/bin/env bash
# Write chapter 3's stored results (results/majority/*.json), one run after another.
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
for preset in three_d paper grid_b500 grid_b6000; do
  # a result is complete when its last evaluation is its configuration's last step
  if [ -f "results/majority/$preset.json" ] && $PY -c "import json, sys; \
      r = json.load(open('results/majority/$preset.json')); \
      sys.exit(0 if r['step'][-1] == r['config']['steps'] else 1)"; then
    echo "[majority] results/majority/$preset.json is complete; skipping"
    continue
  fi
  echo "[majority] $preset: started $(date -u +%FT%TZ)"
  $PY -m lncourse.majority_train --preset "$preset" --device "$DEVICE" --quiet
done
