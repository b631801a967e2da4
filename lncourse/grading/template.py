"""A learner started once per class and forked per submission: ``python -I -m
lncourse.grading.template``, run inside bubblewrap by ``lncourse.grading.grade``.

A learner's process spends about 2.5 s of CPU before its first exercise (importing
PyTorch, warming it up); thirty of them were most of a class's grading time. The template
pays that once: it is started like a learner (the same bubblewrap sandbox: read-only
system, the class's folders and the checks hidden, no network, ``--die-with-parent``),
prepares itself as a learner would (``lncourse.grading.learner.prepare``), and then only
listens on its control socket (fd 0, ``SOCK_SEQPACKET``, held by the grader and its
checkers). Each message carries a checker's two pipe ends (``SCM_RIGHTS``); for it the
template forks a learner that, before it answers anything:

- closes every descriptor but those two (the control socket included);
- enters new mount, PID, network, IPC, UTS (and cgroup) namespaces, and is PID 1 of its
  own PID namespace: it sees and can signal no process but its own, and when it ends the
  kernel kills every process of that namespace;
- mounts a fresh ``/proc`` (of its namespace), and private ``/tmp``, ``/dev/shm`` and
  ``/run``; sets its namespace's ``pid_max`` (Linux 6.14+) to ``PID_MAX``, which bounds
  its processes even when the grader runs as root (the kernel exempts root from
  ``RLIMIT_NPROC``, in user namespaces too);
- enters a user namespace of its own (so that its process limit counts its own
  processes only) and drops every capability (bounding set included; no new privileges);
- ends when its checker ends: when the checker's end of the request pipe closes
  (``learner.serve`` watches it, even while an exercise runs).

The template runs no submission's code and is unreachable from the learners (another PID
namespace, another ``/proc``); its only capabilities, ``CAP_SYS_ADMIN`` and
``CAP_SETFCAP`` in bubblewrap's user namespace, serve to make the namespaces above.
``Template`` is the grader's side: it starts the template, and ``fork()`` returns a
stand-in for a learner's ``Popen``.
"""

from __future__ import annotations

import ctypes
import os
import select
import signal
import socket
import subprocess
import time
from pathlib import Path

from lncourse.grading import seccomp   # imported before the learner blocks lncourse.grading
from lncourse.grading.contain import PACKAGE, hide_checks   # the same

CAPS = ("CAP_SYS_ADMIN", "CAP_SETFCAP")    # the template's, in bubblewrap's user namespace
PID_MAX = 512     # a learner's PID namespace holds fewer processes than this (Linux 6.14+)
_NEWNS, _NEWCGROUP, _NEWUTS, _NEWIPC = 0x00020000, 0x02000000, 0x04000000, 0x08000000
_NEWUSER, _NEWPID, _NEWNET = 0x10000000, 0x20000000, 0x40000000
_MS_NOSUID, _MS_NODEV, _MS_NOEXEC, _MS_REC, _MS_PRIVATE = 2, 4, 8, 16384, 1 << 18
_MS_RDONLY, _MS_REMOUNT, _MS_BIND = 1, 32, 4096
_STARTED = b'{"op": "started"}'


# ------------------------------------------------------------- in the template's process
def _check(result: int, what: str) -> None:
    if result != 0:
        raise OSError(ctypes.get_errno(), what)


def _write(path: str, text: str) -> None:
    fd = os.open(path, os.O_WRONLY)
    try:
        os.write(fd, text.encode())
    finally:
        os.close(fd)


def _drop_capabilities(libc) -> None:
    class Header(ctypes.Structure):
        _fields_ = [("version", ctypes.c_uint32), ("pid", ctypes.c_int)]

    class Data(ctypes.Structure):
        _fields_ = [("effective", ctypes.c_uint32), ("permitted", ctypes.c_uint32),
                    ("inheritable", ctypes.c_uint32)]

    for cap in range(64):
        libc.prctl(24, cap, 0, 0, 0)                                  # PR_CAPBSET_DROP
    _check(libc.capset(ctypes.byref(Header(0x20080522, 0)), (Data * 2)()), "capset")
    _check(libc.prctl(38, 1, 0, 0, 0), "PR_SET_NO_NEW_PRIVS")


def _learner(size_mb: int, rin: int, rout: int, *join: int) -> None:
    """In the template's child: become a contained learner, then serve (never returns).
    ``join``: the ``cgroup.procs`` files of the submission's cgroup, opened by the grader;
    ``size_mb``: the size of its private /tmp, /dev/shm and /run (each; 0: unbounded)."""
    from lncourse.grading import learner

    libc = ctypes.CDLL(None, use_errno=True)
    for fd in join:       # first: everything below is counted in the submission's bound
        os.write(fd, b"0")
        os.close(fd)
    low, high = sorted((rin, rout))
    os.closerange(3, low)
    os.closerange(low + 1, high)
    os.closerange(high + 1, 1 << 16)
    uid, gid = os.getuid(), os.getgid()
    if libc.unshare(_NEWNS | _NEWPID | _NEWNET | _NEWIPC | _NEWUTS | _NEWCGROUP) != 0:
        _check(libc.unshare(_NEWNS | _NEWPID | _NEWNET | _NEWIPC | _NEWUTS), "unshare")
    _check(libc.mount(None, b"/", None, _MS_REC | _MS_PRIVATE, None), "mount --make-rprivate")
    if os.fork() != 0:
        os._exit(0)                    # the template reaps this one; the next is PID 1
    os.setsid()
    flags = _MS_NOSUID | _MS_NODEV | _MS_NOEXEC
    _check(libc.mount(b"proc", b"/proc", b"proc", flags, None), "mount /proc")
    private_folders(libc, size_mb)
    try:   # bounds the processes even for root, whom the kernel exempts from RLIMIT_NPROC
        _write("/proc/sys/kernel/pid_max", str(PID_MAX))
    except OSError:
        pass   # before Linux 6.14 pid_max is the system's (guarantees() says so)
    _check(libc.unshare(_NEWUSER), "unshare user")
    _write("/proc/self/setgroups", "deny")
    _write("/proc/self/uid_map", f"{uid} {uid} 1")
    _write("/proc/self/gid_map", f"{gid} {gid} 1")
    if _FALLBACK:   # no bubblewrap around the template: Landlock gives the learner its view
        restrict = _FALLBACK["restrict"]
        restrict(_FALLBACK["read"], ["/tmp", "/dev/shm", os.devnull], _FALLBACK["listing"])
    _drop_capabilities(libc)
    seccomp.install()
    os.chdir("/tmp")
    learner.serve(rin, rout, namespace=True)


PRIVATE = ("/tmp", "/dev/shm", "/run")


def private_folders(libc, size_mb: int, private: tuple[str, ...] = PRIVATE,
                    package: Path | None = None) -> None:
    """In a new mount namespace: an empty tmpfs on each of ``private``; Python, its
    packages and lncourse put back, read-only, where they lay under one (``_needed``);
    and ``lncourse``'s checks hidden wherever the package lies (``contain.hide_checks``:
    the fallback's Landlock rule that lets the learner write under /tmp would let it
    read a checkout put back there)."""
    package = PACKAGE if package is None else package
    kept = [(path, os.open(path, os.O_PATH | os.O_DIRECTORY))
            for path in _needed(private, package)]
    for where in private:
        _check(libc.mount(b"tmpfs", where.encode(), b"tmpfs", _MS_NOSUID | _MS_NODEV,
                          b"mode=1777" + (f",size={size_mb}m".encode() if size_mb else b"")),
               f"mount {where}")
    for path, fd in kept:     # put back, read-only, what the learner needs from under them
        os.makedirs(path, exist_ok=True)
        _check(libc.mount(f"/proc/self/fd/{fd}".encode(), path.encode(), None,
                          _MS_BIND | _MS_REC, None), f"bind {path}")
        _check(libc.mount(None, path.encode(), None, _MS_BIND | _MS_REMOUNT | _MS_RDONLY
                          | _MS_NOSUID | _MS_NODEV, None), f"read-only {path}")
        os.close(fd)
    hide_checks(libc, package)


def _needed(private: tuple[str, ...], package: Path | None = None) -> list[str]:
    """Python, its packages and lncourse where they lie under a folder that each learner
    gets empty (a checkout or a virtual environment under /tmp, as in a fresh clone made
    with mktemp -d; ``contain.learner_command`` puts them back for the template)."""
    import sys

    package = Path(__file__).resolve().parent.parent if package is None else package
    needed = {str(Path(p).resolve()) for p in (sys.prefix, sys.base_prefix, package)}
    return sorted(p for p in needed if any(Path(p).is_relative_to(f) for f in private))


def _reap() -> None:
    while True:
        try:
            if os.waitpid(-1, os.WNOHANG)[0] == 0:
                return
        except ChildProcessError:
            return


_FALLBACK: dict = {}    # the fallback's Landlock rules (no bubblewrap), set by main


def main() -> None:
    from lncourse.grading import contain, landlock, learner   # noqa: F401 (before prepare)

    if os.environ.get("LNCOURSE_SANDBOX") == "fallback":
        _FALLBACK.update(read=contain.readable(), listing=[str(contain.PACKAGE)],
                         restrict=landlock.restrict)

    control = socket.socket(fileno=os.dup(0))
    devnull = os.open(os.devnull, os.O_RDWR)
    for fd in (0, 1, 2):
        os.dup2(devnull, fd)
    os.close(devnull)
    learner.prctl(learner.PR_SET_CHILD_SUBREAPER, 1)   # the learners' parents exit at once
    learner.prepare()
    control.send(_STARTED)
    while True:
        _reap()
        if not select.select([control], [], [], 1.0)[0]:
            continue
        try:
            message, fds, _, _ = socket.recv_fds(control, 64, 4)
        except OSError:
            return
        if not message and not fds:
            return                       # the grader closed its end: the class is graded
        size = message.partition(b":")[2]
        if message.partition(b":")[0] == b"learner" and 2 <= len(fds) <= 4 and (
                not size or size.isdigit()):
            pid = os.fork()
            if pid == 0:
                code = 0
                try:
                    control.detach()
                    _learner(int(size or 0), *fds)
                except BaseException:  # noqa: BLE001 (a learner that could not be contained)
                    code = 71
                os._exit(code)
        for fd in fds:
            os.close(fd)


# ------------------------------------------------------------------ the grader's side
def fallback_template() -> bool:
    """Whether the template can run without bubblewrap: as root (it makes each learner's
    namespaces itself), with Landlock and the seccomp filter to bound the learners, and
    not turned off (``LNCOURSE_TEMPLATE=none``)."""
    from lncourse.grading.contain import namespaces_work
    from lncourse.grading.landlock import abi

    return (os.environ.get("LNCOURSE_TEMPLATE", "") != "none" and os.geteuid() == 0
            and abi() >= 1 and seccomp.program() is not None and namespaces_work())


class Forked:
    """Stands in for the ``Popen`` of a learner forked by the template. It is not our
    child: it ends, with every process of its namespace, when we close its request pipe."""

    def __init__(self, control: socket.socket, join: tuple[str, ...] = (), size_mb: int = 0):
        req_r, req_w = os.pipe()
        rep_r, rep_w = os.pipe()
        joins = [os.open(path, os.O_WRONLY | os.O_CLOEXEC) for path in join]
        try:
            socket.send_fds(control, [f"learner:{int(size_mb)}".encode()],
                            [req_r, rep_w, *joins])
        finally:
            for fd in (req_r, rep_w, *joins):
                os.close(fd)
        self.stdin, self.stdout = open(req_w, "wb", 0), open(rep_r, "rb", 0)
        self.returncode: int | None = None

    def poll(self) -> int | None:
        return self.returncode

    def kill(self) -> None:
        """Close the request pipe, then wait (10 s at most) until no process holds the
        reply pipe: the learner and everything it started are gone."""
        if self.returncode is not None:
            return
        self.returncode = -signal.SIGKILL
        self.stdin.close()
        fd, deadline = self.stdout.fileno(), time.monotonic() + 10
        while (left := deadline - time.monotonic()) > 0:
            if not select.select([fd], [], [], left)[0] or not os.read(fd, 1 << 16):
                return

    def wait(self, timeout: float | None = None) -> int | None:
        return self.returncode


class Template:
    """The grader's handle on a running template (``start`` returns None where it cannot
    run: no bubblewrap, or it failed to start; the grader then starts each learner fresh)."""

    def __init__(self, process: subprocess.Popen, control: socket.socket):
        self.process, self.control = process, control

    @classmethod
    def start(cls, hide, preload: tuple[str, ...], startup: float) -> "Template | None":
        from lncourse.grading.contain import bwrap, learner_command

        if bwrap() is None and not fallback_template():
            return None
        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        argv, env = learner_command([Path(h) for h in hide], module="lncourse.grading.template", caps=CAPS)
        env["LNCOURSE_PRELOAD"] = ",".join(preload)
        preexec = None
        if bwrap() is None:      # the fallback's template: its own session, dies with us
            def preexec():
                os.setsid()
                ctypes.CDLL(None).prctl(1, signal.SIGKILL, 0, 0, 0)    # PR_SET_PDEATHSIG
        process = subprocess.Popen(argv, stdin=theirs.fileno(), stdout=subprocess.DEVNULL,
                                   stderr=subprocess.DEVNULL, env=env, close_fds=True, cwd="/",
                                   preexec_fn=preexec)
        theirs.close()
        ready = select.select([ours], [], [], startup)[0]
        if not ready or ours.recv(64) != _STARTED:
            process.kill()
            process.wait()
            ours.close()
            return None
        return cls(process, ours)

    def fork(self, join: tuple[str, ...] = (), size_mb: int = 0) -> Forked:
        """A learner forked from the template; ``join``: its cgroup's ``cgroup.procs``;
        ``size_mb``: the size of each of its private temporary file systems."""
        return Forked(self.control, join, size_mb)

    def close(self) -> None:
        """End the template; the kernel ends every learner it forked (its PID namespace)."""
        self.control.close()
        self.process.kill()
        self.process.wait()


if __name__ == "__main__":
    main()
