"""Running a learner's code in a process of its own, for the autograder.

``Learner`` starts one learner's process for a submission (``lncourse.grading.learner``:
a fresh interpreter, contained by ``lncourse.grading.contain``), and ``Sandbox`` runs
one exercise in it: the statements the learner's function needs, under a time limit and
a memory cap, then the calls of the check. ``Sandbox.function`` returns a stand-in for
the learner's function that the checks call like any function
(``lncourse.guard.call_learner`` knows it): the arguments go to the learner's
process, the answer comes back.

Nothing the learner's code does reaches the process that runs the check: the learner's
process is not a fork of it and holds only its own two pipes; messages are plain data
in bounded frames (``lncourse.grading.wire``: JSON and array bytes, never pickles),
whose size the checker limits as it reads them.
"""

from __future__ import annotations

import inspect
import os
import select
import shutil
import signal
import subprocess
import tempfile
import time
from pathlib import Path
from typing import Any

from lncourse.grading.contain import (Cgroup, bwrap, fallback_preexec, kill_descendants,
                                      learner_command, readable)
from lncourse.guard import timeout_message
from lncourse.grading.wire import MAX_FRAME, WireError, decode, read_frame, send

MAX_ANSWER_BYTES = MAX_FRAME       # an answer larger than this is refused
MAX_PRINTED = 2000                 # characters of printed output kept
STARTUP = 300.0                    # seconds a learner's process may take to import PyTorch
STARTUP_MB = 3072                  # memory it may take to do so (its cgroup's limit until then)


CALLS = 4      # the calls of one exercise together: at most this many per-call limits


def load_factor() -> float:
    """How much slower than alone a process runs now: the load average over a minute per
    core, at least 1 and at most 3 (the wall-clock limits are stretched by it; the CPU
    time limit needs no stretching)."""
    try:
        return min(max(os.getloadavg()[0] / (os.cpu_count() or 1), 1.0), 3.0)
    except OSError:
        return 1.0


class Learner:
    """One submission's learner process (started on first use, restarted after a kill)."""

    def __init__(self, hide: list[Path] = (), preload: tuple[str, ...] = (), template=None):
        self.hide, self.preload = list(hide), tuple(preload)
        self.template = template     # a running lncourse.grading.template.Template, or None
        self.process: subprocess.Popen | None = None
        self.tmp: str | None = None
        self.fallback = False
        self.cgroup: Cgroup | None = None
        self.memory_mb = self.base = self.oom_before = 0

    def ensure(self, memory_mb: int = 2048) -> subprocess.Popen:
        """The learner's process, started if need be; ``memory_mb``: the memory all its
        processes and temporary files may use together beyond what it starts with."""
        if self.process is None or self.process.poll() is not None:
            self.kill()
            self.cgroup = Cgroup.create()
            if self.cgroup is not None:
                self.cgroup.set_limit((STARTUP_MB + memory_mb) * 2**20)
            if self.template is not None:     # forked, ready, from the class's template
                self.process, self.fallback = self.template.fork(
                    self.cgroup.procs() if self.cgroup else (), memory_mb), False
                self._started()
                self.bound(memory_mb)
                return self.process
            argv, env = learner_command(self.hide)
            env["LNCOURSE_PRELOAD"] = ",".join(self.preload)
            fallback = bwrap() is None
            preexec = None
            if fallback:
                self.tmp = tempfile.mkdtemp(prefix="lncourse-grade-")
                env.update(HOME=self.tmp, TMPDIR=self.tmp)
                preexec = fallback_preexec(readable(), [self.tmp, os.devnull], self.tmp,
                                           memory_mb, self.cgroup.procs() if self.cgroup else ())
            elif self.cgroup is not None:
                procs = self.cgroup.procs()
                preexec = lambda: [open(p, "w").write(str(os.getpid())) for p in procs]  # noqa: E731
            self.process = subprocess.Popen(
                argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
                env=env, close_fds=True, cwd=self.tmp or "/", preexec_fn=preexec, bufsize=0)
            self.fallback = fallback
            self._started()
        self.bound(memory_mb)
        return self.process

    def bound(self, memory_mb: int) -> None:
        """One memory limit for the learner's processes and files: what it started with
        plus ``memory_mb`` (its cgroup's; without one, each process's rlimits)."""
        if self.cgroup is not None:
            self.cgroup.set_limit(self.base + memory_mb * 2**20)
        self.memory_mb = memory_mb
        self.oom_before = self.cgroup.oom_kills() if self.cgroup else 0

    def over_limit(self) -> bool:
        """Whether the kernel killed one of its processes for the memory limit."""
        return self.cgroup is not None and self.cgroup.oom_kills() > self.oom_before

    def _started(self) -> None:
        """Wait until the learner's process has imported PyTorch (not counted in any
        exercise's time limit; ``STARTUP`` seconds at most)."""
        out = self.process.stdout.fileno()
        ready, _, _ = select.select([out], [], [], STARTUP)
        try:
            header, _ = read_frame(out, 4096) if ready else ({}, [])
        except (EOFError, WireError):
            header = {}
        if header.get("op") != "started":
            self.kill()
            raise AssertionError("the grader could not start a process for your code "
                                 f"within {STARTUP:.0f} s (is the machine overloaded?)")
        self.base = self.cgroup.usage() if self.cgroup is not None else 0

    def kill(self) -> None:
        p, self.process = self.process, None
        if p is not None:
            if p.poll() is None:
                if self.fallback:
                    kill_descendants(p.pid)
                try:
                    os.killpg(p.pid, signal.SIGKILL) if self.fallback else p.kill()
                except (ProcessLookupError, PermissionError):
                    p.kill()
            p.wait()
            for stream in (p.stdin, p.stdout):
                stream.close()
        if self.cgroup is not None:
            self.cgroup.close()
            self.cgroup = None
        if self.tmp:
            shutil.rmtree(self.tmp, ignore_errors=True)
            self.tmp = None

    close = kill


class Sandbox:
    """One exercise in ``learner``: the statements ``cells`` select, then ``function``.

    ``cells``: (file name, source, indices of the top-level statements to run), in order.
    Running those statements, and each call, must finish within ``seconds`` of CPU time
    (the learner's ``RLIMIT_CPU``, reset at each call) and ``seconds`` times the machine's
    load per core (``load_factor``, at least 1) of wall time; all of them together within
    ``CALLS`` times that. The process may use ``memory_mb`` megabytes beyond what it
    starts with.
    """

    def __init__(self, cells, function: str, seconds: float, memory_mb: int = 2048,
                 learner: Learner | None = None):
        self.function_name, self.limit, self.memory_mb = function, seconds, memory_mb
        self.cells = [(str(f), str(s), list(ix)) for f, s, ix in cells]
        self.forbidden: dict[str, str] = {}     # the calls the check's rules forbade
        self.learner = learner or Learner()
        self._own = learner is None
        process = self.learner.ensure(memory_mb)
        self.deadline = time.monotonic() + seconds * load_factor()
        self.end = time.monotonic() + CALLS * seconds * load_factor()
        self._in, self._out = process.stdin.fileno(), process.stdout.fileno()
        self.problems: list[str] = []
        self.timed_out = self.ended = False
        send(self._in, {"op": "run", "cells": [[f, s, list(ix)] for f, s, ix in cells],
                        "function": function, "memory_mb": memory_mb, "seconds": seconds,
                        "printed": MAX_PRINTED, "tmp": self.learner.tmp})

    def _stopped(self, name: str, where: str | None, how: str) -> AssertionError:
        self.ended = True
        if self.learner.over_limit():
            how = (f"it went over the memory limit of {self.memory_mb} MB, which holds for "
                   "all of its processes and the files it writes together")
        return AssertionError(f"{name}: the process running your code stopped ({how}) "
                              + (f"on input ({where})" if where else "while running the "
                                 "cells your function needs"))

    def _wait(self, name: str, where: str | None, want: str) -> tuple[dict, list]:
        left = max(self.deadline - time.monotonic(), 0.0)
        ready, _, _ = select.select([self._out], [], [], left)
        if not ready:
            self.timed_out = True
            self.learner.kill()
            if where is None:
                raise AssertionError(f"{name}: running the cells your function needs did not "
                                     f"finish within the time limit of {self.limit:.2g} s")
            if self.deadline >= self.end:
                raise AssertionError(
                    f"{name}: stopped on input ({where}): the calls of your function "
                    f"together ran past {CALLS} times the time limit of {self.limit:.2g} s "
                    "per call")
            raise AssertionError(timeout_message(name, self.limit, where))
        try:
            header, blobs = read_frame(self._out, MAX_ANSWER_BYTES)
        except EOFError:
            if self.learner.template is None:
                try:
                    self.learner.process.wait(5)
                except subprocess.TimeoutExpired:
                    pass
            stopped = self._stopped(name, where, "it exited")
            self.learner.kill()
            raise stopped from None
        except WireError as err:
            self.learner.kill()
            raise AssertionError(f"{name}: your function's answer was refused ({err})"
                                 + (f" on input ({where})" if where else "")) from None
        if header.get("op") == "exited" and header.get("status") == -signal.SIGXCPU and where:
            self.ended = True
            raise AssertionError(timeout_message(name, self.limit, where)
                                 + f" (it used {self.limit:.2g} s of CPU time)")
        if header.get("op") == "exited":
            code = header.get("status")
            how = (f"killed by signal {-code}" + (" (perhaps out of memory)" if code == -9
                                                  else " (CPU time limit)" if code == -24 else "")
                   if isinstance(code, int) and code < 0 else f"exit code {code}")
            raise self._stopped(name, where, how)
        if header.get("op") != want:
            self.learner.kill()
            raise AssertionError(f"{name}: the process running your code sent a message out "
                                 "of turn" + (f" on input ({where})" if where else ""))
        return header, blobs

    def start(self) -> dict:
        """Wait for the needed statements to run; returns what ``function`` is."""
        header, _ = self._wait(self.function_name, None, "ready")
        problems, info = header.get("problems"), header.get("function")
        self.problems = [str(p)[:500] for p in problems] if isinstance(problems, list) else []
        return info if isinstance(info, dict) else {"kind": "missing"}

    def audit(self) -> str | None:
        """The forbidden-call rules of every call so far, checked on the statements this
        exercise ran, here, where the submission's code never ran
        (``lncourse.grading.audit``): a sentence for the first breach, or None. The
        learner's process stops a forbidden call too, but its code could switch that off."""
        if not self.forbidden:
            return None
        from lncourse.grading.audit import audit
        return audit(self.cells, self.forbidden)

    def function(self, info: dict) -> "RemoteFunction":
        return RemoteFunction(self, info)

    def printed(self) -> tuple[str, int]:
        """What the learner's code printed: (the first MAX_PRINTED characters, total)."""
        if self.ended or self.timed_out or self.learner.process is None:
            return "", 0
        try:
            send(self._in, {"op": "printed"})
            self.deadline = max(self.deadline, time.monotonic() + 5)
            header, _ = self._wait(self.function_name, "", "printed")
            kept, total = header.get("kept"), header.get("total")
            if isinstance(kept, str) and type(total) is int:
                return kept[:MAX_PRINTED], total
        except (AssertionError, OSError):
            pass
        return "", 0

    def close(self) -> None:
        """End the exercise: the learner's child and everything it started are killed."""
        if self.learner.process is None or self.timed_out:
            return
        if not self.ended:
            try:
                send(self._in, {"op": "end"})
                self.deadline = time.monotonic() + 10
                while True:     # until the learner's process reports the exercise over
                    try:
                        self._wait(self.function_name, None, "exited")
                    except AssertionError:
                        break
            except OSError:
                self.learner.kill()
        if self._own:
            self.learner.kill()


class RemoteFunction:
    """Stands in for the learner's function: same name and signature, runs remotely."""

    def __init__(self, sandbox: Sandbox, info: dict):
        self._sandbox = sandbox
        self.__name__ = str(info.get("name", "?"))
        try:
            self.__signature__ = inspect.Signature([
                inspect.Parameter(str(name), inspect._ParameterKind(int(kind)),
                                  default=None if has_default else inspect.Parameter.empty)
                for name, kind, has_default in info["params"]])
        except (TypeError, ValueError, KeyError):
            self.__signature__ = inspect.Signature([])

    def __call__(self, *args, **kwargs):
        return self.lncourse_call(args, kwargs, name=self.__name__, where="a direct call")[0]

    def lncourse_call(self, args: tuple, kwargs: dict, *, name: str, where: str,
                      forbidden: dict | None = None, seconds: float | None = None,
                      limit: float | None = None,
                      seen: set | None = None) -> tuple[Any, tuple, dict]:
        """``call_learner`` for a function in the sandbox; the sandbox's deadline applies.
        ``seen`` gets float32 where the learner's process says the call made a float32
        tensor (a hint's evidence only: nothing is graded by it)."""
        sandbox = self._sandbox
        if sandbox.ended or sandbox.timed_out:
            raise AssertionError(f"{name}: the process running your code has stopped")
        sandbox.forbidden.update(forbidden or {})    # for ``Sandbox.audit``
        sandbox.deadline = min(time.monotonic() + sandbox.limit * load_factor(), sandbox.end)
        send(sandbox._in, {"op": "call", "name": name, "where": where,
                           "forbidden": dict(forbidden or {}), "watch": seen is not None},
             args=tuple(args), kwargs=dict(kwargs))
        header, blobs = sandbox._wait(name, where, "answer")
        if not header.get("ok"):
            error = (NotImplementedError if header.get("type") == "NotImplementedError"
                     else AssertionError)
            raise error(str(header.get("message", ""))[:4000])
        if seen is not None and header.get("float32") is True:
            import torch
            seen.add(torch.float32)
        try:
            used: set = set()
            return (decode(header["out"], blobs, used), decode(header["args"], blobs, used),
                    decode(header["kwargs"], blobs, used))
        except (WireError, KeyError) as err:
            raise AssertionError(f"{name}: your function's answer was refused ({err}) on "
                                 f"input ({where})") from None
