"""What the grader's containment guarantees on this system, in plain words (printed by
``python -m lncourse.grading.grade`` and quoted by the teaching page).

Kept apart from :mod:`.contain` because it asks both :mod:`.contain` and :mod:`.template`
what works here, and the template itself starts learners with :mod:`.contain`.
"""

from __future__ import annotations

import os

from lncourse.grading.cgroup import cgroups_work
from lncourse.grading.contain import bwrap, namespaces_work, pid_max_per_namespace

__all__ = ["guarantees"]


def _processes(template: bool) -> str:
    """What bounds a submission's processes, in words."""
    if cgroups_work():
        return ("Processes and memory: one cgroup per submission (at most 256 processes; one "
                "memory limit for all of them and the files they write). ")
    if template and bwrap() and pid_max_per_namespace():
        return "Processes: fewer than 512 per submission (its PID namespace's pid_max). "
    if os.geteuid() == 0:
        return ("Does NOT hold: a bound on a submission's processes (the grader runs as root, "
                "and the kernel exempts root from RLIMIT_NPROC, in user namespaces too, and no "
                "cgroup is writable here; run it as an ordinary user" + (")" if not bwrap()
                                                                       else ", or on Linux 6.14+ "
                                                                       "without --fresh-learners)")
                + ". Memory is bounded per process, not per submission. ")
    return ("Processes: RLIMIT_NPROC of 256" + (" per submission" if bwrap() else
            ", counted over all your user's processes") + "; memory is bounded per process "
            "(no writable cgroup here), not per submission. ")


def guarantees(template: bool = True) -> str:
    """What holds for the learner's processes on this system, in plain words."""
    from lncourse.grading import seccomp

    calls = ("a seccomp filter (no sockets, kernel log, namespaces, mounts or ptrace), "
             if seccomp.program() is not None else "")
    if bwrap():
        return ("containment: bubblewrap" + (", learners forked from a template" if template
                                             else ", a fresh learner per submission")
                + ". Each submission runs in its own PID, network, mount, IPC and user "
                "namespaces and sees only the system's libraries, the /etc files Python "
                "needs, Python, its packages and lncourse (not the checks), read-only, and a "
                "private /tmp; " + calls + "no capabilities, and dies with its checker. "
                + _processes(template)).strip()
    from lncourse.grading.landlock import abi
    from lncourse.grading.template import fallback_template

    version = abi()
    spaces = namespaces_work()
    forked = template and fallback_template()
    common = ("containment: FALLBACK (bubblewrap is not available; install the Debian package "
              "`bubblewrap` for full containment)" + (", learners forked from a template, "
                                                     "each in its own PID namespace" if forked
                                                     else "") + ". Holds: no descriptor of the "
              "grader's, no process outlives its exercise (subreaper + kill), " + calls
              + "no capabilities "
              "(as root too), rlimits on memory, file size and CPU time, checks not importable, "
              + ("its own network, IPC and mount namespaces with a size-capped tmpfs as its "
                 "only writable folder. " if spaces else "a private working folder. ")
              + _processes(template))
    if version >= 6:
        return common + (f"Landlock (ABI {version}): reads only the system's libraries, the "
                         "/etc files Python needs, Python and lncourse (not the checks, not "
                         "the class, no home), writes only its folder, signals no process "
                         "outside its own." + ("" if spaces else " Does NOT hold: a network "
                                               "namespace (it can open network connections)")
                         + ("" if forked else " Does NOT hold: a PID namespace (it can "
                                                "list your processes)."))
    if version:
        return common + (f"Landlock (ABI {version}): reads only the system's libraries, "
                         "Python and lncourse, writes only its folder. Does NOT hold: it can "
                         "signal your user's processes.")
    return common + ("Does NOT hold (no Landlock either): a submission can read and write "
                     "what your user can (classmates' notebooks, the installed package) and "
                     "signal your user's processes.")
