#!/usr/bin/env bash
# One task of the test command (scripts/test.mk): run a command with its output in
# _build/tasks/NAME.log, its exit code in _build/tasks/NAME.rc, and one line for the
# person watching: the result, the wall time and the CPU the task used, its child
# processes included (kernels, the grader's learners, Chromium). The CPU comes from a
# cgroup of its own where the machine lets us make one (cgroup v1's cpuacct, or v2):
# the learners that bubblewrap starts are nobody's reaped children, so getrusage and
# bash's `time` miss them. Elsewhere it is bash's count of reaped children, marked "~".
#   bash scripts/task.sh NAME COMMAND [ARGS...]
# TASK_SHOW, a regular expression: the output lines that match it are shown as they come
# (the site build's one line per page).
set -uo pipefail
name=$1; shift
dir=_build/tasks
mkdir -p "$dir"
log=$dir/$name.log
group=""
for root in /sys/fs/cgroup/cpuacct /sys/fs/cgroup; do
  [ -e "$root/cpuacct.usage" ] || [ -e "$root/cpu.stat" ] || continue   # a real cgroup
  if [ -w "$root" ] && mkdir "$root/lncourse-$name-$$" 2>/dev/null; then
    group=$root/lncourse-$name-$$
    break
  fi
done
cpu_ns() {   # the group's CPU so far, in nanoseconds
  if [ -r "$group/cpuacct.usage" ]; then cat "$group/cpuacct.usage"
  else awk '$1 == "usage_usec" { print $2 * 1000 }' "$group/cpu.stat"; fi
}
rm -f "$dir/$name.no-cgroup"
start=$(date +%s)
TIMEFORMAT="%U %S"
run() {   # the command, in the task's cgroup (if any) with everything it starts
  if [ -n "$group" ] && ! echo "$BASHPID" > "$group/cgroup.procs" 2>/dev/null; then
    echo "[task] could not join $group; CPU from bash's count" >&2
    touch "$dir/$name.no-cgroup"
  fi
  exec "$@"
}
show() { if [ -n "${TASK_SHOW:-}" ]; then tee "$log" | grep --line-buffered -E "$TASK_SHOW" >&3
         else cat > "$log"; fi; }
exec 3>&1
times=$( { time { ( run "$@" ) 2>&1 | show; echo "${PIPESTATUS[0]}" > "$dir/$name.rc"; }; } 2>&1 )
rc=$(cat "$dir/$name.rc")
wall=$(( $(date +%s) - start ))
if [ -n "$group" ] && [ ! -e "$dir/$name.no-cgroup" ]; then
  cpu="$(cpu_ns | awk '{ printf "%.0f", $1 / 1e9 }') s of CPU"
else
  cpu="~$(echo "$times" | awk '{ printf "%d", $1 + $2 }') s of CPU"
fi
[ -n "$group" ] && rmdir "$group" 2>/dev/null    # a straggler keeps it; named by the pid
summary=$(grep -E "^(=+ )?[0-9]+ (passed|failed|error)" "$log" | tail -1 | sed -E 's/^=+ //; s/ =+$//')
echo "[test] $name $([ "$rc" -eq 0 ] && echo passed || echo "FAILED (exit $rc)")" \
     "in $wall s, $cpu${summary:+ ($summary)}"
exit "$rc"
