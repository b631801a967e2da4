"""Containing the learner's process: bubblewrap where the system has it, the kernel's
own means where it does not.

With bubblewrap (``bwrap``, Debian package ``bubblewrap``) each submission's process gets
new user, PID, network, IPC and UTS namespaces, no capabilities, a read-only view of the
file system in which the class's folders and ``lncourse/checks`` are empty, a private
writable ``/tmp``, a new session (no terminal to write into), and dies with its checker
(``--die-with-parent``; the kernel kills every process of a PID namespace when its first
process dies).

Without it (or with ``LNCOURSE_SANDBOX=none``), the fallback: the learner's process is
its checker's child in a session of its own, killed by the kernel if the checker dies
(``PR_SET_PDEATHSIG``), the subreaper of everything it starts, which is killed when each
exercise ends, under rlimits (address space, processes, file size, CPU time, no core
files), working in a private temporary folder. It can still read what the teacher's user
can read and signal the teacher's other processes: ``guarantees()`` says so.
"""

from __future__ import annotations

import functools
import os
import shutil
import signal
import subprocess
import sys
from pathlib import Path

PACKAGE = Path(__file__).resolve().parent.parent     # lncourse/ (this is lncourse/grading/)


@functools.lru_cache(maxsize=1)
def bwrap() -> str | None:
    """The path of a working ``bwrap`` (it is tried once), or None."""
    if os.environ.get("LNCOURSE_SANDBOX", "") == "none":
        return None
    path = shutil.which("bwrap")
    if path is None:
        return None
    try:
        done = subprocess.run([path, *_namespaces(), "--ro-bind", "/", "/", "--proc", "/proc",
                               "--dev", "/dev", "true"], capture_output=True, timeout=20)
    except (OSError, subprocess.TimeoutExpired):
        return None
    return path if done.returncode == 0 else None


def _namespaces() -> list[str]:
    return ["--unshare-user", "--unshare-pid", "--unshare-net", "--unshare-ipc",
            "--unshare-uts", "--unshare-cgroup-try", "--die-with-parent", "--new-session",
            "--cap-drop", "ALL"]


def pid_max_per_namespace() -> bool:
    """Linux 6.14+: ``/proc/sys/kernel/pid_max`` is per PID namespace, so the template's
    learners can bound their own processes (``lncourse.grading.template.PID_MAX``)."""
    try:
        major, minor = (int(x) for x in os.uname().release.split(".")[:2])
    except ValueError:
        return False
    return (major, minor) >= (6, 14)


def _processes(template: bool) -> str:
    """What bounds a submission's processes, in words."""
    if template and bwrap() and pid_max_per_namespace():
        return "Processes: fewer than 512 per submission (its PID namespace's pid_max). "
    if os.geteuid() == 0:
        return ("Does NOT hold: a bound on a submission's processes (the grader runs as root, "
                "and the kernel exempts root from RLIMIT_NPROC, in user namespaces too; run it "
                "as an ordinary user" + (")" if not bwrap() else ", or on Linux 6.14+ "
                                         "without --fresh-learners)") + ". ")
    return ("Processes: RLIMIT_NPROC of 256" + (" per submission. " if bwrap() else
            ", counted over all your user's processes. "))


def guarantees(template: bool = True) -> str:
    """What holds for the learner's processes on this system, in plain words."""
    if bwrap():
        return ("containment: bubblewrap" + (", learners forked from a template" if template
                                             else ", a fresh learner per submission")
                + ". Each submission runs in its own PID, network, mount, IPC and user "
                "namespaces with a read-only view of the system (the class's folders and the "
                "checks hidden), a private /tmp, no capabilities, rlimits on memory, file size "
                "and CPU time, and dies with its checker. " + _processes(template)).strip()
    from lncourse.grading.landlock import abi

    version = abi()
    common = ("containment: FALLBACK (bubblewrap is not available; install the Debian package "
              "`bubblewrap` for full containment). Holds: no descriptor of the grader's, no "
              "process outlives its exercise (subreaper + kill), rlimits on memory, file size "
              "and CPU time, checks not importable, a private working folder. "
              + _processes(template))
    if version >= 6:
        return common + (f"Landlock (ABI {version}): reads only the system, Python and "
                         "lncourse (not the checks, not the class), writes only its folder, "
                         "signals no process outside its own. Does NOT hold: a network or PID "
                         "namespace (it can see your processes and open network connections).")
    if version:
        return common + (f"Landlock (ABI {version}): reads only the system, Python and "
                         "lncourse, writes only its folder. Does NOT hold: it can signal "
                         "your user's processes, and use the network.")
    return common + ("Does NOT hold (no Landlock either): a submission can read and write "
                     "what your user can (classmates' notebooks, the installed package) and "
                     "signal your user's processes.")


def learner_command(hide: list[Path], module: str = "lncourse.grading.learner",
                    caps: tuple[str, ...] = ()) -> tuple[list[str], dict[str, str]]:
    """The command line starting the learner's process, and its environment.

    ``hide``: folders the learner must not see (the class's submissions); ``module``: the
    learner, or ``lncourse.grading.template``, which keeps ``caps`` (in bubblewrap's user
    namespace) to make each learner's namespaces."""
    env = {"PATH": "/usr/bin:/bin", "HOME": "/tmp", "LANG": "C.UTF-8",
           "PYTHONDONTWRITEBYTECODE": "1", "PYTHONHASHSEED": "0", "OMP_NUM_THREADS": "1",
           "MKL_NUM_THREADS": "1", "LNCOURSE_PROGRESS": "0", "LNCOURSE_NO_WIDGETS": "1",
           "MPLBACKEND": "Agg"}
    python = [sys.executable, "-I", "-X", "frozen_modules=on", "-m", module]
    path = bwrap()
    if path is None:
        return python, {**env, "LNCOURSE_SANDBOX": "fallback"}
    args = [path, *_namespaces(), *[a for c in caps for a in ("--cap-add", c)], "--ro-bind", "/", "/", "--dev", "/dev", "--proc", "/proc",
            "--tmpfs", "/tmp", "--tmpfs", "/dev/shm", "--tmpfs", "/run"]
    needed = [Path(sys.prefix).resolve(), Path(sys.base_prefix).resolve(), PACKAGE]
    hidden = sorted({p.resolve() for p in hide} - {Path("/")})
    for folder in hidden:
        args += ["--tmpfs", str(folder)]
    # put back what a hidden or private folder held that the learner needs (a checkout or
    # a virtual environment under /tmp, as in a fresh clone made with mktemp -d)
    private = [Path("/tmp"), Path("/dev/shm"), Path("/run")]
    for n in needed:
        if any(n.is_relative_to(f) for f in [*hidden, *private]):
            args += ["--ro-bind", str(n), str(n)]
    args += ["--tmpfs", str(PACKAGE / "checks"), "--chdir", "/tmp", "--setenv",
             "LNCOURSE_SANDBOX", "bwrap", "--", *python]
    return args, env


def readable() -> list[str]:
    """What the learner's process may read in the fallback (with Landlock): the system,
    Python and its packages, and ``lncourse`` but its checks."""
    import site
    import sysconfig

    roots = ["/usr", "/lib", "/lib32", "/lib64", "/bin", "/sbin", "/etc", "/proc", "/sys",
             "/dev", sys.prefix, sys.base_prefix, os.path.dirname(os.path.realpath(sys.executable)),
             sysconfig.get_paths()["stdlib"], *site.getsitepackages()]
    roots += [str(p) for p in PACKAGE.iterdir() if p.name != "checks"]
    return roots


def fallback_preexec(read: list[str], write: list[str]):
    """What runs in the learner's process before Python starts (the fallback): its own
    session, killed with its checker, and Landlock's bounds where the kernel has them."""
    def preexec() -> None:
        import ctypes

        os.setsid()
        try:
            ctypes.CDLL(None).prctl(1, signal.SIGKILL, 0, 0, 0)     # PR_SET_PDEATHSIG
        except (OSError, AttributeError):
            pass
        from lncourse.grading.landlock import restrict
        try:
            restrict(read, write, [str(PACKAGE)])
        except OSError:
            os._exit(71)      # bounds promised but not applied: do not run at all
    return preexec


def _children() -> dict[int, list[int]]:
    tree: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat", "rb") as f:
                stat = f.read().decode(errors="replace")
        except OSError:
            continue
        fields = stat.rsplit(")", 1)[-1].split()
        if len(fields) > 1:
            tree.setdefault(int(fields[1]), []).append(int(entry))
    return tree


def descendants(pid: int) -> list[int]:
    tree, out, todo = _children(), [], [pid]
    while todo:
        for child in tree.get(todo.pop(), []):
            out.append(child)
            todo.append(child)
    return out


def kill_descendants(pid: int, rounds: int = 50) -> None:
    """SIGKILL every descendant of ``pid`` (again, until none is left: a fork may race)."""
    for _ in range(rounds):
        found = descendants(pid)
        if not found:
            return
        for child in found:
            try:
                os.kill(child, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                pass
        while True:   # reap those that are ours
            try:
                if os.waitpid(-1, os.WNOHANG) == (0, 0):
                    break
            except ChildProcessError:
                break


def contained() -> bool:
    """True where a submission can neither read the class nor signal the grader: with
    bubblewrap, or with Landlock ABI 6 or later in the fallback."""
    from lncourse.grading.landlock import abi

    return bwrap() is not None or abi() >= 6
