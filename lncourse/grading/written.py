"""Written answers, marked by hand (``--written FILE``), as nbgrader's manual grading.

A chapter's open question is followed by an answer cell: a Markdown cell whose metadata
holds ``{"lncourse": {"written": "wr-<name>"}}`` (the chapter's source writes it as
``+++ {"lncourse": {"written": "wr-<name>"}}`` before the cell's text, ``PLACEHOLDER``;
the student edition keeps it). A cell left as the placeholder is no answer. The
assignment file declares the questions it grades and their points (``[written.wr-<name>]``).

The first run writes FILE, a CSV with one row per submission and question:
``student_id``, ``submission``, ``question``, ``max_points``, ``points`` (empty),
``comment`` (empty) and ``answer`` (the cell's text). The teacher fills ``points`` (and,
if they like, ``comment``) and runs the grader again with the same FILE: each mark goes
into the grade sheet, the LMS sheet and the feedback. A row is matched by submission
and question; where the student's answer has changed since it was marked, the mark is
dropped (the row says so in ``comment``) and the answer waits to be marked again. Rows of
submissions not graded in this run are kept.
"""

from __future__ import annotations

import csv
import io
import json
import math
from pathlib import Path

from lncourse.grading.sheet import atomic_write, cell, printable

__all__ = ["COLUMNS", "answers", "read_marks", "write_marks", "WrittenError"]

COLUMNS = ("student_id", "submission", "question", "max_points", "points", "comment",
           "answer")
MAX_ANSWER = 20_000     # characters of one answer kept (a sheet's cell, not an essay store)
PLACEHOLDER = "*Your answer here.*"   # the answer cell as the chapter hands it out


class WrittenError(ValueError):
    """A marks file the grader cannot read; the message names its line."""


def answers(path: str | Path) -> dict[str, str]:
    """The written answers in the notebook at ``path``: marker -> the cell's text (the
    last cell with that marker). Run in a bounded process (``contain.bounded``)."""
    from lncourse.grading.intake import read_regular, shape_problem

    try:
        nb = json.loads(read_regular(path).decode("utf-8"))
        if shape_problem(nb):
            return {}
    except Exception:  # noqa: BLE001 (a notebook the grader refuses has no answers)
        return {}
    out: dict[str, str] = {}
    for c in nb.get("cells", []):
        meta = c.get("metadata") if isinstance(c, dict) else None
        mark = meta.get("lncourse") if isinstance(meta, dict) else None
        label = mark.get("written") if isinstance(mark, dict) else None
        if not isinstance(label, str) or c.get("cell_type") != "markdown":
            continue
        source = c.get("source", "")
        source = "".join(s for s in source if isinstance(s, str)) \
            if isinstance(source, list) else str(source)
        text = source.strip()
        out[label] = "" if text == PLACEHOLDER else text[:MAX_ANSWER]
    return out


def _mark(text: str, top: float, where: str) -> float | None:
    text = text.strip()
    if not text:
        return None
    try:
        value = float(text)
    except ValueError:
        raise WrittenError(f"{where}: points {text!r} is not a number") from None
    if not math.isfinite(value) or value < 0 or value > top:
        raise WrittenError(f"{where}: points {text} is outside 0 to {top:g}")
    return value


def read_marks(path: str | Path, questions: dict[str, float] | None = None) -> list[dict]:
    """The rows of a marks file (none if it does not exist yet); WrittenError naming the
    line for a file of another shape or a mark that is not a number within 0 and the
    question's points (``questions``: label -> points, when known)."""
    path = Path(path)
    if not path.exists():
        return []
    try:
        with open(path, newline="", encoding="utf-8") as f:
            reader = csv.DictReader(f)
            columns = reader.fieldnames or []
            rows = list(reader)
    except (OSError, UnicodeDecodeError, csv.Error) as err:
        raise WrittenError(f"{path} cannot be read as a CSV ({err})") from None
    missing = [c for c in ("submission", "question", "points") if c not in columns]
    if missing:
        raise WrittenError(f"{path} is not a written-answers sheet: it has no column "
                           + ", ".join(missing))
    for number, r in enumerate(rows, 2):
        q = (r.get("question") or "").strip()
        where = f"{path}, line {number}"
        top = (questions or {}).get(q)
        if top is None:
            try:
                top = float(r.get("max_points") or "inf")
            except ValueError:
                top = math.inf
        r["_mark"] = _mark(r.get("points") or "", top, where)
    return rows


def _answer_cell(text: str) -> str:
    """An answer as the sheet holds it: its lines kept, control characters escaped, and
    "'" before what a spreadsheet would read as a formula."""
    text = printable(text.replace("\r\n", "\n"), newlines=True)
    return "'" + text if text[:1] in ("=", "+", "-", "@") else text


def _plain(text: str) -> str:
    """A cell as the teacher typed it back: the sheet's "'" before a formula removed."""
    return text[1:] if text[:1] == "'" and text[1:2] in ("=", "+", "-", "@") else text


def merge(path: str | Path, graded, questions: dict[str, float],
          found: dict[str, dict[str, str]]) -> dict[tuple[str, str], dict]:
    """Write the marks file for ``graded`` and return (submission, question) -> row with
    its ``_mark`` (None: not marked). ``found``: submission -> its answers."""
    old = read_marks(path, questions)
    by_key = {(_plain(r.get("submission") or ""), r.get("question") or ""): r for r in old}
    now: dict[tuple[str, str], dict] = {}
    for g in graded:
        name = g.submission_name
        for q, top in questions.items():
            answer = found.get(g.submission, {}).get(q, "")
            before = by_key.get((name, q))
            row = {"student_id": g.student_id, "submission": name, "question": q,
                   "max_points": f"{top:g}", "points": "", "comment": "",
                   "answer": _answer_cell(answer), "_mark": None, "_text": answer}
            if before is not None:
                same = ((before.get("answer") or "").strip()
                        == _answer_cell(answer).strip())
                if same:
                    row.update(points=before.get("points") or "",
                               comment=_plain(before.get("comment") or ""),
                               _mark=before["_mark"])
                elif before["_mark"] is not None:
                    row["comment"] = (f"the answer changed since it was marked "
                                      f"{before['_mark']:g}; mark it again")
            now[(name, q)] = row
    kept = [r for k, r in by_key.items() if k not in now]
    out = io.StringIO()
    writer = csv.DictWriter(out, COLUMNS, extrasaction="ignore")
    writer.writeheader()
    for r in [*kept, *now.values()]:
        writer.writerow({c: (r.get(c) or "") if c == "answer"
                         else cell(_plain(str(r.get(c) or ""))) for c in COLUMNS})
    atomic_write(path, out.getvalue())
    return now
