"""Sheets an LMS imports (issue 34, item 7): each LMS file is parsed here the way that
LMS's importer parses it (Canvas: ``GradebookImporter``, app/models/gradebook_importer.rb;
Moodle's assignment worksheet: ``assignfeedback_offline_grade_importer``,
mod/assign/feedback/offline/importgradeslib.php; Moodle's gradebook: grade/import/csv,
a column mapped to a user field); the maximum points are in every sheet; bad arguments
are refused before grading; control characters never reach a sheet, a feedback file or
the terminal raw.

As in ``test_identities.py``, the checks never run (``no_checkers``)."""

import csv
import io
import re
import time
from datetime import datetime, timezone

import pytest

from .test_identities import CH, TOP, books, no_checkers, rows, write  # noqa: F401 (fixtures)
from lncourse.grading.grade import main


# --------------------------------------------------------- the importers, as they parse
def canvas_import(text: str) -> dict:
    """What Canvas's gradebook importer reads from ``text``: the assignments with their
    points possible, and each student's grades, keyed by the user ID or SIS user ID that
    identifies them (as GradebookImporter#header?, #process_pp, #process_student)."""
    table = list(csv.reader(io.StringIO(text)))
    head = table[0]
    assert len(head) > 3 and re.search("Student", head[0]) and re.search("ID", head[1])
    columns = 3
    if re.search(r"SIS\s+User\s+ID", head[2]) and re.search(r"SIS\s+Login\s+ID", head[3]):
        sis_user, columns = 2, columns + 2
    assert re.search("Section", head[columns - 1]), "the last student column is not Section"
    assignments = head[columns:]
    points, students = [None] * len(assignments), {}
    for row in table[1:]:
        if re.search("Points Possible", row[0]):
            points = row[columns:]
            continue
        if all(re.fullmatch(r"(Muted|)", c.strip(), re.I) for c in row):
            continue
        key = (("id", int(row[1])) if row[1].strip() else
               ("sis_user_id", row[sis_user]) if row[sis_user].strip() else ("name", row[0]))
        assert key not in students, f"two rows for {key}"
        students[key] = dict(zip(assignments, row[columns:]))
    return {"assignments": dict(zip(assignments, points)), "students": students}


def moodle_worksheet_import(text: str) -> dict:
    """What Moodle's offline grading worksheet upload reads: (participant number) ->
    (grade, modified, feedback comments). Its init() needs the columns Identifier, Grade
    and Last modified (grade), by their exact English names; next() strips the string
    'Participant ' from the identifier and looks the number up."""
    table = list(csv.reader(io.StringIO(text)))
    head = table[0]
    for needed in ("Identifier", "Grade", "Last modified (grade)"):
        assert needed in head, f"Moodle's importer would refuse the file: no {needed!r}"
    index = {name: head.index(name) for name in head}
    out = {}
    for row in table[1:]:
        ident = row[index["Identifier"]]
        number = ident[len("Participant "):]
        assert ident.startswith("Participant ") and number.isdigit(), ident
        modified = datetime.strptime(row[index["Last modified (grade)"]], "%Y-%m-%d %H:%M:%S UTC")
        out[int(number)] = (float(row[index["Grade"]]), modified,
                            row[index["Feedback comments"]] if "Feedback comments" in index else None)
    return out


def moodle_gradebook_import(text: str, identifier: str, item: str) -> dict:
    """Moodle's gradebook CSV import with the teacher's mapping: the column ``identifier``
    to the users' ID number, ``item`` to the grade item; other columns to nothing."""
    table = list(csv.DictReader(io.StringIO(text)))
    return {r[identifier]: float(r[item]) for r in table}


# ------------------------------------------------------------------------- Canvas
def test_canvas_sheet_is_read_by_canvas_importer(tmp_path, books, no_checkers):
    paths = [write(books["solution"], tmp_path / "lovelaceada_51234_998877_lab1.ipynb"),
             write(books["student"], tmp_path / "ngben_LATE_51235_998878_lab1-1.ipynb")]
    lms = tmp_path / "canvas.csv"
    main([*map(str, paths), "--out", str(tmp_path / "g.csv"), "--lms", str(lms),
          "--lms-item", "Lab 1 (4411)"])
    text = lms.read_text()
    assert text.splitlines()[0] == "Student,ID,SIS User ID,SIS Login ID,Section,Lab 1 (4411)"
    got = canvas_import(text)
    assert got["assignments"] == {"Lab 1 (4411)": str(TOP)}
    assert got["students"] == {("id", 51234): {"Lab 1 (4411)": str(TOP)},
                               ("id", 51235): {"Lab 1 (4411)": str(TOP)}}


def test_canvas_sheet_with_a_rosters_sis_ids(tmp_path, books, no_checkers):
    path = write(books["solution"], tmp_path / "ada.ipynb")
    roster = tmp_path / "roster.csv"
    roster.write_text("file,student_id\nada.ipynb,S0001\n")
    main([str(path), "--out", str(tmp_path / "g.csv"), "--lms", str(tmp_path / "c.csv"),
          "--lms-format", "canvas", "--roster", str(roster)])
    got = canvas_import((tmp_path / "c.csv").read_text())
    assert list(got["students"]) == [("sis_user_id", "S0001")]


# ------------------------------------------------------------------------- Moodle
def test_moodle_worksheet_is_read_by_moodles_upload(tmp_path, books, no_checkers):
    paths = [write(books["solution"], tmp_path / "Ada Lovelace_1234567_assignsubmission_file"
                   / "01_layernorm_geometry.ipynb"),
             write(books["student"], tmp_path /
                   "Ben Ng_1234568_assignsubmission_file_01_layernorm_geometry.ipynb")]
    lms = tmp_path / "worksheet.csv"
    before = datetime.now(timezone.utc).replace(tzinfo=None, microsecond=0)
    main([*map(str, paths), "--out", str(tmp_path / "g.csv"), "--lms", str(lms)])
    head = lms.read_text().splitlines()[0]
    assert head == ("Identifier,Full name,Grade,Maximum Grade,Last modified (grade),"
                    "Feedback comments")
    got = moodle_worksheet_import(lms.read_text())
    assert sorted(got) == [1234567, 1234568]
    assert got[1234567][0] == TOP and got[1234567][1] >= before
    assert f"{TOP}/{TOP} points" in got[1234567][2]
    table = list(csv.DictReader(io.StringIO(lms.read_text())))
    assert [r["Maximum Grade"] for r in table] == [str(TOP)] * 2
    assert [r["Full name"] for r in table] == ["Ada Lovelace", "Ben Ng"]


def test_moodle_gradebook_sheet_maps_an_id_number(tmp_path, books, no_checkers):
    path = write(books["solution"], tmp_path / "ada.ipynb")
    roster = tmp_path / "roster.csv"
    roster.write_text("file,student_id\nada.ipynb,20230001\n")
    lms = tmp_path / "moodle.csv"
    main([str(path), "--out", str(tmp_path / "g.csv"), "--lms", str(lms), "--roster", str(roster)])
    item = f"Chapter {CH.number}: {CH.title}"
    assert lms.read_text().splitlines()[0] == f"ID number,{item},Maximum points,Feedback"
    assert moodle_gradebook_import(lms.read_text(), "ID number", item) == {"20230001": TOP}
    assert list(csv.DictReader(io.StringIO(lms.read_text())))[0]["Maximum points"] == str(TOP)


def test_the_grade_sheet_carries_the_maximum(tmp_path, books, no_checkers):
    main([str(write(books["student"], tmp_path / "a.ipynb")), "--out", str(tmp_path / "g.csv")])
    assert rows(tmp_path / "g.csv")[0]["max_points"] == str(TOP)


@pytest.mark.parametrize("fmt, name", [
    ("moodle-worksheet", "ada.ipynb"),              # no participant number
    ("moodle", "Ada L_12_assignsubmission_file_x.ipynb"),   # a participant number, no ID number
    ("canvas", "ada.ipynb"),                        # neither a Canvas ID nor a SIS ID
])
def test_an_lms_format_the_ids_cannot_fill_is_refused_before_grading(
        fmt, name, tmp_path, books, no_checkers):
    path = write(books["solution"], tmp_path / name)
    with pytest.raises(SystemExit) as stop:
        main([str(path), "--out", str(tmp_path / "g.csv"), "--lms", str(tmp_path / "l.csv"),
              "--lms-format", fmt])
    assert "no ID it can use" in str(stop.value.code)
    assert no_checkers == [] and not (tmp_path / "g.csv").exists()


def test_duplicates_stay_out_of_the_lms_sheet(tmp_path, books, no_checkers, capsys):
    a = write(books["solution"], tmp_path / "x" / "lovelaceada_51234_1_a.ipynb")
    b = write(books["student"], tmp_path / "y" / "lovelaceada_51234_2_a.ipynb")
    main([str(a), str(b), "--out", str(tmp_path / "g.csv"), "--lms", str(tmp_path / "c.csv")])
    assert canvas_import((tmp_path / "c.csv").read_text())["students"] == {}
    assert "left out of" in capsys.readouterr().err
    assert len(rows(tmp_path / "g.csv")) == 2


# --------------------------------------------------------------- bad arguments
@pytest.mark.parametrize("option, message", [
    (["--chapter", "9"], "no chapter '9'"),
    (["--out", "{tmp}/missing/grades.csv"], "does not exist"),
    (["--out", "{tmp}"], "is a folder"),
    (["--feedback", "{tmp}/a_file"], "is a file, not a folder"),
    (["--lms", "{tmp}/missing/lms.csv"], "does not exist"),
    (["--roster", "{tmp}/no_roster.csv"], "no such file"),
    (["--id-pattern", "("], "--id-pattern"),
])
def test_bad_arguments_are_refused_before_grading(option, message, tmp_path, books,
                                                  no_checkers, capsys):
    path = write(books["solution"], tmp_path / "a.ipynb")
    (tmp_path / "a_file").write_text("")
    option = [o.replace("{tmp}", str(tmp_path)) for o in option]
    out = [] if "--out" in option else ["--out", str(tmp_path / "g.csv")]
    start = time.monotonic()
    with pytest.raises(SystemExit) as stop:
        main([str(path), *out, *option])
    assert stop.value.code == 2 and message in capsys.readouterr().err
    assert no_checkers == [] and time.monotonic() - start < 5
    assert not (tmp_path / "g.csv").exists()


# ---------------------------------------------------------- control characters
def test_control_characters_are_escaped_everywhere(tmp_path, books, no_checkers, capsys):
    """A file name with a terminal escape, a right-to-left override and a NUL-free
    bell: the sheet, the LMS sheet, the feedback and the summary show them escaped."""
    name = "evil\x1b[2J\u202etxt.\x07.ipynb"
    path = write(books["solution"], tmp_path / name)
    sheet, lms, fb = tmp_path / "g.csv", tmp_path / "l.csv", tmp_path / "fb"
    main([str(path), "--out", str(sheet), "--lms", str(lms), "--feedback", str(fb)])
    printed = capsys.readouterr()
    texts = {"sheet": sheet.read_text(), "lms": lms.read_text(), "printed": printed.out,
             **{p.name: p.read_text() for p in fb.iterdir()}}
    for what, text in texts.items():
        assert not re.search("[\x00-\x08\x0b-\x1f\x7f-\x9f\u202a-\u202e]", text), what
    assert "evil\\x1b[2J\\u202etxt.\\x07" in texts["sheet"]
    assert "\\x1b" in texts["lms"] and "\\u202e" in texts["printed"]
