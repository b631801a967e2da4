"""The grader's bounds on its own processes (beside :mod:`lncourse.grading.contain`, which
bounds the learner's): the checking process's memory (:func:`limit_checker`), a piece of
the grader's own work in a forked process under a time and a memory limit
(:func:`bounded`, :class:`Exceeded`), and every descendant of a process killed
(:func:`kill_descendants`)."""

from __future__ import annotations

import os
import signal

__all__ = ["CHECKER_MB", "limit_checker", "Exceeded", "bounded", "descendants",
           "kill_descendants"]


CHECKER_MB = 3072        # memory the checking process may use beyond what it starts with


def limit_checker(memory_mb: int = CHECKER_MB) -> None:
    """Bound the calling process's address space (a soft limit: the learners it starts
    raise it back before they run)."""
    import resource

    with open("/proc/self/status") as status:
        used_kb = next(int(line.split()[1]) for line in status if line.startswith("VmSize"))
    hard = resource.getrlimit(resource.RLIMIT_AS)[1]
    cap = used_kb * 1024 + memory_mb * 2**20
    if hard != resource.RLIM_INFINITY:
        cap = min(cap, hard)
    resource.setrlimit(resource.RLIMIT_AS, (cap, hard))


class Exceeded(Exception):
    """A bounded piece of work broke its time or memory limit (the message names it)."""


def bounded(fn, *args, seconds: float, memory_mb: int):
    """``fn(*args)`` in a forked process under a time limit and a memory limit; returns
    its result (which must pickle: our own code's result, never a submission's code's).
    Raises ``Exceeded`` naming the limit broken; the exception ``fn`` raised otherwise."""
    import pickle
    import resource
    import select
    import time

    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:
        code = 0
        try:
            os.close(read)
            with open("/proc/self/status") as status:
                used_kb = next(int(line.split()[1]) for line in status
                               if line.startswith("VmSize"))
            cap = used_kb * 1024 + memory_mb * 2**20
            resource.setrlimit(resource.RLIMIT_AS, (cap, resource.getrlimit(resource.RLIMIT_AS)[1]))
            try:
                data = pickle.dumps(("ok", fn(*args)))
            except MemoryError:
                data = pickle.dumps(("memory", None))
            except BaseException as err:  # noqa: BLE001
                data = pickle.dumps(("error", err))
            view = memoryview(data)
            while view:
                view = view[os.write(write, view):]
        except BaseException:  # noqa: BLE001
            code = 1
        os._exit(code)
    os.close(write)
    chunks, deadline, timed_out = [], time.monotonic() + seconds, False
    try:
        while True:
            left = deadline - time.monotonic()
            if left <= 0 or not select.select([read], [], [], left)[0]:
                timed_out = True
                break
            chunk = os.read(read, 1 << 20)
            if not chunk:
                break
            chunks.append(chunk)
    finally:
        os.close(read)
        if timed_out:
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        os.waitpid(pid, 0)
    if timed_out:
        raise Exceeded(f"the time limit of {seconds:g} s")
    try:
        kind, value = pickle.loads(b"".join(chunks))
    except Exception:  # noqa: BLE001 (killed before it could answer: out of memory)
        raise Exceeded(f"the memory limit of {memory_mb} MB") from None
    if kind == "memory":
        raise Exceeded(f"the memory limit of {memory_mb} MB")
    if kind == "error":
        raise value
    return value


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
