"""Grade submitted notebooks with the exercise checks.

    python -m lncourse.grade SUBMISSION.ipynb [...] --out grades.csv [--feedback DIR]
                             [--timeout SECONDS] [--hidden] [--chapter N]

Writes one row per submission to the CSV (``submission``, one column per exercise label
holding 1 if passed and 0 otherwise, ``total``), one Markdown file of feedback per
submission with ``--feedback`` (every failed exercise with the check's message), and
prints how many passed each exercise.

How it grades. The chapter comes from the notebook's metadata (a notebook of another
chapter than the class's is reported and not graded). The notebook's printed output is
never read. For each exercise, a fresh process runs the learner's function and only the
statements it needs (``lncourse.submission``; a chapter's training never runs), under a
time limit (``--timeout``, per exercise) and a memory cap, and answers the check's calls
as plain data (``lncourse.sandbox``); the check itself runs in another fresh process, so
nothing the learner's code does (redefining or monkeypatching a check, printing
"passed") reaches it. ``--hidden`` adds the checks' teacher-only inputs.
"""

from __future__ import annotations

import argparse
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

from .exercises import Chapter, Exercise, chapter as find_chapter
from .submission import Program, chapter_of_class, program_for, read_submission

__all__ = ["Outcome", "Graded", "grade", "write_csv", "feedback", "summary", "main"]

TIMEOUT = 60.0        # seconds per exercise
MEMORY_MB = 2048      # memory a learner's process may use beyond what it starts with
MARGIN = 30.0         # seconds the grader allows a check beyond the learner's time limit


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

    @property
    def total(self) -> int:
        return sum(o.passed for o in self.outcomes.values())


@dataclass(frozen=True)
class _Job:
    """The exercises of one submission, graded by one checker process."""
    programs: tuple[tuple[Program, Exercise], ...]
    hidden: bool
    timeout: float
    memory_mb: int
    hide: tuple[str, ...]          # the class's folders, hidden from the learner


MAX_RESULT = 2**20      # bytes: the largest result a checker may send the main grader


# ----------------------------------------------------------- one exercise, in a checker
def _grade_exercise(program: Program, exercise: Exercise, job: _Job, learner) -> Outcome:
    from . import checks
    from .checks import _core
    from .sandbox import Sandbox

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
            printed = io.StringIO()
            with contextlib.redirect_stdout(printed):
                getattr(checks, exercise.check)(sandbox.function(info), hidden=job.hidden)
            outcome = Outcome(True, printed.getvalue().strip()[:1000])
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


def _checker(job: _Job, fd: int) -> None:
    """The process that grades one submission: one JSON frame per exercise to ``fd``."""
    import ctypes

    import torch

    from .sandbox import Learner
    from .sandbox_contain import kill_descendants
    from .sandbox_wire import pack, write_frame

    os.setpgid(0, 0)
    libc = ctypes.CDLL(None)
    libc.prctl(36, 1, 0, 0, 0)     # PR_SET_CHILD_SUBREAPER: orphans of the learner come here
    libc.prctl(4, 0, 0, 0, 0)      # PR_SET_DUMPABLE 0: no ptrace, no /proc/<pid>/mem or fd
    torch.set_num_threads(1)       # processes run side by side: one core each
    learner = Learner([Path(h) for h in job.hide])
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


def _run(jobs: list[_Job], workers: int) -> list[list[Outcome]]:
    """Grade every job (a submission's exercises) in a checker of its own, ``workers`` at a
    time. A checker is a fork of this process (which holds nothing a learner could reach);
    its results arrive as JSON frames of at most ``MAX_RESULT`` bytes."""
    import multiprocessing

    from .sandbox_contain import kill_descendants
    from .sandbox_wire import WireError, read_frame

    from . import checks  # noqa: F401  (imported once here: each checker is a fork)

    context = multiprocessing.get_context("fork")
    results: dict[int, dict[int, Outcome]] = {i: {} for i in range(len(jobs))}
    pending = list(enumerate(jobs))
    running: dict[int, tuple] = {}
    while pending or running:
        while pending and len(running) < workers:
            i, job = pending.pop(0)
            receive, send = os.pipe()
            process = context.Process(target=_checker, args=(job, send))
            process.start()
            os.close(send)
            running[i] = [process, receive, time.monotonic() + job.timeout + MARGIN]
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
                        entry[2] = time.monotonic() + job.timeout + MARGIN
                except EOFError:
                    failure = ("the grader's process for this exercise stopped "
                               f"(exit code {process.exitcode})")
                except WireError as err:
                    failure = f"the grader's process for this exercise sent a bad result ({err})"
            elif time.monotonic() > deadline:
                failure = (f"grading this exercise took more than {job.timeout + MARGIN:.0f} s "
                           "and was stopped")
            if failure is None and len(done) < len(job.programs):
                continue
            for k in range(len(job.programs)):
                done.setdefault(k, Outcome(False, failure or "not graded"))
            kill_descendants(process.pid)
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(process.pid, signal.SIGKILL)
            process.join(5)
            os.close(receive)
            del running[i]
    return [[results[i][k] for k in range(len(job.programs))] for i, job in enumerate(jobs)]


# ----------------------------------------------------------------------- the class
def grade(paths: list[str | Path], *, chapter: str | int | None = None, hidden: bool = False,
          timeout: float = TIMEOUT, memory_mb: int = MEMORY_MB,
          workers: int | None = None) -> tuple[Chapter, list[Graded]]:
    """Grade the submissions; returns the class's chapter and one ``Graded`` each."""
    submissions = [read_submission(p) for p in paths]
    ch = find_chapter(chapter) if chapter is not None else chapter_of_class(submissions)
    if ch is None:
        raise SystemExit("none of the submissions names a chapter; pass --chapter N")
    graded, jobs, where = [], [], []
    hide = tuple(sorted({str(Path(p).resolve().parent) for p in paths}))
    for path, sub in zip(paths, submissions):
        g = Graded(str(path), {}, list(sub.notes))
        graded.append(g)
        if sub.chapter is None or sub.chapter.stem != ch.stem:
            if sub.chapter is not None:
                g.notes.append(f"this notebook is chapter {sub.chapter.number}'s "
                               f"({sub.chapter.stem}), not chapter {ch.number}'s: not graded")
            for e in ch.exercises:
                g.outcomes[e.label] = Outcome(False, "not graded (see the notes)")
            continue
        programs = []
        for e in ch.exercises:
            program, problem = program_for(sub, e)
            if program is None:
                g.outcomes[e.label] = Outcome(False, problem)
            else:
                programs.append((program, e))
        if programs:
            jobs.append(_Job(tuple(programs), hidden, timeout, memory_mb, hide))
            where.append(g)
    for g, job, outcomes in zip(where, jobs, _run(jobs, workers or min(os.cpu_count() or 1, 4))):
        for (_, e), outcome in zip(job.programs, outcomes):
            g.outcomes[e.label] = outcome
    for g in graded:   # keep the chapter's order
        g.outcomes = {e.label: g.outcomes[e.label] for e in ch.exercises}
    return ch, graded


def write_csv(ch: Chapter, graded: list[Graded], path: str | Path) -> None:
    with open(path, "w", newline="", encoding="utf-8") as f:
        out = csv.writer(f)
        out.writerow(["submission", *(e.label for e in ch.exercises), "total"])
        for g in graded:
            out.writerow([g.submission, *(int(g.outcomes[e.label].passed) for e in ch.exercises),
                          g.total])


def feedback(ch: Chapter, g: Graded) -> str:
    """The Markdown feedback for one submission."""
    lines = [f"# Feedback on `{Path(g.submission).name}`", "",
             f"Chapter {ch.number}, *{ch.title}*: {g.total} of {len(ch.exercises)} "
             "exercises passed.", ""]
    lines += [f"- {note}" for note in g.notes] + ([""] if g.notes else [])
    lines += ["| exercise | result |", "| --- | --- |"]
    lines += [f"| {e.number} {e.title} | {'passed' if g.outcomes[e.label].passed else 'not passed'} |"
              for e in ch.exercises]
    for e in ch.exercises:
        o = g.outcomes[e.label]
        if o.passed and not o.notes:
            continue
        lines += ["", f"## Exercise {e.number}: {e.title}", "", *(f"> {line}" for line in
                  o.message.splitlines())]
        lines += [""] + [f"- {note}" for note in o.notes] if o.notes else []
    return "\n".join(lines) + "\n"


def summary(ch: Chapter, graded: list[Graded], seconds: float, hidden: bool) -> str:
    width = max(len(e.label) for e in ch.exercises)
    lines = [f"graded {len(graded)} submission(s) of chapter {ch.number} ({ch.stem}) in "
             f"{seconds:.1f} s; hidden inputs: {'yes' if hidden else 'no'}",
             f"{'exercise':<{width}}  passed"]
    lines += [f"{e.label:<{width}}  {sum(g.outcomes[e.label].passed for g in graded)}/{len(graded)}"
              for e in ch.exercises]
    lines += [f"note: {g.submission}: {n}" for g in graded for n in g.notes]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m lncourse.grade",
                                     description=__doc__.split("\n\n")[0])
    parser.add_argument("submissions", nargs="+", help="submitted notebooks (.ipynb)")
    parser.add_argument("--out", required=True, help="the grade sheet to write (CSV)")
    parser.add_argument("--feedback", help="folder for one Markdown feedback file per submission")
    parser.add_argument("--timeout", type=float, default=TIMEOUT,
                        help=f"seconds allowed per exercise (default {TIMEOUT:.0f})")
    parser.add_argument("--hidden", action="store_true",
                        help="add the checks' teacher-only inputs")
    parser.add_argument("--chapter", help="the class's chapter (default: the one most "
                                          "submissions name)")
    parser.add_argument("--memory-mb", type=int, default=MEMORY_MB,
                        help=f"memory cap per exercise, in MB (default {MEMORY_MB})")
    parser.add_argument("--workers", type=int, help="exercises graded at once (default: CPUs, up to 4)")
    args = parser.parse_args(argv)
    start = time.monotonic()
    ch, graded = grade(args.submissions, chapter=args.chapter, hidden=args.hidden,
                       timeout=args.timeout, memory_mb=args.memory_mb, workers=args.workers)
    write_csv(ch, graded, args.out)
    if args.feedback:
        folder = Path(args.feedback)
        folder.mkdir(parents=True, exist_ok=True)
        names: set[str] = set()
        for g in graded:
            name = Path(g.submission).stem
            while name in names:
                name += "_"
            names.add(name)
            (folder / f"{name}.md").write_text(feedback(ch, g), encoding="utf-8")
    print(summary(ch, graded, time.monotonic() - start, args.hidden))
    return 0


if __name__ == "__main__":
    sys.exit(main())
