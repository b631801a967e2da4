"""The grader's outputs: the grade sheet, the LMS import sheet, feedback, the summary.

``grades.csv`` (the sheet): ``student_id``, ``name`` (from the LMS's download naming,
where there is one), ``submission`` (the file's name; "folder/file name" for an LMS's
folder download), one column per exercise label holding the points earned (0 or the
exercise's points, set by the chapter in ``lncourse.grading.exercises``; with an
assignment file, ``lncourse.grading.assignment``, its items and points, partial points
to two decimals, and an empty cell for a written answer not yet marked), ``total``,
``max_points``, ``flags`` and ``graded_at`` (UTC). A regrade merges by submission: the
row of every submission graded again is replaced, every other row is kept (two rows
with one student ID both stay, and the new one is flagged). A submission is named by its
path relative to the class's folder (``cli.submission_name``), so regrading one
student's ``bob/nb.ipynb`` leaves ``alice/nb.ipynb``'s row alone; a regrade without
``--class-folder`` takes the class's folder from the sheet's names
(``cli.class_folder_from_names``), so that ``class/bob/nb.ipynb`` graded alone is
still ``bob/nb.ipynb`` and replaces its row. A sheet of another chapter is refused
before anything is graded (``check_sheet``).

``--lms FILE`` writes one of ``LMS_FORMATS``, each exactly as that LMS's importer reads
it (``tests/grading/test_sheets.py`` parses each the way the importer's code does):

- ``moodle``: the gradebook's *Import > CSV file*: ``ID number``, the grade item,
  ``Maximum points``, ``Feedback``. Map ``ID number`` to the users' ID number (or
  username, or email: whatever the roster's IDs are), the item to the assignment, the
  feedback column to its feedback, and ``Maximum points`` to nothing.
- ``moodle-worksheet``: the assignment's offline grading worksheet (*Upload grading
  worksheet*; the assignment needs the feedback type "Offline grading worksheet"):
  ``Identifier`` (``Participant <n>``, Moodle's number in its download's names),
  ``Full name``, ``Grade``, ``Maximum Grade``, ``Last modified (grade)``, ``Feedback
  comments``.
- ``canvas``: the gradebook's *Import*: ``Student``, ``ID`` (Canvas's user ID, from its
  download's names), ``SIS User ID`` (the roster's or the pattern's IDs), ``SIS Login
  ID``, ``Section``, the assignment, with the ``Points Possible`` row first.

What each format carries of the feedback (``lms_feedback``: each student's feedback as
escaped HTML, no Markdown, at most ``LMS_FEEDBACK_CHARS`` characters, then "(cut; full
feedback in the file)"): ``moodle-worksheet`` in ``Feedback comments``, which the upload
stores as the assignment's feedback comment in HTML (``assign_feedback_comments::
set_editor_text``, ``FORMAT_HTML``); ``moodle`` in ``Feedback``, which the gradebook
import stores as the grade's feedback (``grade_item::update_final_grade``, Moodle's
auto-format: HTML, line breaks kept); ``canvas`` none: Canvas's gradebook import reads
scores only, so its students get the Markdown files (``--feedback``) by hand. The
flags (duplicate IDs, identical code) are for the teacher and stay in ``grades.csv``.

Submissions whose ID another submission shares are left out of the LMS sheet (the LMS
would keep one of them), and said so. Every sheet is written atomically (a temporary
file in the same folder, flushed to disk, then renamed over the old one). Every cell,
feedback line and summary line has its control characters written as escapes
(``printable``), and cells that a spreadsheet would read as a formula (starting with
``=``, ``+``, ``-``, ``@``) are prefixed with ``'``. Names in feedback are escaped so that
they cannot inject Markdown.
"""

from __future__ import annotations

import csv
import html
import io
import os
import re
import tempfile
import time
from pathlib import Path

from lncourse.grading.assignment import earned, points_text

__all__ = ["write_csv", "write_lms", "feedback", "summary", "atomic_write", "cell", "md",
           "printable", "check_sheet", "submission_names", "uncell", "lms_format",
           "LMS_FORMATS", "lms_feedback",
           "LMS_FEEDBACK_CHARS"]

LMS_FORMATS = ("moodle", "moodle-worksheet", "canvas")
# C0 and C1 control characters, DEL, and the Unicode controls that reorder or hide text
_CONTROL = re.compile("[\x00-\x1f\x7f-\x9f\u061c\u200b-\u200f\u202a-\u202e\u2060-\u2069\ufeff]")


def printable(text, newlines: bool = False) -> str:
    """``text`` with every control character written as an escape (``\\x1b``,
    ``\\u202e``); with ``newlines``, line breaks and tabs are kept."""
    def escape(found: re.Match) -> str:
        c = found.group()
        if newlines and c in "\n\t":
            return c
        return f"\\x{ord(c):02x}" if ord(c) < 0x100 else f"\\u{ord(c):04x}"
    return _CONTROL.sub(escape, str(text))


def cell(value) -> str:
    """A CSV cell a spreadsheet will not evaluate, without control characters."""
    text = printable(value)
    return "'" + text if text[:1] in ("=", "+", "-", "@") else text


def md(text: str) -> str:
    """``text`` as literal Markdown on one line (no markup, no HTML, no new lines, no
    control characters)."""
    text = printable(re.sub(r"[\r\n\t]+", " ", str(text)))
    return re.sub(r"([\\`*\[\]<>|~])", r"\\\1", text)


def uncell(text: str) -> str:
    """A cell's text as it was before ``cell`` guarded it from a spreadsheet."""
    return text[1:] if text[:1] == "'" and text[1:2] in ("=", "+", "-", "@") else text


def submission_names(path: str | Path) -> list[str]:
    """The ``submission`` column of an existing sheet, as the grader named them; [] where
    the file is missing or no grade sheet (``check_sheet`` says why, once the chapter is
    known)."""
    try:
        with open(path, newline="", encoding="utf-8") as f:
            return [uncell(r.get("submission") or "") for r in csv.DictReader(f)]
    except (OSError, UnicodeDecodeError, csv.Error):
        return []


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


def _name(g) -> str:
    return getattr(g, "submission_name", "") or Path(g.submission).name


def header(ch) -> list[str]:
    """The grade sheet's columns for chapter ``ch``."""
    return ["student_id", "name", "submission", *(e.label for e in ch.exercises), "total",
            "max_points", "flags", "graded_at"]


def _top(ch) -> str:
    """The chapter's (or the assignment's) maximum points, as the sheets write them."""
    return points_text(sum(e.points for e in ch.exercises))


def _rows(ch, graded) -> list[dict]:
    stamp = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    rows = []
    for g in graded:
        row = {"student_id": g.student_id, "name": getattr(g, "name", ""),
               "submission": _name(g)}
        row.update({e.label: points_text(earned(e, g.outcomes[e.label]))
                    for e in ch.exercises})
        pending = [e.label for e in ch.exercises if getattr(g.outcomes[e.label], "pending",
                                                            False)]
        flags = g.flags + ([f"not yet marked: {', '.join(pending)}"] if pending else [])
        row.update(total=points_text(g.points(ch)), max_points=_top(ch),
                   flags="; ".join(flags), graded_at=stamp)
        rows.append(row)
    return rows


def _read_sheet(ch, path: Path) -> list[dict]:
    """The rows of an existing sheet of chapter ``ch``; SystemExit for anything else."""
    try:
        with open(path, newline="", encoding="utf-8") as f:
            reader = csv.DictReader(f)
            columns = reader.fieldnames or []
            old = list(reader)
    except (OSError, UnicodeDecodeError, csv.Error) as err:
        raise SystemExit(f"{path} cannot be read as a grade sheet ({err}); write to another "
                         "file, move it away, or pass --no-merge") from None
    labels = [e.label for e in ch.exercises]
    if not columns and not old:
        return []
    known = [c for c in columns if c.startswith(("ex-", "wr-"))]   # a teacher's own
    #                                       columns (a note beside the grades) stay theirs
    if known != labels or "student_id" not in columns or "submission" not in columns:
        raise SystemExit(f"{path} is not a grade sheet of chapter {ch.number} (another "
                         f"chapter's, one graded by another assignment file, or no grade "
                         f"sheet: its columns are "
                         f"{', '.join(columns)[:300]}); write to another file, move it "
                         "away, or pass --no-merge")
    return old


def check_sheet(ch, path: str | Path) -> None:
    """Refuse, before grading, to merge into ``path`` if it is not chapter ``ch``'s sheet."""
    path = Path(path)
    if path.exists():
        _read_sheet(ch, path)


def _merge(ch, path: Path, rows: list[dict]) -> list[dict]:
    """The rows of ``path`` (a sheet of the same chapter) whose submissions are not in
    ``rows``, then ``rows``; a new row whose student ID an old row of another submission
    holds is flagged (both are kept)."""
    if not path.exists():
        return rows
    old = _read_sheet(ch, path)
    regraded = {r["submission"] for r in rows}
    kept = [{k: r.get(k) or "" for k in header(ch)} for r in old
            if r.get("submission") not in regraded]
    for r in rows:
        same = [o["submission"] for o in kept if o["student_id"] == r["student_id"]]
        if same:
            flag = f"duplicate ID: also {', '.join(same)[:300]} (an earlier run)"
            r["flags"] = f"{r['flags']}; {flag}" if r["flags"] else flag
    return kept + rows


def write_csv(ch, graded, path: str | Path, merge: bool = True) -> None:
    """The grade sheet (see the module's docstring); merged with an existing one."""
    rows = [{k: cell(v) for k, v in r.items()} for r in _rows(ch, graded)]
    if merge:
        rows = _merge(ch, Path(path), rows)
    out = io.StringIO()
    writer = csv.DictWriter(out, header(ch))
    writer.writeheader()
    writer.writerows({k: v if str(v).startswith("'") else cell(v) for k, v in r.items()}
                     for r in rows)
    atomic_write(path, out.getvalue())


def _source(g) -> str:
    return getattr(g, "id_source", "") or "file name"


def lms_format(requested: str | None, graded) -> str:
    """The LMS sheet's format: ``requested``, or the one the IDs' origin implies. Raises
    SystemExit where the IDs cannot fill it (before grading: ``cli.before_grading``)."""
    sources = {_source(g) for g in graded}
    fmt = requested or ("canvas" if sources == {"canvas"} else
                        "moodle-worksheet" if sources == {"moodle"} else "moodle")
    participant = re.compile(r"Participant \d+")
    if fmt == "moodle-worksheet":
        bad = [g for g in graded if not participant.fullmatch(g.student_id)]
        why = ("its upload matches rows by Moodle's participant numbers ('Participant 123'), "
               "which only Moodle's download names (or a roster of them) give")
    elif fmt == "moodle":
        bad = [g for g in graded if _source(g) in ("moodle", "canvas")]
        why = ("Moodle's gradebook import matches users by ID number, username, email or "
               "user id, which a roster gives; a download's participant number is none of "
               "these (use --lms-format moodle-worksheet)")
    else:
        bad = [g for g in graded if _source(g) in ("moodle", "file name")]
        why = ("Canvas matches rows by its user ID (in its download's names) or by SIS user "
               "ID (from a roster or --id-pattern)")
    if bad:
        names = ", ".join(printable(_name(g)) for g in bad[:3]) + (" ..." if len(bad) > 3 else "")
        raise SystemExit(f"--lms-format {fmt}: {len(bad)} submission(s) have no ID it can "
                         f"use ({names}): {why}")
    return fmt


def write_lms(ch, graded, path: str | Path, fmt: str = "moodle", item: str | None = None) -> None:
    """The LMS's grade import in format ``fmt`` (see the module's docstring)."""
    import sys

    item = item or f"Chapter {ch.number}: {ch.title}"
    top = _top(ch)
    shared = [g for g in graded if any(f.startswith("duplicate ID") for f in g.flags)]
    if shared:
        print(f"note: left out of {path}: {len(shared)} submission(s) whose student ID "
              "another shares (see the flags in the grade sheet): "
              + ", ".join(printable(_name(g)) for g in shared[:5]), file=sys.stderr)
    out = io.StringIO()
    writer = csv.writer(out)
    stamp = time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime())

    note = lms_feedback
    rows = [g for g in graded if g not in shared]
    if fmt == "moodle":
        writer.writerow(["ID number", cell(item), "Maximum points", "Feedback"])
        writer.writerows([cell(g.student_id), points_text(g.points(ch)), top,
                          cell(note(ch, g))] for g in rows)
    elif fmt == "moodle-worksheet":
        writer.writerow(["Identifier", "Full name", "Grade", "Maximum Grade",
                         "Last modified (grade)", "Feedback comments"])
        writer.writerows([cell(g.student_id), cell(getattr(g, "name", "")),
                          points_text(g.points(ch)), top, stamp, cell(note(ch, g))]
                         for g in rows)
    elif fmt == "canvas":
        writer.writerow(["Student", "ID", "SIS User ID", "SIS Login ID", "Section", cell(item)])
        writer.writerow(["Points Possible", "", "", "", "", top])
        writer.writerows([cell(getattr(g, "name", "")),
                          cell(g.student_id) if _source(g) == "canvas" else "",
                          "" if _source(g) == "canvas" else cell(g.student_id), "", "",
                          points_text(g.points(ch))] for g in rows)
    else:
        raise ValueError(f"no LMS format {fmt!r}; the formats are {', '.join(LMS_FORMATS)}")
    atomic_write(path, out.getvalue())


# A student's feedback in an LMS's comment box: a choice, as neither Moodle importer
# documents a limit (both store a long text): under the 32,767 characters a spreadsheet
# cell holds in Excel, so that the sheet opens unchanged, and a few screens of a comment
# box. Longer feedback is cut at a whole exercise (or within the first one), and says so.
LMS_FEEDBACK_CHARS = 8000
CUT = "<p>(cut; full feedback in the file)</p>"


def _html(text) -> str:
    """``text`` as HTML that shows it literally: control characters as escapes, ``&``,
    ``<``, ``>`` and quotes as entities, each line break as ``<br>``."""
    return "<br>".join(html.escape(printable(line), quote=True)
                       for line in str(text).splitlines() or [""])


def lms_feedback(ch, g, limit: int = LMS_FEEDBACK_CHARS) -> str:
    """One student's feedback for an LMS's comment box: what ``feedback`` writes, as
    escaped HTML on one line (every mistake's message; no Markdown, whose backslash
    escapes a comment box shows), at most ``limit`` characters; a longer one ends with
    "(cut; full feedback in the file)"."""
    top = _top(ch)
    parts = [f"<p>{points_text(g.points(ch))}/{top} points: {g.total} of "
             f"{len(ch.exercises)} exercises "
             f"passed (chapter {ch.number}, <em>{_html(ch.title)}</em>).</p>"]
    if g.notes:
        parts.append("<ul>" + "".join(f"<li>{_html(n)}</li>" for n in g.notes) + "</ul>")
    for e in ch.exercises:
        o = g.outcomes[e.label]
        if o.passed and not o.notes:
            continue

        def part(message: str, o=o, e=e) -> str:
            notes = ("<ul>" + "".join(f"<li>{_html(n)}</li>" for n in o.notes) + "</ul>"
                     if o.notes else "")
            return (f"<p><strong>Exercise {_html(e.number)}: {_html(e.title)}</strong> "
                    f"({points_text(earned(e, o)) or '-'}/{points_text(e.points)}, "
                    f"{_result(e, o)})<br>{_html(message)}</p>"
                    + notes)
        parts.append((part, o.message))
    out, room = "", limit - len(CUT)
    for piece in parts:
        text = piece if isinstance(piece, str) else piece[0](piece[1])
        if len(out) + len(text) <= room:
            out += text
            continue
        if not isinstance(piece, str):       # the message cut to the room left, if any
            make, message = piece
            keep = room - len(out) - (len(make("")) - len(_html(""))) - 1
            while keep > 40 and len(out) + len(make(message[:keep] + "…")) > room:
                keep -= max(1, (len(out) + len(make(message[:keep] + "…")) - room))
            if keep > 40:
                out += make(message[:keep] + "…")
        return out + CUT
    return out


def feedback(ch, g) -> str:
    """The Markdown feedback for one submission."""
    top = _top(ch)
    lines = [f"# Feedback on {md(_name(g))}", "",
             f"Chapter {ch.number}, *{ch.title}*: {g.total} of {len(ch.exercises)} "
             f"exercises passed, {points_text(g.points(ch))} of {top} points.", ""]
    lines += [f"- {md(note)}" for note in g.notes] + ([""] if g.notes else [])
    lines += ["| exercise | points | result |", "| --- | --- | --- |"]
    lines += [f"| {e.number} {md(e.title)} | {points_text(earned(e, g.outcomes[e.label])) or '-'}"
              f"/{points_text(e.points)} | {_result(e, g.outcomes[e.label])} |"
              for e in ch.exercises]
    for e in ch.exercises:
        o = g.outcomes[e.label]
        if o.passed and not o.notes:
            continue
        lines += ["", f"## Exercise {e.number}: {e.title}", "",
                  *(f"> {md(line)}" for line in o.message.splitlines())]
        lines += [""] + [f"- {md(note)}" for note in o.notes] if o.notes else []
    return "\n".join(lines) + "\n"


def _result(e, o) -> str:
    if getattr(o, "pending", False):
        return "not yet marked"
    if getattr(e, "written", False):
        return "marked" if getattr(o, "score", None) is not None or o.passed else "no answer"
    if o.passed:
        return "passed"
    return "partly passed" if getattr(o, "score", None) else "not passed"


def summary(ch, graded, seconds: float, hidden: bool) -> str:
    width = max(len(e.label) for e in ch.exercises)
    lines = [f"graded {len(graded)} submission(s) of chapter {ch.number} ({ch.stem}) in "
             f"{seconds:.1f} s; hidden inputs: {'yes' if hidden else 'no'}",
             f"{'exercise':<{width}}  passed"]
    lines += [f"{e.label:<{width}}  {sum(g.outcomes[e.label].passed for g in graded)}/{len(graded)}"
              for e in ch.exercises]
    lines += [f"note: {_name(g)}: {n}" for g in graded for n in g.notes]
    lines += [f"flag: {_name(g)}: {f}" for g in graded for f in g.flags]
    return printable("\n".join(lines), newlines=True)
