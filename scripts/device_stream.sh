#!/usr/bin/env bash
# Chapter 4's Figure 2 probe on a lent GPU, within a wall budget:
# first the stored run's size (7 models, 1,600 training + 200 held-out sequences each)
# with the error on the training sequences read again (over-fitting, measured), then
# the paper's budget (5,000 updates x 32 fresh sequences per model) model by model
# until the budget is spent. Everything goes under $OUT: stream_gpu.json (numbers,
# device, torch, wall time and sequences/s per model, the code's git blob ids) and the
# held-out predictions (preds_<i>.npz, at most 6 files of under 15 MiB).
#
#   on the device, from the repository root:  bash scripts/device_stream.sh 420
#   back here, on the folder that came back:  .venv/bin/python -m lncourse.evidence.nope.stream_read DIR
#
# Resumable: finished models and checkpoints stay in results/checkpoints/nope_stream_gpu
# on the machine (the same command again resumes while it is warm); a later session can
# skip the paper models already imported with --have results/nope/stream_gpu.json.
set -euo pipefail
BUDGET="${1:-420}"
shift || true
: "${OUT:?set OUT to the folder the record is written to}"
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"
python3 -c "import torch, numpy; print('torch', torch.__version__, 'numpy', numpy.__version__, torch.cuda.get_device_name(0) if torch.cuda.is_available() else 'no GPU')"
python3 -m lncourse.evidence.nope.stream_device --device cuda --budget-s "$BUDGET" --out "$OUT" "$@"
