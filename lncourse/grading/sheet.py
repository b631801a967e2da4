"""The grader's outputs: the grade sheet, the LMS import sheet, feedback, the summary.

``grades.csv`` (the sheet): ``student_id``, ``submission`` (the file's name), one column
per exercise label holding the points earned (0 or the exercise's points, set by the
chapter in ``lncourse.grading.exercises``), ``total``, ``max_points``, ``flags`` and
``graded_at`` (UTC). A regrade merges: rows of students not in this run are kept, the
rows of students regraded are replaced.

``--lms lms.csv``: Moodle's grade import format (Site administration is not needed: a
teacher's *Grades > Import > CSV file*): one row per student, columns ``ID number``
(map it to the user's ID number), the grade item (named after the chapter; map it to
the assignment) and ``Feedback``. Canvas imports the same file after renaming
``ID number`` to ``SIS User ID``.

Every sheet is written atomically (a temporary file in the same folder, flushed to disk,
then renamed over the old one), and cells that a spreadsheet would read as a formula
(starting with ``=``, ``+``, ``-``, ``@``, a tab or a carriage return) are prefixed
with ``'``. Names in feedback are escaped so that they cannot inject Markdown.
"""

from __future__ import annotations

import csv
import io
import os
import re
import tempfile
import time
from pathlib import Path

__all__ = ["write_csv", "write_lms", "feedback", "summary", "atomic_write", "cell", "md"]


def cell(value) -> str:
    """A CSV cell a spreadsheet will not evaluate."""
    text = str(value)
    return "'" + text if text[:1] in ("=", "+", "-", "@", "\t", "\r") else text


def md(text: str) -> str:
    """``text`` as literal Markdown on one line (no markup, no HTML, no new lines)."""
    text = re.sub(r"[\r\n\t]+", " ", str(text))
    return re.sub(r"([\\`*\[\]<>|~])", r"\\\1", text)


def atomic_write(path: str | Path, text: str) -> None:
    path = Path(path)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent or ".")
    try:
        with os.fdopen(fd, "w", encoding="utf-8", newline="") as f:
            f.write(text)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def _rows(ch, graded) -> list[dict]:
    stamp = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    rows = []
    for g in graded:
        row = {"student_id": g.student_id, "submission": Path(g.submission).name}
        row.update({e.label: e.points * int(g.outcomes[e.label].passed) for e in ch.exercises})
        row.update(total=g.points(ch), max_points=sum(e.points for e in ch.exercises),
                   flags="; ".join(g.flags), graded_at=stamp)
        rows.append(row)
    return rows


def _merge(path: Path, header: list[str], rows: list[dict]) -> list[dict]:
    """The rows of ``path`` (a sheet of the same chapter) whose students are not in
    ``rows``, then ``rows``."""
    if not path.exists():
        return rows
    with open(path, newline="", encoding="utf-8") as f:
        old = list(csv.DictReader(f))
    if old and list(old[0]) != header:
        raise SystemExit(f"{path} is a grade sheet with other columns (another chapter?); "
                         "write to another file or move it away")
    regraded = {r["student_id"] for r in rows}
    return [r for r in old if r["student_id"] not in regraded] + rows


def write_csv(ch, graded, path: str | Path, merge: bool = True) -> None:
    """The grade sheet (see the module's docstring); merged with an existing one."""
    header = ["student_id", "submission", *(e.label for e in ch.exercises), "total",
              "max_points", "flags", "graded_at"]
    rows = _rows(ch, graded)
    if merge:
        rows = _merge(Path(path), header, [{k: cell(v) for k, v in r.items()} for r in rows])
    out = io.StringIO()
    writer = csv.DictWriter(out, header)
    writer.writeheader()
    writer.writerows({k: cell(v) if not str(v).startswith("'") else v for k, v in r.items()}
                     for r in rows)
    atomic_write(path, out.getvalue())


def write_lms(ch, graded, path: str | Path) -> None:
    """Moodle's CSV grade import (see the module's docstring)."""
    item = f"Chapter {ch.number}: {ch.title}"
    out = io.StringIO()
    writer = csv.writer(out)
    writer.writerow(["ID number", item, "Feedback"])
    top = sum(e.points for e in ch.exercises)
    for g in graded:
        failed = [e.number for e in ch.exercises if not g.outcomes[e.label].passed]
        note = (f"{g.points(ch)}/{top} points" + (f"; not passed: {', '.join(failed)}"
                                                  if failed else "") +
                (f"; {'; '.join(g.flags)}" if g.flags else ""))
        writer.writerow([cell(g.student_id), g.points(ch), cell(note)])
    atomic_write(path, out.getvalue())


def feedback(ch, g) -> str:
    """The Markdown feedback for one submission."""
    top = sum(e.points for e in ch.exercises)
    lines = [f"# Feedback on {md(Path(g.submission).name)}", "",
             f"Chapter {ch.number}, *{ch.title}*: {g.total} of {len(ch.exercises)} "
             f"exercises passed, {g.points(ch)} of {top} points.", ""]
    lines += [f"- {md(note)}" for note in g.notes] + ([""] if g.notes else [])
    lines += ["| exercise | points | result |", "| --- | --- | --- |"]
    lines += [f"| {e.number} {e.title} | {e.points * g.outcomes[e.label].passed}/{e.points} | "
              f"{'passed' if g.outcomes[e.label].passed else 'not passed'} |"
              for e in ch.exercises]
    for e in ch.exercises:
        o = g.outcomes[e.label]
        if o.passed and not o.notes:
            continue
        lines += ["", f"## Exercise {e.number}: {e.title}", "",
                  *(f"> {md(line)}" for line in o.message.splitlines())]
        lines += [""] + [f"- {md(note)}" for note in o.notes] if o.notes else []
    return "\n".join(lines) + "\n"


def summary(ch, graded, seconds: float, hidden: bool) -> str:
    width = max(len(e.label) for e in ch.exercises)
    lines = [f"graded {len(graded)} submission(s) of chapter {ch.number} ({ch.stem}) in "
             f"{seconds:.1f} s; hidden inputs: {'yes' if hidden else 'no'}",
             f"{'exercise':<{width}}  passed"]
    lines += [f"{e.label:<{width}}  {sum(g.outcomes[e.label].passed for g in graded)}/{len(graded)}"
              for e in ch.exercises]
    lines += [f"note: {g.submission}: {n}" for g in graded for n in g.notes]
    return "\n".join(lines)
