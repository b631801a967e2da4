"""Grade submitted notebooks with the exercise checks.

    python -m lncourse.grading.grade SUBMISSION.ipynb [...] --out grades.csv [--feedback DIR]
                             [--timeout SECONDS] [--hidden --hidden-key KEY] [--chapter N]
                             [--assignment FILE.toml [--written MARKS.csv]]

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
"passed") reaches it (``lncourse.grading.checker``: one such process per submission). ``--hidden`` adds the checks' teacher-only inputs, whose random
values are drawn from a secret (``--hidden-key``). ``--assignment`` grades by the
teacher's assignment file (``lncourse.grading.assignment``): the exercises chosen, their
points, partial credit, the teacher's own exercises (``lncourse.grading.teacher``) and
written answers marked by hand in ``--written`` (``lncourse.grading.written``).
"""

from __future__ import annotations

import csv
import os
import sys
import time
from dataclasses import dataclass, field, replace
from pathlib import Path

from lncourse.grading.checker import Outcome, Job, run_jobs
from lncourse.grading.exercises import Chapter, chapter as find_chapter
from lncourse.grading.sheet import feedback, summary, write_csv, write_lms
from lncourse.grading.submission import (UnclearChapter, chapter_of_class, fingerprint,
                                         program_for, read_submission)

__all__ = ["Outcome", "Graded", "grade", "write_csv", "write_lms", "feedback", "summary",
           "student_ids", "main"]

TIMEOUT = 10.0        # seconds per call: the right answers' slowest call takes 1.1 s
#                       (tests/answers.py, every check, visible and hidden inputs; the
#                       first call of layer_norm_fgh). 30 s let one infinite loop hold
#                       a core for 30 s and a class of 30 take 59 s on 2 cores.
MEMORY_MB = 2048      # memory a learner's process may use beyond what it starts with


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

    def points(self, ch: Chapter) -> int | float:
        """The points earned (``assignment.earned``: partial credit, written marks)."""
        from lncourse.grading.assignment import earned
        total = sum(earned(e, self.outcomes[e.label]) or 0 for e in ch.exercises)
        return round(total, 2) if isinstance(total, float) else total


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
          hidden_key: str | None = None, assignment=None,
          written: str | Path | None = None,
          class_folder: str | Path | None = None) -> tuple[Chapter, list[Graded]]:
    """Grade the submissions; returns the class's chapter and one ``Graded`` each.

    The student ID of a submission: see ``lncourse.grading.cli.student_ids`` (a roster,
    ``id_pattern``, the LMS's download naming; the notebook's metadata only with
    ``id_from_metadata``). ``ready(ch, graded)`` is called once the chapter and the IDs
    are known, before any exercise runs (the command line refuses a wrong sheet there).
    Submissions whose graded code is the same (``submission.fingerprint``) and earns
    points are flagged. ``template=False``
    starts every learner's process afresh instead of forking it from a template (the
    grader's path before the template; ``benchmarks/grading_speed.py`` compares them).

    ``assignment`` (``lncourse.grading.assignment.Assignment``): the exercises graded,
    their points and partial credit, the teacher's exercises and the written answers;
    the chapter returned is the assignment's view of it. ``written``: the marks file of
    the written answers (``lncourse.grading.written``), required when it declares any."""
    import math
    if not (isinstance(timeout, (int, float)) and math.isfinite(timeout) and timeout > 0):
        raise ValueError(f"timeout must be a finite number of seconds > 0, not {timeout!r}")
    if workers is not None and (not isinstance(workers, int) or workers < 1):
        raise ValueError(f"workers must be an integer >= 1, not {workers!r}")
    if hidden and not hidden_key:   # the command line asks the teacher for one
        import secrets
        hidden_key = secrets.token_hex(16)
    if chapter is None and assignment is not None:
        chapter = assignment.chapter
    submissions = [_read(p) for p in paths]
    from lncourse.grading.cli import class_folder as common, student_ids, submission_name
    root = common(paths) if class_folder is None else Path(class_folder)
    ids = student_ids(paths, submissions, roster, id_pattern, id_from_metadata, root)
    try:
        ch = find_chapter(chapter) if chapter is not None else chapter_of_class(
            submissions, [ids[str(p)].id or str(p) for p in paths])
    except UnclearChapter as err:
        raise SystemExit(str(err)) from None
    if ch is None:
        raise SystemExit("none of the submissions names a chapter; pass --chapter N")
    course = ch
    if assignment is not None:
        from lncourse.grading.assignment import AssignmentError
        try:
            ch = assignment.apply(ch)
        except AssignmentError as err:
            raise SystemExit(str(err)) from None
        if any(getattr(e, "written", False) for e in ch.exercises) and written is None:
            raise SystemExit(f"{assignment.path} declares written answers: pass --written "
                             "FILE (the sheet the teacher marks them in)")
    runnable = replace(ch, exercises=tuple(e for e in ch.exercises
                                           if not getattr(e, "written", False)))
    graded, jobs, where, prints = [], [], [], []
    hide = tuple(sorted({str(Path(p).resolve().parent) for p in paths}
                        | set(assignment.private() if assignment is not None else ())))
    for path, sub in zip(paths, submissions):
        who = ids[str(path)]
        g = Graded(str(path), {}, list(sub.notes), who.id,
                   (["solution edition"] if sub.solution_edition else [])
                   + ([f"refused: {sub.refused}"] if sub.refused else []) + who.flags,
                   who.name, submission_name(path, root), who.source)
        graded.append(g)
        if sub.chapter is None or sub.chapter.stem != course.stem:
            if sub.chapter is not None:
                g.notes.append(f"this notebook is chapter {sub.chapter.number}'s "
                               f"({sub.chapter.stem}), not chapter {ch.number}'s: not graded")
            for e in ch.exercises:
                g.outcomes[e.label] = Outcome(False, "not graded (see the notes)")
            continue
        programs = []
        for e, (program, problem) in zip(runnable.exercises, _programs(sub, runnable, g)):
            if program is None:
                g.outcomes[e.label] = Outcome(False, problem)
            else:
                programs.append((program, e))
        prints.append((g, fingerprint(p for p, _ in programs)))
        if programs:
            jobs.append(Job(tuple(programs), hidden, timeout, memory_mb, hide, ch.preload,
                             hidden_key))
            where.append(g)
    if ready is not None:
        ready(ch, graded)
    for g, job, outcomes in zip(where, jobs, run_jobs(jobs, workers or min(2 * (os.cpu_count() or 1), 4), template)):
        for (_, e), outcome in zip(job.programs, outcomes):
            g.outcomes[e.label] = outcome
    if written is not None and len(runnable.exercises) < len(ch.exercises):
        _written(ch, graded, written)
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


def _written(ch: Chapter, graded: list[Graded], path) -> None:
    """Each written answer's outcome, from the marks file (``lncourse.grading.written``),
    which is written again with this run's answers."""
    from lncourse.grading import written
    from lncourse.grading.contain import Exceeded, bounded

    questions = {e.label: e.points for e in ch.exercises if getattr(e, "written", False)}
    found = {}
    for g in graded:
        try:
            found[g.submission] = bounded(written.answers, g.submission,
                                          seconds=READ_SECONDS, memory_mb=READ_MB)
        except Exceeded:
            found[g.submission] = {}
    try:
        rows = written.merge(path, graded, questions, found)
    except written.WrittenError as err:
        raise SystemExit(str(err)) from None
    for g in graded:
        for label, top in questions.items():
            row = rows[(g.submission_name, label)]
            mark, comment = row["_mark"], row["comment"]
            if not row["_text"]:
                message = "no answer (the answer cell is missing or empty)"
            elif mark is None:
                message = "not yet marked"
            else:
                message = f"marked {mark:g}/{top:g}" + (f": {comment}" if comment else "")
            g.outcomes[label] = Outcome(mark is not None and mark >= top, message,
                                        score=None if mark is None or not top
                                        else mark / top,
                                        pending=mark is None and bool(row["_text"]))


def main(argv: list[str] | None = None) -> int:
    from lncourse.grading import cli as grade_cli
    from lncourse.grading.guarantees import guarantees

    parser = grade_cli.parser(__doc__, TIMEOUT, MEMORY_MB)
    args = parser.parse_args(argv)
    grade_cli.check(parser, args)
    if args.class_folder_note:
        print(args.class_folder_note)
    print(guarantees(not args.fresh_learners))
    start = time.monotonic()
    ch, graded = grade(args.submissions, chapter=args.chapter, hidden=args.hidden,
                       timeout=args.timeout, memory_mb=args.memory_mb, workers=args.workers,
                       roster=getattr(args, "roster_ids", None), id_pattern=args.id_pattern,
                       template=not args.fresh_learners, id_from_metadata=args.id_from_metadata,
                       ready=grade_cli.before_grading(args), hidden_key=args.hidden_key,
                       assignment=args.assignment_spec, written=args.written,
                       class_folder=args.class_folder)
    grade_cli.write_outputs(ch, graded, args)
    print(summary(ch, graded, time.monotonic() - start, args.hidden))
    return 0


if __name__ == "__main__":
    sys.exit(main())
