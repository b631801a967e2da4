"""scripts/test.mk: every test that is not slow runs in exactly one task of the README's
test command or of CI's stage (the perturbed pass runs the stored-result tests a second
time on purpose and is left aside). A selection that drops a file, a marker that no task
selects, or two tasks that both run a test would show here. Slow: it collects the suite
once per task (about a minute of CPU)."""

from __future__ import annotations

import shlex
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


def _task_commands() -> dict[str, list[str]]:
    """Each pytest task's arguments, as make would run them (``make -n``)."""
    out = subprocess.run(["make", "-n", "-f", "scripts/test.mk", "T=_build/no-such-tasks",
                          f"PY={sys.executable}", "all", "ci"],
                         cwd=ROOT, capture_output=True, text=True, check=True).stdout
    tasks = {}
    for line in out.replace("\\\n", " ").splitlines():
        words = shlex.split(line)
        if "scripts/task.sh" in words and "pytest" in words:
            name = words[words.index("scripts/task.sh") + 1]
            tasks[name] = words[words.index("pytest") + 1:]
    return tasks


def _collected(args: list[str]) -> set[str]:
    args = [a for a in args if a != "-q"]         # -qq would list files, not tests
    run = subprocess.run([sys.executable, "-m", "pytest", "--collect-only", "-q", *args],
                         cwd=ROOT, capture_output=True, text=True)
    assert run.returncode in (0, 5), run.stdout[-2000:] + run.stderr[-2000:]
    return {line for line in run.stdout.splitlines() if "::" in line}


@pytest.mark.slow
def test_every_test_runs_in_exactly_one_task():
    tasks = _task_commands()
    assert {"unit-1", "unit-2", "grading", "recompute", "site"} <= set(tasks), sorted(tasks)
    seen: dict[str, str] = {}
    twice = []
    for name, args in tasks.items():
        for test in _collected(args):
            if test in seen:
                twice.append((test, seen[test], name))
            seen[test] = name
    every = _collected(["-p", "no:cacheprovider", "-m", "not slow", "tests"])
    assert not twice, twice[:10]
    assert every - set(seen) == set(), sorted(every - set(seen))[:20]
    assert set(seen) <= every
