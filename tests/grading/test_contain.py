"""The fallback without bubblewrap (``LNCOURSE_SANDBOX=none``): one learner serves every
exercise of a submission, and nothing an exercise starts outlives it."""

import os
import time

import pytest

from lncourse.grading import contain
from lncourse.grading.guarantees import guarantees
from lncourse.grading.sandbox import Learner, Sandbox

OUTLIVE = '''
def escape(n):
    import os, time
    read, write = os.pipe()
    if os.fork() == 0:
        os.setsid()
        if os.fork() == 0:
            os.write(write, str(os.getpid()).encode())
            time.sleep(120)
        os._exit(0)
    return int(os.read(read, 32))
'''


@pytest.fixture
def fallback(monkeypatch):
    monkeypatch.setenv("LNCOURSE_SANDBOX", "none")
    contain.bwrap.cache_clear()
    yield
    contain.bwrap.cache_clear()


def alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


def test_the_fallback_keeps_its_learner_and_kills_what_an_exercise_started(fallback):
    assert "FALLBACK" in guarantees()
    if os.geteuid() == 0 and not contain.cgroups_work():   # root is exempt from RLIMIT_NPROC
        assert "Does NOT hold: a bound on a submission's processes" in guarantees()
    if contain.cgroups_work():
        assert "one cgroup per submission" in guarantees()
    learner = Learner()
    try:
        pids, escaped = set(), []
        for k in range(2):
            sandbox = Sandbox([("escape.py", OUTLIVE, [0])], "escape", 30.0, 512, learner)
            try:
                escaped.append(sandbox.function(sandbox.start())(k))
                pids.add(learner.process.pid)
                assert alive(escaped[-1])            # the grandchild did start
            finally:
                sandbox.close()
            deadline = time.monotonic() + 5
            while alive(escaped[-1]) and time.monotonic() < deadline:
                time.sleep(0.05)
            assert not alive(escaped[-1]), "a process outlived its exercise"
        assert len(pids) == 1, "the learner was restarted between exercises"
        assert learner.fallback
    finally:
        learner.kill()
