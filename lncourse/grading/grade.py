"""Grade submitted notebooks with the exercise checks.

    python -m lncourse.grading.grade SUBMISSION.ipynb [...] --out grades.csv [--feedback DIR]
                             [--timeout SECONDS] [--hidden --hidden-key KEY] [--chapter N]

Writes one row per submission to the CSV (``student_id``, ``submission``, one column per
exercise label holding its points if passed and 0 otherwise, ``total``, ``max_points``,
``flags``: ``lncourse.grading.sheet``), one Markdown file of feedback per
submission with ``--feedback`` (every failed exercise with the check's message), and
prints how many passed each exercise.

How it grades. The chapter comes from the notebook's metadata (a notebook of another
chapter than the class's is reported and not graded). The notebook's printed output is
never read. For each exercise, a fresh process runs the learner's function and only the
statements it needs (``lncourse.grading.submission``; a chapter's training never runs), under a
time limit (``--timeout``, per call: CPU time, and wall time stretched by the machine's
load) and a memory cap, and answers the check's calls
as plain data (``lncourse.grading.sandbox``); the check itself runs in another fresh process, so
nothing the learner's code does (redefining or monkeypatching a check, printing
"passed") reaches it. ``--hidden`` adds the checks' teacher-only inputs, whose random
values are drawn from a secret (``--hidden-key``).
"""

from __future__ import annotations

import contextlib
import csv
import io
import multiprocessing.connection
import os
import signal
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

from lncourse.grading.exercises import Chapter, Exercise, chapter as find_chapter
from lncourse.grading.sheet import feedback, summary, write_csv, write_lms
from lncourse.grading.submission import (Program, chapter_of_class, fingerprint, program_for,
                                         read_submission)

__all__ = ["Outcome", "Graded", "grade", "write_csv", "write_lms", "feedback", "summary",
           "student_ids", "main"]

TIMEOUT = 30.0        # seconds per exercise: a correct answer needs well under one
MEMORY_MB = 2048      # memory a learner's process may use beyond what it starts with
MARGIN = 30.0         # seconds the grader allows a check beyond the learner's time limit
STARTUP = 300.0       # and a learner's process to start (lncourse.grading.sandbox.STARTUP)


@dataclass
class Outcome:
    """One exercise of one submission."""
    passed: bool
    message: str                                   # the check's line, or why it failed
    notes: list[str] = field(default_factory=list)


@dataclass
class Graded:
    submission: str
    outcomes: dict[str, Outcome]                   # exercise label -> outcome
    notes: list[str] = field(default_factory=list)
    student_id: str = ""
    flags: list[str] = field(default_factory=list)  # for the teacher's eye: "solution edition"
    name: str = ""              # the student's name, where the LMS's download names it
    submission_name: str = ""   # the sheet's name for it (lncourse.grading.cli.submission_name)
    id_source: str = ""         # where student_id came from (lncourse.grading.cli.Identity)

    @property
    def total(self) -> int:
        return sum(o.passed for o in self.outcomes.values())

    def points(self, ch: Chapter) -> int:
        return sum(e.points for e in ch.exercises if self.outcomes[e.label].passed)


@dataclass(frozen=True)
class _Job:
    """The exercises of one submission, graded by one checker process."""
    programs: tuple[tuple[Program, Exercise], ...]
    hidden: bool
    timeout: float
    memory_mb: int
    hide: tuple[str, ...]          # the class's folders, hidden from the learner
    preload: tuple[str, ...] = ()  # modules the learner's process imports before its forks
    hidden_key: str | None = None  # the secret the teacher-only inputs are drawn from


def _bound(job: "_Job") -> float:
    """Seconds a checker may take for one exercise: its calls' bound in the sandbox
    (``sandbox.CALLS`` per-call limits, stretched by the load at most 3 times), a margin,
    and a learner's start."""
    from lncourse.grading.sandbox import CALLS
    return job.timeout * CALLS * 3 + MARGIN + STARTUP


MAX_RESULT = 2**20      # bytes: the largest result a checker may send the main grader


# ----------------------------------------------------------- one exercise, in a checker
def _grade_exercise(program: Program, exercise: Exercise, job: _Job, learner) -> Outcome:
    from lncourse import checks
    from lncourse.checks import _core
    from lncourse.grading.sandbox import Sandbox

    _core.SECONDS = job.timeout          # the checks' own limit is the grader's
    function = exercise.function
    notes: list[str] = []
    outcome, kept, total = None, "", 0
    sandbox = None
    try:
        sandbox = Sandbox(program.cells, function, job.timeout, job.memory_mb, learner)
        info = sandbox.start()
        notes += [f"running the code `{function}` needs raised {p}" for p in sandbox.problems]
        if info.get("kind") == "function":
            printed, check = io.StringIO(), getattr(checks, exercise.check)
            with contextlib.redirect_stdout(printed):
                check(sandbox.function(info), hidden=False)
                if job.hidden:     # visible inputs passed: a failure now is a hidden input's
                    try:
                        _core.HIDDEN_KEY = job.hidden_key    # the random inputs from a secret
                        check(sandbox.function(info), hidden=True)
                    except AssertionError as err:
                        raise AssertionError(f"(on a teacher-only input, which the notebook's "
                                             f"own check does not run) {err}") from None
                    finally:
                        _core.HIDDEN_KEY = None
            problem = sandbox.audit()     # the rules, read where no patch of theirs reaches
            if problem:
                raise AssertionError(f"{function}: {problem}")
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
        if sandbox is not None:
            kept, total = sandbox.printed()
            sandbox.close()
    if total > len(kept):
        notes.append(f"your code printed {total:,} characters while it was checked; only the "
                     f"first {len(kept):,} were kept")
    if kept and not outcome.passed:
        notes.append("your code printed: " + kept[:500].strip())
    outcome.notes = notes + outcome.notes
    return outcome


def _checker(job: _Job, fd: int, template=None) -> None:
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
                                  "notes": [str(n) for n in o.notes]}))
    finally:
        learner.kill()
        kill_descendants(os.getpid())


def _outcome(header: dict) -> Outcome:
    notes = header.get("notes")
    if not (isinstance(header.get("passed"), bool) and isinstance(header.get("message"), str)
            and isinstance(notes, list) and all(isinstance(n, str) for n in notes)):
        return Outcome(False, "the grader's process for this exercise sent a malformed result")
    return Outcome(header["passed"], header["message"], notes)


def _run(jobs: list[_Job], workers: int, template: bool = True) -> list[list[Outcome]]:
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


def _run_checkers(jobs: list[_Job], workers: int, template) -> list[list[Outcome]]:
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


# ----------------------------------------------------------------------- the class
READ_SECONDS = 30.0    # reading and analysing one notebook (lncourse.grading.contain.bounded)
READ_MB = 1024         # and the memory it may take


def _read(path) -> "Submission":
    """``read_submission`` in a process of its own, under a time and a memory limit."""
    from lncourse.grading.contain import Exceeded, bounded
    from lncourse.grading.submission import Submission
    try:
        return bounded(read_submission, path, seconds=READ_SECONDS, memory_mb=READ_MB)
    except Exceeded as err:
        sub = Submission(Path(path))
        sub.refused = f"reading this notebook went over {err}"
        sub.notes.append(f"reading this notebook went over {err}; nothing was graded")
        return sub


def _programs(sub, ch: Chapter, g: "Graded") -> list:
    """``program_for`` of every exercise, in a process of its own under the same limits;
    flags a solution edition recognised by its code (``lncourse.grading.solutions``)."""
    from lncourse.grading import solutions
    from lncourse.grading.contain import Exceeded, bounded

    functions = [e.function for e in ch.exercises]

    def analyse():
        return ([program_for(sub, e) for e in ch.exercises],
                solutions.matches(sub.sources, ch.stem, functions))
    try:
        programs, same = bounded(analyse, seconds=READ_SECONDS, memory_mb=READ_MB)
        if solutions.flagged(same, functions) and "solution edition" not in g.flags:
            g.flags.append("solution edition")
            g.notes.append("FLAGGED: the functions " + ", ".join(f"`{f}`" for f in same)
                           + " are the course's solution's, line for line (names of "
                           "variables aside): this is the solution edition")
        return programs
    except Exceeded as err:
        problem = f"analysing this notebook went over {err}; nothing was graded"
        g.notes.append(problem)
        return [(None, problem)] * len(ch.exercises)


def grade(paths: list[str | Path], *, chapter: str | int | None = None, hidden: bool = False,
          timeout: float = TIMEOUT, memory_mb: int = MEMORY_MB,
          workers: int | None = None, roster: dict[str, str] | None = None,
          id_pattern: str | None = None, template: bool = True,
          id_from_metadata: bool = False, ready=None,
          hidden_key: str | None = None) -> tuple[Chapter, list[Graded]]:
    """Grade the submissions; returns the class's chapter and one ``Graded`` each.

    The student ID of a submission: see ``lncourse.grading.cli.student_ids`` (a roster,
    ``id_pattern``, the LMS's download naming; the notebook's metadata only with
    ``id_from_metadata``). ``ready(ch, graded)`` is called once the chapter and the IDs
    are known, before any exercise runs (the command line refuses a wrong sheet there).
    Submissions whose graded code is the same (``submission.fingerprint``) and earns
    points are flagged. ``template=False``
    starts every learner's process afresh instead of forking it from a template (the
    grader's path before the template; ``benchmarks/grading_speed.py`` compares them)."""
    import math
    if not (isinstance(timeout, (int, float)) and math.isfinite(timeout) and timeout > 0):
        raise ValueError(f"timeout must be a finite number of seconds > 0, not {timeout!r}")
    if workers is not None and (not isinstance(workers, int) or workers < 1):
        raise ValueError(f"workers must be an integer >= 1, not {workers!r}")
    if hidden and not hidden_key:   # the command line asks the teacher for one
        import secrets
        hidden_key = secrets.token_hex(16)
    submissions = [_read(p) for p in paths]
    from lncourse.grading.cli import student_ids, submission_name
    ids = student_ids(paths, submissions, roster, id_pattern, id_from_metadata)
    ch = find_chapter(chapter) if chapter is not None else chapter_of_class(submissions)
    if ch is None:
        raise SystemExit("none of the submissions names a chapter; pass --chapter N")
    graded, jobs, where, prints = [], [], [], []
    hide = tuple(sorted({str(Path(p).resolve().parent) for p in paths}))
    for path, sub in zip(paths, submissions):
        who = ids[str(path)]
        g = Graded(str(path), {}, list(sub.notes), who.id,
                   (["solution edition"] if sub.solution_edition else [])
                   + ([f"refused: {sub.refused}"] if sub.refused else []) + who.flags,
                   who.name, submission_name(path), who.source)
        graded.append(g)
        if sub.chapter is None or sub.chapter.stem != ch.stem:
            if sub.chapter is not None:
                g.notes.append(f"this notebook is chapter {sub.chapter.number}'s "
                               f"({sub.chapter.stem}), not chapter {ch.number}'s: not graded")
            for e in ch.exercises:
                g.outcomes[e.label] = Outcome(False, "not graded (see the notes)")
            continue
        programs = []
        for e, (program, problem) in zip(ch.exercises, _programs(sub, ch, g)):
            if program is None:
                g.outcomes[e.label] = Outcome(False, problem)
            else:
                programs.append((program, e))
        prints.append((g, fingerprint(p for p, _ in programs)))
        if programs:
            jobs.append(_Job(tuple(programs), hidden, timeout, memory_mb, hide, ch.preload,
                             hidden_key))
            where.append(g)
    if ready is not None:
        ready(ch, graded)
    for g, job, outcomes in zip(where, jobs, _run(jobs, workers or min(2 * (os.cpu_count() or 1), 4), template)):
        for (_, e), outcome in zip(job.programs, outcomes):
            g.outcomes[e.label] = outcome
    for g in graded:   # keep the chapter's order
        g.outcomes = {e.label: g.outcomes[e.label] for e in ch.exercises}
    same: dict[str, list[Graded]] = {}
    for g, key in prints:
        if key is not None and g.points(ch) > 0:
            same.setdefault(key, []).append(g)
    for group in (group for group in same.values() if len(group) > 1):
        for g in group:
            others = ", ".join(o.submission_name for o in group if o is not g)
            g.flags.append(f"identical code to {others[:300]}")
    return ch, graded


def main(argv: list[str] | None = None) -> int:
    from lncourse.grading import cli as grade_cli
    from lncourse.grading.contain import guarantees

    parser = grade_cli.parser(__doc__, TIMEOUT, MEMORY_MB)
    args = parser.parse_args(argv)
    grade_cli.check(parser, args)
    print(guarantees(not args.fresh_learners))
    start = time.monotonic()
    ch, graded = grade(args.submissions, chapter=args.chapter, hidden=args.hidden,
                       timeout=args.timeout, memory_mb=args.memory_mb, workers=args.workers,
                       roster=getattr(args, "roster_ids", None), id_pattern=args.id_pattern,
                       template=not args.fresh_learners, id_from_metadata=args.id_from_metadata,
                       ready=grade_cli.before_grading(args), hidden_key=args.hidden_key)
    grade_cli.write_outputs(ch, graded, args)
    print(summary(ch, graded, time.monotonic() - start, args.hidden))
    return 0


if __name__ == "__main__":
    sys.exit(main())
