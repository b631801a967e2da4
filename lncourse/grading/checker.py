"""One submission's exercises graded in a checker process of its own (the grader,
:mod:`lncourse.grading.grade`, runs one per submission, a few at a time): the check runs
there, the learner's function in a sandboxed process it starts
(:mod:`lncourse.grading.sandbox`), and each exercise's :class:`Outcome` comes back to the
grader as one JSON frame."""

from __future__ import annotations

import contextlib
import io
import multiprocessing.connection
import os
import signal
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

from lncourse.grading.exercises import Exercise
from lncourse.grading.submission import Program

__all__ = ["Outcome", "MARGIN", "STARTUP", "MAX_RESULT"]

MARGIN = 30.0         # seconds the grader allows a check beyond the learner's time limit
STARTUP = 300.0       # and a learner's process to start (lncourse.grading.sandbox.STARTUP)


@dataclass
class Outcome:
    """One exercise of one submission."""
    passed: bool
    message: str                                   # the check's line, or why it failed
    notes: list[str] = field(default_factory=list)
    score: float | None = None     # partial credit: the share of inputs passed (0 to 1)
    pending: bool = False          # a written answer not yet marked


@dataclass(frozen=True)
class Job:
    """The exercises of one submission, graded by one checker process."""
    programs: tuple[tuple[Program, Exercise], ...]
    hidden: bool
    timeout: float
    memory_mb: int
    hide: tuple[str, ...]          # the class's folders, hidden from the learner
    preload: tuple[str, ...] = ()  # modules the learner's process imports before its forks
    hidden_key: str | None = None  # the secret the teacher-only inputs are drawn from


def _bound(job: "Job") -> float:
    """Seconds a checker may take for one exercise: its calls' bound in the sandbox
    (``sandbox.CALLS`` per-call limits, stretched by the load at most 3 times), a margin,
    and a learner's start."""
    from lncourse.grading.sandbox import CALLS
    return job.timeout * CALLS * 3 + MARGIN + STARTUP


MAX_RESULT = 2**20      # bytes: the largest result a checker may send the main grader


# ----------------------------------------------------------- one exercise, in a checker
def _grade_exercise(program: Program, exercise: Exercise, job: Job, learner) -> Outcome:
    from lncourse import checks
    from lncourse.grading.sandbox import Sandbox

    # the checks' own limit is the grader's; a stub's NotImplementedError goes through
    # (a notebook's check prints "not done yet" and returns: here it must score 0)
    checks.configure(seconds=job.timeout, unfinished="raise")
    function = exercise.function
    teacher = getattr(exercise, "teacher", None)   # a teacher's exercise (grading.teacher)
    tally = [] if getattr(exercise, "partial", False) else None
    checks.configure(tally=tally)                  # partial credit: every input recorded
    notes: list[str] = []
    outcome, kept, total = None, "", 0
    sandbox, secret = None, False

    try:
        sandbox = Sandbox(program.cells, function, job.timeout, job.memory_mb, learner)
        info = sandbox.start()
        notes += [f"running the code `{function}` needs raised {p}" for p in sandbox.problems]
        if info.get("kind") == "function":
            printed = io.StringIO()
            check = teacher.check if teacher is not None else getattr(checks, exercise.check)
            with contextlib.redirect_stdout(printed):
                check(sandbox.function(info), hidden=False)
                # partial credit: the hidden pass runs every input again, the visible
                # ones and the teacher-only ones, and its tally is the one counted
                visible = list(tally) if tally is not None else []
                if job.hidden and tally is not None:
                    tally.clear()
                if job.hidden:     # visible inputs passed: a failure now is a hidden input's
                    try:
                        # the random inputs drawn from a secret
                        secret = True     # what the code prints now could hold them
                        checks.configure(hidden_key=job.hidden_key)
                        check(sandbox.function(info), hidden=True)
                    except AssertionError as err:
                        raise AssertionError(f"(on a teacher-only input, which the notebook's "
                                             f"own check does not run) {err}") from None
                    finally:
                        checks.configure(hidden_key=None)
            problem = sandbox.audit()     # the rules, read where no patch of theirs reaches
            if problem:
                raise AssertionError(f"{function}: {problem}")
            hidden_counted = job.hidden and bool(tally)
            if tally is not None and not tally:   # a hidden pass that adds no input
                tally.extend(visible)             # (a teacher's exercise)
            failed = [m for ok, m in tally or () if not ok]
            if failed:                    # partial credit: the share of inputs passed
                right = len(tally) - len(failed)
                first = next((m for ok, m in visible if not ok), None) or (
                    f"(on a teacher-only input, which the notebook's own check does not "
                    f"run) {failed[0]}" if hidden_counted else failed[0])
                outcome = Outcome(False, f"{first} ({len(failed)} of {len(tally)} "
                                         f"inputs failed; partial credit for the "
                                         f"{right} passed)"[:4000], score=right / len(tally))
            else:
                outcome = Outcome(True, printed.getvalue().strip().splitlines()[-1][:1000])
        elif info.get("kind") == "not callable":
            outcome = Outcome(False, f"`{function}` is a {info.get('type')}, not a function")
        elif info.get("kind") == "builtin":
            outcome = Outcome(False, f"`{function}` is the built-in {info.get('name')}; write "
                                     f"your own function, def {function}(...)")
        else:
            outcome = Outcome(False, f"`{function}` is not defined once the cells it needs "
                                     "have run")
    except NotImplementedError:
        outcome = Outcome(False, "not done: the function still raises NotImplementedError "
                                 "(the stub)")
    except AssertionError as err:
        outcome = Outcome(False, str(err)[:4000])
    except Exception as err:  # a fault of the grader's, not of the learner's
        outcome = Outcome(False, f"the grader could not check this exercise "
                                 f"({type(err).__name__}: {str(err)[:500]})")
    finally:
        checks.configure(tally=None)
        if sandbox is not None:
            kept, total = sandbox.printed()
            sandbox.close()
    if total > len(kept):
        notes.append(f"your code printed {total:,} characters while it was checked; only the "
                     f"first {len(kept):,} were kept")
    if kept and not outcome.passed and secret:
        notes.append(f"your code printed {total:,} characters; not shown, since it ran "
                     "on the teacher-only inputs")
    elif kept and not outcome.passed:
        notes.append("your code printed: " + kept[:500].strip())
    outcome.notes = notes + outcome.notes
    return outcome


def _checker(job: Job, fd: int, template=None) -> None:
    """The process that grades one submission: one JSON frame per exercise to ``fd``."""
    import ctypes

    import torch

    from lncourse.grading.sandbox import Learner
    from lncourse.grading.contain import kill_descendants, limit_checker
    from lncourse.grading.wire import pack, write_frame

    os.setpgid(0, 0)
    libc = ctypes.CDLL(None)
    libc.prctl(36, 1, 0, 0, 0)     # PR_SET_CHILD_SUBREAPER: orphans of the learner come here
    libc.prctl(4, 0, 0, 0, 0)      # PR_SET_DUMPABLE 0: no ptrace, no /proc/<pid>/mem or fd
    torch.set_num_threads(1)       # processes run side by side: one core each
    limit_checker()                # what it decodes and checks is bounded too
    learner = Learner([Path(h) for h in job.hide], job.preload, template)
    try:
        for k, (program, exercise) in enumerate(job.programs):
            o = _grade_exercise(program, exercise, job, learner)
            write_frame(fd, pack({"k": k, "passed": bool(o.passed), "message": o.message,
                                  "notes": [str(n) for n in o.notes],
                                  "score": None if o.score is None else float(o.score)}))
    finally:
        learner.kill()
        kill_descendants(os.getpid())


def _outcome(header: dict) -> Outcome:
    notes = header.get("notes")
    if not (isinstance(header.get("passed"), bool) and isinstance(header.get("message"), str)
            and isinstance(notes, list) and all(isinstance(n, str) for n in notes)):
        return Outcome(False, "the grader's process for this exercise sent a malformed result")
    score = header.get("score")
    if score is not None and not (type(score) is float and 0.0 <= score <= 1.0):
        return Outcome(False, "the grader's process for this exercise sent a malformed result")
    return Outcome(header["passed"], header["message"], notes, score)


def run_jobs(jobs: list[Job], workers: int, template: bool = True) -> list[list[Outcome]]:
    """Grade every job (a submission's exercises) in a checker of its own, ``workers`` at a
    time. A checker is a fork of this process (which holds nothing a learner could reach);
    its results arrive as JSON frames of at most ``MAX_RESULT`` bytes. With ``template``
    (and bubblewrap), every learner is forked from one pre-started template
    (``lncourse.grading.template``); otherwise each starts afresh."""
    from lncourse.grading.contain import bwrap
    from lncourse.grading.template import Template

    started = (Template.start(jobs[0].hide, jobs[0].preload, STARTUP)
               if template and jobs else None)
    if template and jobs and started is None and bwrap() is not None:
        print("note: the learners' template did not start; each submission's learner "
              "starts afresh (slower)", file=sys.stderr)
    try:
        return _run_checkers(jobs, workers, started)
    finally:
        if started is not None:
            started.close()


def _run_checkers(jobs: list[Job], workers: int, template) -> list[list[Outcome]]:
    import multiprocessing

    from lncourse.grading.contain import kill_descendants
    from lncourse.grading.wire import WireError, read_frame

    from lncourse import checks  # noqa: F401  (imported once here: each checker is a fork)

    context = multiprocessing.get_context("fork")
    results: dict[int, dict[int, Outcome]] = {i: {} for i in range(len(jobs))}
    pending = list(enumerate(jobs))
    running: dict[int, tuple] = {}
    while pending or running:
        while pending and len(running) < workers:
            i, job = pending.pop(0)
            receive, send = os.pipe()
            process = context.Process(target=_checker, args=(job, send, template))
            process.start()
            os.close(send)
            running[i] = [process, receive, time.monotonic() + _bound(job)]
        ready = multiprocessing.connection.wait(
            [r for _, r, _ in running.values()], timeout=1.0)
        for i, entry in list(running.items()):
            process, receive, deadline = entry
            job, done = jobs[i], results[i]
            failure = None
            if receive in ready:
                try:
                    header, _ = read_frame(receive, MAX_RESULT)
                    k = header.get("k")
                    if type(k) is int and 0 <= k < len(job.programs) and k not in done:
                        done[k] = _outcome(header)
                        entry[2] = time.monotonic() + _bound(job)
                except EOFError:
                    failure = ("the grader's process for this exercise stopped "
                               f"(exit code {process.exitcode})")
                except WireError as err:
                    failure = f"the grader's process for this exercise sent a bad result ({err})"
            elif time.monotonic() > deadline:
                failure = (f"grading this exercise took more than {_bound(job):.0f} s "
                           "and was stopped")
            if failure is None and len(done) < len(job.programs):
                continue
            for k in range(len(job.programs)):
                done.setdefault(k, Outcome(False, failure or "not graded"))
            if failure is None:      # let it clean up (its learner, its folder) first
                process.join(10)
            kill_descendants(process.pid)
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(process.pid, signal.SIGKILL)
            process.join(5)
            os.close(receive)
            del running[i]
    return [[results[i][k] for k in range(len(job.programs))] for i, job in enumerate(jobs)]
