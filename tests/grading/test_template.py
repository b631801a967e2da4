"""Learners forked from the class's template (``lncourse.grading.template``) are contained
as a fresh bubblewrap sandbox would contain them, and each from the others. (The attack
tests in ``test_grade_attacks.py`` grade through the template too, the grader's default.)"""

import time
from pathlib import Path

import pytest

from lncourse.grading.contain import bwrap
from lncourse.grading.sandbox import Learner, Sandbox
from lncourse.grading.contain import pid_max_per_namespace
from lncourse.grading.template import PID_MAX, Template, _needed

# a checkout or virtual environment under /tmp (a fresh clone from mktemp -d) is put back
PUT_BACK = {Path(p).parts[2] for p in _needed(("/tmp",))}

from lncourse.grading.template import fallback_template

pytestmark = pytest.mark.skipif(bwrap() is None and not fallback_template(),
                                reason="the template runs in bubblewrap, or as root with Landlock")

PROBE = '''
def probe(name):
    import os
    with open("/tmp/" + name, "w") as f:
        f.write(name)
    fds = {}
    for fd in os.listdir("/proc/self/fd"):
        try:
            fds[fd] = os.readlink("/proc/self/fd/" + fd)
        except OSError:
            pass
    try:
        with open("/proc/1/environ", "rb") as f:    # the learner's own supervisor
            supervisor = "readable" if f.read() is not None else ""
    except OSError:
        supervisor = "denied"
    import importlib.util      # Python's packages and lncourse are there to import from
    found = [importlib.util.find_spec(m) is not None for m in ("nbformat", "lncourse.norms")]
    status = {line.split(":")[0]: line.split()[1] for line in open("/proc/self/status")
              if line.startswith(("CapEff", "CapBnd", "NoNewPrivs"))}
    return {"me": os.getpid(), "pids": sorted(int(p) for p in os.listdir("/proc") if p.isdigit()),
            "fds": sorted(fds.values()), "tmp": sorted(os.listdir("/tmp")), "status": status,
            "pid_max": open("/proc/sys/kernel/pid_max").read().strip(), "supervisor": supervisor,
            "found": found}
'''
LOOP = '''
def probe(name):
    while True:
        pass
'''


def run(learner, source, name, seconds=20.0):
    sandbox = Sandbox([("probe.py", source, [0])], "probe", seconds, 512, learner)
    try:
        info = sandbox.start()
        return sandbox.function(info)(name)
    finally:
        sandbox.close()


def test_forked_learners_are_contained_each_from_the_others():
    template = Template.start([], (), 300.0)
    assert template is not None, "the template did not start"
    try:
        a, b = Learner(template=template), Learner(template=template)
        seen = {name: run(learner, PROBE, name) for name, learner in (("a", a), ("b", b))}
        for name, probe in seen.items():
            assert sorted(set(probe["tmp"]) - PUT_BACK) == [name]   # a private /tmp each
            assert set(probe["pids"]) <= {1, probe["me"]}       # its own PID namespace
            assert probe["supervisor"] == "denied"              # PID 1 cannot be ptraced
            assert probe["found"] == [True, True]               # even from a clone in /tmp
            assert probe["status"] == {"CapEff": "0" * 16, "CapBnd": "0" * 16,
                                       "NoNewPrivs": "1"}
            pipes = [f for f in probe["fds"] if f.startswith("pipe:")]
            others = [f for f in probe["fds"] if not f.startswith("pipe:")
                      and f != "/dev/null" and not f.startswith("/proc/")]
            assert len(pipes) == 2 and others == [], probe["fds"]   # no descriptor but its own
            if pid_max_per_namespace():                         # its processes are bounded
                assert probe["pid_max"] == str(PID_MAX)
        # an exercise that never ends is stopped at its limit, and the learner ends with it
        start = time.monotonic()
        with pytest.raises(AssertionError, match="time limit"):
            run(a, LOOP, "loop", seconds=1.0)
        assert time.monotonic() - start < 15
        assert a.process is None
        again = run(a, PROBE, "c")                             # a new learner, a new /tmp
        assert sorted(set(again["tmp"]) - PUT_BACK) == ["c"]
        a.kill()
        b.kill()
    finally:
        template.close()
