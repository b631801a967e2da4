"""Containing the learner's process: bubblewrap where the system has it, the kernel's
own means where it does not. What a submission can see and what bounds it, in both:

- Files: only the system's programs and libraries (``/usr``, ``/lib*``, ``/bin``,
  ``/sbin``), the files of ``/etc`` Python needs (``ETC``: no ``shadow``, no keys), a
  few of ``/dev`` and ``/sys``, Python with its packages, and ``lncourse`` without its
  checks, all read-only; a private writable folder. No home, no class folder, no sheet,
  no socket on disk. With bubblewrap this is the whole of its file system (``view``);
  in the fallback, Landlock's read rules (``readable``).
- System calls: a seccomp filter (``lncourse.grading.seccomp``): no new socket, no
  kernel log, no namespaces, mounts, ptrace, keyrings, bpf or io_uring.
- Privileges: no capabilities (bounding set included, no new privileges), also when the
  grader runs as root.
- Memory and processes: one cgroup per submission (``Cgroup``: version 2, or version 1's
  memory and pids hierarchies) holds all its processes; its memory limit counts their
  memory and the files they write to tmpfs together, and its pids limit their number.
  Without a writable cgroup: rlimits per process (address space, processes, file size,
  CPU time) and, in the fallback, a size-capped tmpfs as its only writable folder.
- Lifetime: a PID namespace (bubblewrap, the template's learners), or a subreaper and a
  kill of every descendant (the fallback), ends every process when its exercise ends;
  the learner dies with its checker.

With bubblewrap (``bwrap``, Debian package ``bubblewrap``) each submission's process gets
new user, PID, network, IPC and UTS namespaces, a new session and ``--die-with-parent``.
Without it (or with ``LNCOURSE_SANDBOX=none``), the fallback: the learner's process is
its checker's child in a session of its own, killed by the kernel if the checker dies
(``PR_SET_PDEATHSIG``), the subreaper of everything it starts, in new mount, network, IPC
and UTS namespaces where the system allows them (as root, or with unprivileged user
namespaces). ``guarantees()`` says what holds on this system.
"""

from __future__ import annotations

import functools
import os
import shutil
import signal
import subprocess
import sys
from pathlib import Path

from lncourse.grading.bounds import (CHECKER_MB, Exceeded, bounded,  # noqa: F401 (re-exported)
                                     kill_descendants, limit_checker)
from lncourse.grading.cgroup import Cgroup, cgroups_work  # noqa: F401 (Cgroup: re-exported)

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
    return [path, *_namespaces(), *[a for c in caps for a in ("--cap-add", c)],
            *view(hide), "--chdir", "/tmp", "--setenv", "LNCOURSE_SANDBOX", "bwrap", "--",
            *python], env


def view(hide: list[Path] = ()) -> list[str]:
    """bubblewrap's arguments for the learner's file system: an empty root holding,
    read-only, the system's programs and libraries, the files of /etc that Python needs
    (``ETC``), parts of /sys, Python and its packages, and ``lncourse`` with its checks
    hidden; a minimal /dev, its own /proc, and private, empty /tmp, /dev/shm and /run.
    Nothing else of the machine: no home, no class folder, no sockets on disk."""
    args = ["--dev", "/dev", "--proc", "/proc", "--tmpfs", "/tmp",
            "--tmpfs", "/dev/shm", "--tmpfs", "/run"]
    for root in SYSTEM:
        if os.path.islink(root):
            args += ["--symlink", os.readlink(root), root]
        elif os.path.isdir(root):
            args += ["--ro-bind", root, root]
    for name in ETC:
        args += ["--ro-bind-try", f"/etc/{name}", f"/etc/{name}"]
    for root in SYS:
        args += ["--ro-bind-try", root, root]
    roots = {*python_roots(), str(PACKAGE)}
    for root in sorted(r for r in roots if not any(r != o and Path(r).is_relative_to(o)
                                                    for o in roots)):
        args += ["--ro-bind", root, root]
    bound = [Path(r) for r in [*SYSTEM, *roots]]
    for folder in sorted({p.resolve() for p in hide} - {Path("/")}):
        if any(folder.is_relative_to(b) for b in bound):   # a class inside a bound folder
            args += ["--tmpfs", str(folder)]
    return args + ["--tmpfs", str(PACKAGE / "checks"), "--remount-ro", "/"]


# what the learner's process may read of /etc, /dev and /sys (the fallback, with Landlock;
# bubblewrap binds the same): what Python, PyTorch and matplotlib read, no secret
ETC = ("ld.so.cache", "ld.so.conf", "ld.so.conf.d", "localtime", "timezone", "nsswitch.conf",
       "passwd", "group", "host.conf", "gai.conf", "mime.types", "fonts", "matplotlibrc",
       "alternatives", "os-release", "lsb-release", "debian_version", "python3",
       "ssl/openssl.cnf")
DEV = ("null", "zero", "full", "random", "urandom")
SYS = ("/sys/devices/system/cpu", "/sys/devices/system/node", "/sys/fs/cgroup")
SYSTEM = ("/usr", "/lib", "/lib32", "/lib64", "/bin", "/sbin")


def python_roots() -> list[str]:
    """Python, its standard library and its packages (the virtual environment's too)."""
    import site
    import sysconfig

    roots = [sys.prefix, sys.base_prefix, os.path.dirname(os.path.realpath(sys.executable)),
             sysconfig.get_paths()["stdlib"], *site.getsitepackages()]
    return sorted({str(Path(r).resolve()) for r in roots if r})


def readable() -> list[str]:
    """What the learner's process may read in the fallback (with Landlock): the system's
    programs and libraries, the files of /etc, /dev and /sys that Python needs, /proc
    (another process's memory, environment and descriptors stay closed: Landlock refuses
    ptrace-like access outside its domain), Python and its packages, and ``lncourse``
    but its checks. Nothing else: no home, no class folder, no /etc/shadow."""
    roots = [*SYSTEM, "/proc", *(f"/etc/{e}" for e in ETC), *(f"/dev/{d}" for d in DEV),
             *SYS, *python_roots()]
    roots += [str(p) for p in PACKAGE.iterdir() if p.name != "checks"]
    return roots


# ------------------------------------------------------------------ namespaces (fallback)
_NEWNS, _NEWUTS, _NEWIPC, _NEWUSER, _NEWNET = 0x20000, 0x4000000, 0x8000000, 0x10000000, 0x40000000
_MS_RDONLY, _MS_NOSUID, _MS_NODEV, _MS_REC, _MS_PRIVATE = 1, 2, 4, 16384, 1 << 18


def _enter_namespaces(libc, folder: str | None, size_mb: int) -> None:
    """New mount, network, IPC and UTS namespaces (a user namespace first when not root),
    a size-capped tmpfs on ``folder``, the learner's only writable folder, and the
    checks hidden (``hide_checks``). Raises OSError where the kernel refuses."""
    uid, gid = os.getuid(), os.getgid()
    flags = _NEWNS | _NEWNET | _NEWIPC | _NEWUTS
    if os.geteuid() != 0:
        flags |= _NEWUSER
    if libc.unshare(flags) != 0:
        raise OSError(ctypes_errno(), "unshare")
    if flags & _NEWUSER:
        for path, text in (("/proc/self/setgroups", "deny"), ("/proc/self/uid_map", f"{uid} {uid} 1"),
                           ("/proc/self/gid_map", f"{gid} {gid} 1")):
            with open(path, "w") as f:
                f.write(text)
    if libc.mount(None, b"/", None, _MS_REC | _MS_PRIVATE, None) != 0:
        raise OSError(ctypes_errno(), "mount --make-rprivate /")
    if folder:
        options = f"size={int(size_mb)}m,mode=700,uid={uid},gid={gid}".encode()
        if libc.mount(b"tmpfs", folder.encode(), b"tmpfs", _MS_NOSUID | _MS_NODEV, options) != 0:
            raise OSError(ctypes_errno(), f"mount tmpfs {folder}")
    hide_checks(libc)


def hide_checks(libc, package: Path = PACKAGE) -> None:
    """An empty, read-only tmpfs over ``package``'s checks, in this mount namespace: the
    references and the teacher-only inputs out of the learner's sight wherever the
    checkout lies (Landlock cannot take one folder out of a readable one: a checkout
    under /tmp, where the learner may write and so read, or under a Python prefix).
    Raises OSError where the kernel refuses."""
    checks = Path(package) / "checks"
    if checks.is_dir():
        flags = _MS_NOSUID | _MS_NODEV | _MS_RDONLY
        if libc.mount(b"tmpfs", str(checks).encode(), b"tmpfs", flags, b"size=4k,mode=555") != 0:
            raise OSError(ctypes_errno(), f"mount tmpfs {checks}")


def ctypes_errno() -> int:
    import ctypes
    return ctypes.get_errno()


def drop_capabilities(libc) -> None:
    """Every capability dropped, bounding and ambient sets included, for good (root, too,
    keeps none across ``execve``)."""
    import ctypes

    class Header(ctypes.Structure):
        _fields_ = [("version", ctypes.c_uint32), ("pid", ctypes.c_int)]

    class Data(ctypes.Structure):
        _fields_ = [("effective", ctypes.c_uint32), ("permitted", ctypes.c_uint32),
                    ("inheritable", ctypes.c_uint32)]

    libc.prctl(47, 4, 0, 0, 0)                                  # PR_CAP_AMBIENT_CLEAR_ALL
    for cap in range(64):
        libc.prctl(24, cap, 0, 0, 0)                            # PR_CAPBSET_DROP
    if libc.capset(ctypes.byref(Header(0x20080522, 0)), (Data * 2)()) != 0:
        raise OSError(ctypes.get_errno(), "capset")
    if libc.prctl(38, 1, 0, 0, 0) != 0:                         # PR_SET_NO_NEW_PRIVS
        raise OSError(ctypes.get_errno(), "PR_SET_NO_NEW_PRIVS")


@functools.lru_cache(maxsize=1)
def namespaces_work() -> bool:
    """Whether this system lets the fallback give the learner its own namespaces and a
    size-capped tmpfs (as root, or with unprivileged user namespaces): tried once."""
    import ctypes
    import tempfile

    folder = tempfile.mkdtemp(prefix="lncourse-probe-")
    try:
        pid = os.fork()
        if pid == 0:
            code = 1
            try:
                _enter_namespaces(ctypes.CDLL(None, use_errno=True), folder, 1)
                code = 0
            except BaseException:  # noqa: BLE001
                pass
            os._exit(code)
        return os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1]) == 0
    finally:
        shutil.rmtree(folder, ignore_errors=True)


def fallback_preexec(read: list[str], write: list[str], folder: str | None = None,
                     size_mb: int = 2048, join: tuple[str, ...] = ()):
    """What runs in the learner's process before Python starts (the fallback), in order:
    its own session, killed with its checker; into its cgroup (``join``: the
    ``cgroup.procs`` files); its own mount, network, IPC and UTS namespaces with a tmpfs
    of ``size_mb`` on ``folder`` (where the system allows them); Landlock's bounds; the
    seccomp filter (``lncourse.grading.seccomp``); every capability dropped. A bound
    promised (by ``guarantees()``) that cannot be applied stops it before it runs anything."""
    import ctypes
    import resource

    from lncourse.grading import seccomp
    from lncourse.grading.landlock import restrict

    spaces = namespaces_work()
    libc = ctypes.CDLL(None, use_errno=True)

    def preexec() -> None:
        try:
            os.setsid()
            libc.prctl(1, signal.SIGKILL, 0, 0, 0)     # PR_SET_PDEATHSIG
            for path in join:
                with open(path, "w") as f:
                    f.write(str(os.getpid()))
            # the checker's own soft bound on memory is not the learner's
            hard = resource.getrlimit(resource.RLIMIT_AS)[1]
            resource.setrlimit(resource.RLIMIT_AS, (hard, hard))
            if spaces:
                _enter_namespaces(libc, folder, size_mb)
            restrict(read, write, [str(PACKAGE)])
            seccomp.install()
            drop_capabilities(libc)
        except BaseException:  # noqa: BLE001
            os._exit(71)      # bounds promised but not applied: do not run at all
    return preexec


def contained() -> bool:
    """True where a submission can neither read the class nor signal the grader: with
    bubblewrap, or with Landlock ABI 6 or later in the fallback."""
    from lncourse.grading.landlock import abi

    return bwrap() is not None or abi() >= 6
