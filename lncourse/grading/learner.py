"""The learner's process: ``python -I -m lncourse.grading.learner`` (started by
``lncourse.grading.sandbox``, inside bubblewrap where the system has it).

It is a fresh interpreter, never a fork of the grader: it holds no descriptor but its
own two pipes (requests on fd 0, replies on fd 1, moved aside at start; 0, 1 and 2 then
point at /dev/null), and nothing of the checker's memory. ``lncourse.checks`` cannot be
imported here (the references and the hidden inputs stay in the checker's process; under
bubblewrap their folder is not even visible).

It imports PyTorch once (or is forked, ready, from ``lncourse.grading.template``), then, for each exercise of the submission, forks a child that
runs the statements the exercise's function needs and answers the checker's calls as
plain data (``lncourse.grading.wire``). When the exercise ends, every other process of
the sandbox is killed before the next one starts.
"""

from __future__ import annotations

import ctypes
import importlib.abc
import inspect
import os
import resource
import select
import signal
import sys
import traceback
from typing import Any

# imported before the checks and the grader are blocked (``prepare``): the fallback's kill
from lncourse.grading.contain import kill_descendants

_BLOCKED = ("lncourse.checks", "lncourse.grading")
# what the learner's process needs of grading (the package, its wire and itself)
_ALLOWED = ("lncourse.grading", "lncourse.grading.wire", "lncourse.grading.learner")
PR_SET_CHILD_SUBREAPER = 36
_PR_SET_PDEATHSIG = 1
_PR_SET_DUMPABLE = 4


def _blocked(name: str) -> bool:
    """A module the learner's process may not import: the checks and the grader."""
    return name not in _ALLOWED and any(name == b or name.startswith(b + ".") for b in _BLOCKED)


class _NoChecks(importlib.abc.MetaPathFinder):
    """Refuses to import the checks (and the grader) in the learner's process."""

    def find_spec(self, name, path=None, target=None):
        if _blocked(name):
            raise ImportError(f"{name} cannot be imported while an exercise is graded")
        return None


def prctl(option: int, value: int) -> None:
    try:
        ctypes.CDLL(None, use_errno=True).prctl(option, value, 0, 0, 0)
    except (OSError, AttributeError):
        pass


class _Printed:
    """Keeps the first ``room`` characters printed and counts the rest, in O(1) a write."""

    def __init__(self, room: int):
        self.kept, self.room, self.total = [], room, 0

    def write(self, text: str) -> int:
        n = len(text)
        if self.room > 0:
            self.kept.append(text[:self.room])
            self.room -= min(n, self.room)
        self.total += n
        return n

    def flush(self) -> None:
        pass

    def writable(self) -> bool:
        return True

    def isatty(self) -> bool:
        return False


def _describe(fn: Any) -> dict:
    if fn is None:
        return {"kind": "missing"}
    if not callable(fn):
        return {"kind": "not callable", "type": type(fn).__name__[:100]}
    try:
        params = [[p.name, int(p.kind), p.default is not inspect.Parameter.empty]
                  for p in inspect.signature(fn).parameters.values()]
    except (TypeError, ValueError):
        return {"kind": "builtin", "name": str(getattr(fn, "__name__", "?"))[:100]}
    return {"kind": "function", "name": str(getattr(fn, "__name__", "?"))[:100], "params": params}


def _limits(job: dict) -> None:
    with open("/proc/self/status") as status:
        used_kb = next(int(line.split()[1]) for line in status if line.startswith("VmSize"))
    cap = used_kb * 1024 + int(job["memory_mb"]) * 2**20
    for limit, value in ((resource.RLIMIT_AS, cap), (resource.RLIMIT_FSIZE, 16 * 2**20),
                         (resource.RLIMIT_NPROC, 256), (resource.RLIMIT_CORE, 0)):
        try:
            resource.setrlimit(limit, (value, value))
        except (OSError, ValueError):
            pass
    # CPU time: ``seconds`` for the statements, then ``seconds`` more for each call
    # (``_cpu_for_call``), and never more than the whole exercise's wall-clock bound
    # (sandbox.CALLS per-call limits, stretched by the load at most 3 times)
    hard = int(job["seconds"] * 4 * 3) + 2
    try:
        resource.setrlimit(resource.RLIMIT_CPU, (int(job["seconds"]) + 2, hard))
    except (OSError, ValueError):
        pass


def _cpu_for_call(seconds: float) -> None:
    """Allow this call ``seconds`` of CPU time from now (``RLIMIT_CPU``'s soft limit;
    its hard limit, set once in ``_limits``, bounds the exercise)."""
    try:
        usage = resource.getrusage(resource.RUSAGE_SELF)
        _, hard = resource.getrlimit(resource.RLIMIT_CPU)
        soft = int(usage.ru_utime + usage.ru_stime + seconds) + 2
        resource.setrlimit(resource.RLIMIT_CPU,
                           (soft if hard == resource.RLIM_INFINITY else min(soft, hard), hard))
    except (OSError, ValueError):
        pass


def _exercise(rin: int, rout: int, job: dict) -> None:
    """The child of one exercise: run the statements, then answer calls until "end"."""
    import ast
    import linecache

    from lncourse.guard import call_learner
    from lncourse.grading.wire import WireError, decode, read_frame, send

    printed = _Printed(int(job["printed"]))
    sys.stdout = sys.stderr = printed
    try:
        _limits(job)
    except (OSError, StopIteration, ValueError):
        pass
    namespace: dict[str, Any] = {"__name__": "__main__"}
    problems = []
    for filename, source, wanted in job["cells"]:
        linecache.cache[filename] = (len(source), None, source.splitlines(True), filename)
        body = ast.parse(source, filename).body
        for index in wanted:
            try:
                exec(compile(ast.Module([body[index]], []), filename, "exec"), namespace)
            except BaseException as err:  # noqa: BLE001 (the learner's code)
                where = traceback.extract_tb(err.__traceback__)[-1]
                problems.append(f"{type(err).__name__}: {str(err)[:300]} "
                                f"({where.filename}, line {where.lineno})")
    fn = namespace.get(job["function"])
    send(rout, {"op": "ready", "problems": problems, "function": _describe(fn)})
    memory_mb = job["memory_mb"]
    while True:
        header, blobs = read_frame(rin)
        if header.get("op") == "printed":
            send(rout, {"op": "printed", "kept": "".join(printed.kept), "total": printed.total})
            continue
        if header.get("op") != "call":
            return
        name, where = str(header["name"]), str(header["where"])
        try:
            args, kwargs = decode(header["args"], blobs), decode(header["kwargs"], blobs)
            forbidden = {str(k): str(v) for k, v in header["forbidden"].items()}
            _cpu_for_call(float(job["seconds"]))
            seen = set() if header.get("watch") is True else None
            out, args, kwargs = call_learner(fn, args, kwargs, name=name, where=where,
                                             forbidden=forbidden, seen=seen)
            send(rout, {"op": "answer", "ok": True,
                        "float32": bool(seen) and "torch.float32" in map(str, seen)},
                 out=out, args=args, kwargs=kwargs)
        except NotImplementedError as err:
            send(rout, {"op": "answer", "ok": False, "type": "NotImplementedError",
                        "message": str(err)[:2000]})
        except (AssertionError, WireError, MemoryError) as err:
            message = str(err)
            if isinstance(err, MemoryError) or "can't allocate memory" in message \
                    or "out of memory" in message:
                message = (f"{name}: your function ran out of memory (the grader allows "
                           f"{memory_mb} MB) on input ({where})")
            elif isinstance(err, WireError):
                message = f"{name}: {err} (on input ({where}))"
            send(rout, {"op": "answer", "ok": False, "type": "AssertionError",
                        "message": message[:4000]})


def _warm_up() -> None:
    """Pay once, before the forks, what every exercise's child would pay again: the first
    dispatch mode (``lncourse.guard``'s operator guard) imports ``torch._dynamo`` and sympy,
    1.2 s of CPU, and the modules the chapter's exercises import (``LNCOURSE_PRELOAD``,
    set by the checker from ``Chapter.preload``)."""
    import importlib

    import torch

    from lncourse.guard import forbid
    with forbid(["aten.native_layer_norm"]):
        torch.zeros(2).add(1)
    for name in os.environ.get("LNCOURSE_PRELOAD", "").split(","):
        if name and not _blocked(name):
            try:
                importlib.import_module(name)
            except Exception:  # noqa: BLE001 (a missing optional package: the exercise says so)
                pass


def _kill_the_rest(namespace: bool, me: int) -> None:
    """Kill every process of this sandbox but this one (in a PID namespace: kill(-1))."""
    if namespace:
        try:
            os.kill(-1, signal.SIGKILL)
        except ProcessLookupError:
            pass
    else:   # the fallback: our descendants, found through /proc (we are their subreaper)
        kill_descendants(me)
    while True:
        try:
            os.waitpid(-1, 0)
        except ChildProcessError:
            return


def prepare() -> None:
    """Once per learner process, before any exercise: the checks blocked, a quiet
    environment, PyTorch imported and warmed up (``lncourse.grading.template`` does this
    once for a whole class, then forks a learner per submission)."""
    sys.meta_path.insert(0, _NoChecks())
    for name in [m for m in sys.modules if _blocked(m)]:
        del sys.modules[name]
    os.environ.update(LNCOURSE_PROGRESS="0", LNCOURSE_NO_WIDGETS="1", OMP_NUM_THREADS="1")
    import numpy  # noqa: F401  (imported once, before the forks)
    import torch

    torch.set_num_threads(1)
    _warm_up()


def _wait_exercise(pid: int, rin: int) -> int | None:
    """The exercise child's exit status, or None if the checker went away first (its end
    of the request pipe closed): then the learner's process ends too, and with it its
    sandbox (by bubblewrap's or the template's PID namespace)."""
    try:
        fd = os.pidfd_open(pid)
    except (AttributeError, OSError):
        return os.waitpid(pid, 0)[1]
    poller = select.poll()
    poller.register(fd, select.POLLIN)
    poller.register(rin, 0)              # POLLHUP: no writer left
    try:
        while True:
            for f, events in poller.poll():
                if f == fd:
                    return os.waitpid(pid, 0)[1]
                if events & (select.POLLHUP | select.POLLERR):
                    return None
    finally:
        os.close(fd)


def serve(rin: int, rout: int, namespace: bool) -> None:
    """Answer the checker: for each "run", fork a child for the exercise and, once it is
    over, kill every other process of the sandbox."""
    from lncourse.grading.wire import read_frame, send

    me = os.getpid()
    prctl(_PR_SET_DUMPABLE, 0)   # the exercises' code cannot ptrace this process or read its memory
    send(rout, {"op": "started"})
    while True:
        try:
            header, _ = read_frame(rin)
        except EOFError:
            return
        if header.get("op") != "run":
            return
        pid = os.fork()
        if pid == 0:
            code = 0
            prctl(_PR_SET_DUMPABLE, 1)   # its own /proc/self stays its own to read
            try:
                os.chdir(header.get("tmp") or "/tmp")
                _exercise(rin, rout, header)
            except BaseException:  # noqa: BLE001
                code = 1
            os._exit(code)
        status = _wait_exercise(pid, rin)
        _kill_the_rest(namespace, me)
        if status is None:
            return
        send(rout, {"op": "exited", "status": os.waitstatus_to_exitcode(status)})


def main() -> None:
    rin, rout = os.dup(0), os.dup(1)
    devnull = os.open(os.devnull, os.O_RDWR)
    for fd in (0, 1, 2):
        os.dup2(devnull, fd)
    os.close(devnull)
    prctl(PR_SET_CHILD_SUBREAPER, 1)
    prctl(_PR_SET_PDEATHSIG, signal.SIGKILL)
    from lncourse.grading import seccomp     # before prepare() blocks lncourse.grading
    prepare()
    bubblewrap = os.environ.get("LNCOURSE_SANDBOX") == "bwrap"
    if bubblewrap:      # the fallback's filter was installed before Python started
        seccomp.install()
    serve(rin, rout, bubblewrap)


if __name__ == "__main__":
    main()
