#!/usr/bin/env bash
# One lent GPU's work for a session, run side by side within a wall budget (seconds):
#   1. chapter 4's Figure 2 probe (scripts/device_stream.sh: the stored size with its
#      training-set error, then the paper's budget, model by model);
#   2. every page's student notebook through nbclient (scripts/device_notebooks.py);
#   3. chapter 2's no-scaling seeds on from step 34,000 to 50,000
#      (lncourse.evidence.selectability.seeds_continue, from the carried checkpoint);
#   4. the language models trained with the recipe that learns
#      (lncourse.evidence.nope.retrained and lncourse.evidence.norms.retrained, preset paper): one chain
#      per variant, its sweep then its seeds.
# Each job stops before the budget; each resumes from its checkpoints. What comes back
# (at most 8 files): the probe's files under $OUT (device_stream.sh writes at most 7),
# and everything else in $OUT/other.tgz.N (cat them, then untar): logs, the notebooks'
# JSON, every record written under results/ and the seeds' checkpoint.
#
# On the device, from the repository root, with carry [".whl", ".devnb",
# "results/checkpoints/selectability_seeds_table1.ckpt",
# "results/checkpoints/selectability_seeds_table1.ckpt.start.json"]:
#   bash scripts/device_all.sh 420
set -u
BUDGET="${1:-420}"
: "${OUT:?set OUT to the folder that comes back}"
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
  --target /tmp/site .whl/*.whl || exit 1
export PYTHONPATH="/tmp/site:$PWD" PYTHONUNBUFFERED=1 LNCOURSE_NO_WIDGETS=1
LOGS=/tmp/device_logs
mkdir -p "$LOGS"
touch /tmp/device_start
T0=$(date +%s)
left() { echo $(( BUDGET - ($(date +%s) - T0) )); }
{ nvidia-smi; python3 -c "import torch; print(torch.__version__, torch.cuda.get_device_name(0))"; nproc; } \
  > "$LOGS/machine.txt" 2>&1

OUT="$OUT" bash scripts/device_stream.sh $(( BUDGET - 45 )) > "$LOGS/stream.log" 2>&1 &

timeout $(( BUDGET - 20 )) python3 scripts/device_notebooks.py --run --scale 0.05 --jobs 4 \
  --timeout $(( BUDGET - 40 )) --out "$LOGS/device_notebooks.json" > "$LOGS/notebooks.log" 2>&1 &

timeout $(( BUDGET - 30 )) python3 -m lncourse.evidence.selectability.seeds_continue --preset table1 \
  --device cuda --quiet > "$LOGS/seeds_continue.log" 2>&1 &

chain() {   # module, variant, number of sweep rates, seeds
  local module=$1 variant=$2 rates=$3 seeds=$4 i t
  for i in $(seq 0 $(( rates - 1 ))); do
    t=$(left); [ "$t" -gt 5 ] || return   # (timeout 0 would mean no limit)
    timeout "$t" python3 -m "$module" --preset paper --device cuda --quiet \
      --part "sweep/$variant/$i" || return
  done
  for i in $(seq 0 $(( seeds - 1 ))); do
    t=$(left); [ "$t" -gt 5 ] || return
    timeout "$t" python3 -m "$module" --preset paper --device cuda --quiet \
      --part "final/$variant/$i" || return
  done
}
for v in Pre-LN RMSNorm QK-norm DyT; do
  chain lncourse.evidence.norms.retrained "$v" 3 3 > "$LOGS/heads_$v.log" 2>&1 &
done
for v in NoPE learned; do
  chain lncourse.evidence.nope.retrained "$v" 4 3 > "$LOGS/nope_$v.log" 2>&1 &
done
wait
# the records, where every part finished in time (each refuses what is missing)
for m in lncourse.evidence.norms.retrained lncourse.evidence.nope.retrained; do
  [ "$(left)" -gt 15 ] && timeout $(( $(left) - 10 )) python3 -m "$m" --preset paper \
    --device cuda --quiet > "$LOGS/store_${m##*.}.log" 2>&1
done
echo "wall $(( $(date +%s) - T0 )) s of $BUDGET" > "$LOGS/wall.txt"
# records and the seeds' checkpoint come back; the language models' checkpoints do not
# (too large for what returns; their records hold what the pages read)
find results -type f -newer /tmp/device_start > "$LOGS/written.txt"
grep -v '^results/checkpoints/' "$LOGS/written.txt" > /tmp/keep.txt
grep '^results/checkpoints/selectability_seeds' "$LOGS/written.txt" >> /tmp/keep.txt
tar czf /tmp/other.tgz -C / "${LOGS#/}" -C "$PWD" $(cat /tmp/keep.txt)
split -b 15M -d -a 1 /tmp/other.tgz "$OUT/other.tgz."
ls -la "$OUT"
