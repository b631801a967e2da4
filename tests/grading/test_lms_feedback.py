"""Each student's feedback in the LMS's own sheet (issue 60, item 6): every mistake's
message in the feedback column, as the LMS shows it (escaped HTML, no Markdown), within
a size limit that says where it cut; the Markdown files as well. The checks never run:
``failing`` gives each exercise a message of its own."""

import csv
import html
import io
import re

import pytest

from .test_identities import CH, TOP, books, write  # noqa: F401 (fixtures)
from .test_sheets import moodle_worksheet_import
from lncourse.grading import grade as grade_module
from lncourse.grading.grade import Outcome, main
from lncourse.grading.sheet import CUT, LMS_FEEDBACK_CHARS

SCRIPT = "<script>alert('x')</script> & *not bold* \\_"


def message(label: str) -> str:
    return f"{label}: mistake number {label[::-1]}\nits second line {SCRIPT}"


@pytest.fixture
def failing(monkeypatch):
    """Every exercise fails with ``message(label)``; ``failing["long"] = n`` makes the
    first exercise's message n characters long."""
    how = {"long": 0}

    def run(jobs, workers, template=True):
        out = []
        for job in jobs:
            outcomes = []
            for k, (_, e) in enumerate(job.programs):
                text = message(e.label)
                if k == 0 and how["long"]:
                    text += " words" * (how["long"] // 6)
                outcomes.append(Outcome(False, text))
            out.append(outcomes)
        return out
    monkeypatch.setattr(grade_module, "run_jobs", run)
    return how


MOODLE = "Ada Lovelace_1234567_assignsubmission_file_01_layernorm_geometry.ipynb"


def _worksheet(tmp_path, books):
    path = write(books["solution"], tmp_path / MOODLE)
    lms = tmp_path / "worksheet.csv"
    main([str(path), "--out", str(tmp_path / "g.csv"), "--lms", str(lms),
          "--feedback", str(tmp_path / "fb")])
    return moodle_worksheet_import(lms.read_text(encoding="utf-8"))[1234567][2]


def test_the_worksheet_carries_every_mistakes_message(tmp_path, books, failing):
    comment = _worksheet(tmp_path, books)
    assert comment.startswith(f"<p>0/{TOP} points")
    for e in CH.exercises:     # each message, escaped as HTML shows it literally
        assert html.escape(f"mistake number {e.label[::-1]}") in comment, e.label
        assert f"Exercise {e.number}: {html.escape(e.title)}" in comment
    assert "<br>its second line" in comment
    # the Markdown files stay
    assert len(list((tmp_path / "fb").iterdir())) == 1


def test_no_markup_of_a_students_reaches_the_sheet(tmp_path, books, failing):
    comment = _worksheet(tmp_path, books)
    assert "<script" not in comment.lower()
    assert html.escape(SCRIPT, quote=True) in comment
    # what the browser shows is the text itself, without Markdown's backslashes
    shown = html.unescape(re.sub(r"<[^>]+>", " ", comment))
    assert SCRIPT in shown
    tags = set(re.findall(r"</?([a-zA-Z]+)", comment))
    assert tags <= {"p", "br", "strong", "em", "ul", "li"}, tags


def test_a_long_feedback_is_cut_within_the_limit_and_says_so(tmp_path, books, failing):
    failing["long"] = 3 * LMS_FEEDBACK_CHARS
    comment = _worksheet(tmp_path, books)
    assert len(comment) <= LMS_FEEDBACK_CHARS
    assert comment.endswith(CUT) and "full feedback in the file" in comment
    assert comment.count("<p>") == comment.count("</p>")     # no element cut open
    # the file keeps all of it
    (md,) = (tmp_path / "fb").iterdir()
    assert "words" * 1 in md.read_text() and len(md.read_text()) > 2 * LMS_FEEDBACK_CHARS


def test_a_short_feedback_is_not_cut(tmp_path, books, failing):
    assert CUT not in _worksheet(tmp_path, books)


def test_moodles_gradebook_sheet_carries_it_too(tmp_path, books, failing):
    path = write(books["solution"], tmp_path / "ada.ipynb")
    roster = tmp_path / "roster.csv"
    roster.write_text("file,student_id\nada.ipynb,20230001\n")
    lms = tmp_path / "moodle.csv"
    main([str(path), "--out", str(tmp_path / "g.csv"), "--lms", str(lms), "--roster",
          str(roster)])
    (row,) = csv.DictReader(io.StringIO(lms.read_text(encoding="utf-8")))
    for e in CH.exercises:
        assert html.escape(f"mistake number {e.label[::-1]}") in row["Feedback"]
    assert "<script" not in row["Feedback"]
