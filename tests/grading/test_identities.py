"""Who a submission belongs to (issue 34, item 4): the ID comes from what the teacher
controls (the LMS's own download naming, a roster, a file-name pattern), never from what
a notebook says about itself unless the teacher asks; a conflict or a duplicate is
flagged, never merged; a regrade replaces a submission's row; a sheet of another chapter
is refused before anything is graded.

The checks themselves never run here: ``_run`` (the checkers) is replaced by one that
passes every exercise, so each test costs the reading of a few notebooks.
"""

import csv
import time

import nbformat
import pytest

from .test_grade import editions
from lncourse.grading import grade as grade_module
from lncourse.grading import cli
from lncourse.grading.exercises import chapter as find_chapter
from lncourse.grading.grade import Outcome, grade, main

CH = find_chapter("01_layernorm_geometry")
TOP = sum(e.points for e in CH.exercises)


@pytest.fixture
def no_checkers(monkeypatch):
    """Every exercise passes without running: these tests are about names and rows."""
    calls = []

    def run(jobs, workers, template=True):
        calls.append(len(jobs))
        return [[Outcome(True, "passed (stand-in)") for _ in job.programs] for job in jobs]
    monkeypatch.setattr(grade_module, "run_jobs", run)
    return calls


@pytest.fixture(scope="module")
def books():
    return editions(CH.stem)


def write(nb, path, student_id=None):
    nb = nbformat.from_dict(nb)
    if student_id is not None:
        nb.metadata.setdefault("lncourse", {})["student_id"] = student_id
    path.parent.mkdir(parents=True, exist_ok=True)
    nbformat.write(nb, path)
    return path


def rows(path):
    with open(path, newline="", encoding="utf-8") as f:
        return list(csv.DictReader(f))


# ------------------------------------------------ the LMS's download naming, documented
# Moodle, assignment > "Download all submissions": the prefix is the participant's full
# name (its underscores made spaces), "_", the participant number of this assignment
# (assign_user_mapping: not the user's ID number, not stable across assignments), then
# "_assignsubmission_file"; flat: "_" and the file's own name; "Download submissions in
# folders": a folder of that name holding the file under its own name.
# Canvas, assignment > "Download Submissions": one flat folder; each file is named
# lastfirst (the sortable name, lower case, letters only), "_LATE" if late, "_" the
# Canvas user ID, "_" the attachment ID, "_" the file's own name (Canvas may add "-1",
# "-2" to a resubmitted name).
@pytest.mark.parametrize("relative, expected", [
    ("Ada Lovelace_1234567_assignsubmission_file_01_layernorm_geometry.ipynb",
     ("moodle", "1234567", "Ada Lovelace")),
    ("Ada Lovelace_1234567_assignsubmission_file/01_layernorm_geometry.ipynb",
     ("moodle", "1234567", "Ada Lovelace")),
    ("Ada Lovelace_1234567_assignsubmission_file_/chapter1 (2).ipynb",
     ("moodle", "1234567", "Ada Lovelace")),
    ("Jean-Luc O'Neil Smith_88_assignsubmission_file_my_work_7_x.ipynb",
     ("moodle", "88", "Jean-Luc O'Neil Smith")),
    ("lovelaceada_51234_998877_01_layernorm_geometry.ipynb", ("canvas", "51234", "lovelaceada")),
    ("lovelaceada_LATE_51234_998877_01_layernorm_geometry-1.ipynb",
     ("canvas", "51234", "lovelaceada")),
    ("lovelaceada_51234_998877_hw/notebook.ipynb", ("canvas", "51234", "lovelaceada")),
    ("Ada Lovelace_7_assignsubmission_file/ab_12_34_x.ipynb", ("moodle", "7", "Ada Lovelace")),
    ("01_layernorm_geometry.ipynb", None),
    ("ada_12345.ipynb", None),
])
def test_the_lms_download_names_give_their_ids(relative, expected, tmp_path):
    assert cli.lms_identity(tmp_path / relative) == expected


def test_moodle_downloads_flat_and_in_folders_give_participant_numbers(tmp_path, books, no_checkers):
    """The old recipe (--id-pattern '^(\\w+?)_') read 'Ada' or '01' from these names."""
    flat = write(books["solution"], tmp_path / "flat" /
                 "Ada Lovelace_1234567_assignsubmission_file_01_layernorm_geometry.ipynb")
    folders = [write(books["student"], tmp_path / "folders" / f"{name}_{n}_assignsubmission_file"
                     / "01_layernorm_geometry.ipynb")
               for name, n in (("Ben Ng", 1234568), ("Cleo Park", 1234569))]
    _, graded = grade([flat, *folders], chapter=1)
    assert [(g.student_id, g.name) for g in graded] == [
        ("Participant 1234567", "Ada Lovelace"), ("Participant 1234568", "Ben Ng"),
        ("Participant 1234569", "Cleo Park")]
    # two files of the same name in two folders are two submissions, named by their folder
    assert [g.submission_name for g in graded][1:] == [
        "Ben Ng_1234568_assignsubmission_file/01_layernorm_geometry.ipynb",
        "Cleo Park_1234569_assignsubmission_file/01_layernorm_geometry.ipynb"]


def test_canvas_downloads_give_canvas_user_ids(tmp_path, books, no_checkers):
    paths = [write(books["solution"], tmp_path / "lovelaceada_51234_998877_lab1.ipynb"),
             write(books["student"], tmp_path / "ngben_LATE_51235_998878_lab1-1.ipynb")]
    _, graded = grade(paths, chapter=1)
    assert [(g.student_id, g.name) for g in graded] == [("51234", "lovelaceada"),
                                                         ("51235", "ngben")]


# ---------------------------------------------------- the notebook's own claim
def test_a_student_id_in_the_metadata_is_ignored_by_default(tmp_path, books, no_checkers):
    """A blank notebook claiming to be bob's does not become bob's row."""
    bob = write(books["solution"], tmp_path / "bob.ipynb")
    mallory = write(books["student"], tmp_path / "mallory.ipynb", student_id="bob")
    _, graded = grade([bob, mallory], chapter=1)
    assert [g.student_id for g in graded] == ["bob", "mallory"]
    assert any("metadata names student bob" in f for f in graded[1].flags), graded[1].flags


def test_a_metadata_id_that_conflicts_with_the_lms_name_is_flagged_not_used(
        tmp_path, books, no_checkers):
    path = write(books["student"], tmp_path / "malloryx_51299_1_lab.ipynb", student_id="zoe")
    _, (g,) = grade([path], chapter=1, id_from_metadata=True)
    assert g.student_id == "51299"
    assert any("conflict" in f and "zoe" in f for f in g.flags), g.flags


def test_metadata_ids_are_used_when_the_teacher_asks(tmp_path, books, no_checkers):
    path = write(books["student"], tmp_path / "notebook.ipynb", student_id="s-17")
    _, (g,) = grade([path], chapter=1, id_from_metadata=True)
    assert g.student_id == "s-17" and g.flags == []


def test_duplicate_ids_are_flagged_and_both_rows_kept(tmp_path, books, no_checkers):
    """Two notebooks that claim the same student keep a row each, both flagged; neither
    replaces the other, in this run's sheet or in last week's."""
    out = tmp_path / "grades.csv"
    bob = write(books["solution"], tmp_path / "a" / "bob.ipynb")
    main([str(bob), "--out", str(out), "--chapter", "1"])
    (first,) = rows(out)
    claims = [write(books["student"], tmp_path / "b" / f"{n}.ipynb", student_id="bob")
              for n in ("mallory", "trudy")]
    main([*map(str, claims), "--out", str(out), "--id-from-metadata", "--chapter", "1"])
    sheet = rows(out)
    assert [(r["student_id"], r["submission"], r["total"]) for r in sheet] == [
        ("bob", "bob.ipynb", str(TOP)), ("bob", "mallory.ipynb", str(TOP)),
        ("bob", "trudy.ipynb", str(TOP))]
    assert "duplicate ID" in sheet[1]["flags"] and "trudy.ipynb" in sheet[1]["flags"]
    assert "duplicate ID" in sheet[2]["flags"]
    assert sheet[0] == first           # bob's own row is untouched
    assert "bob.ipynb (an earlier run)" in sheet[1]["flags"]


def test_the_feedback_of_a_duplicate_never_overwrites_anothers(tmp_path, books, no_checkers):
    zoe = write(books["solution"], tmp_path / "zoe.ipynb")
    mallory = write(books["student"], tmp_path / "mallory.ipynb", student_id="zoe")
    main([str(zoe), str(mallory), "--out", str(tmp_path / "g.csv"), "--feedback",
          str(tmp_path / "fb"), "--id-from-metadata", "--chapter", "1"])
    files = sorted(p.name for p in (tmp_path / "fb").iterdir())
    assert len(files) == 2
    assert "zoe.ipynb" in (tmp_path / "fb" / "zoe.md").read_text()


# ---------------------------------------------------------- rosters and regrades
def test_a_regrade_with_a_corrected_roster_replaces_the_submissions_row(
        tmp_path, books, no_checkers):
    path = write(books["solution"], tmp_path / "s1.ipynb")
    out, roster = tmp_path / "grades.csv", tmp_path / "roster.csv"
    for sid in ("s-wrong", "s-typo", "s-right"):
        roster.write_text(f"file,student_id\ns1.ipynb,{sid}\n")
        main([str(path), "--out", str(out), "--roster", str(roster), "--chapter", "1"])
    assert [(r["student_id"], r["submission"]) for r in rows(out)] == [("s-right", "s1.ipynb")]


def test_a_roster_names_folder_downloads_by_their_folder(tmp_path, books, no_checkers):
    path = write(books["solution"], tmp_path / "Ada Lovelace_7_assignsubmission_file" / "x.ipynb")
    roster = tmp_path / "roster.csv"
    roster.write_text("file,student_id\nAda Lovelace_7_assignsubmission_file/x.ipynb,ada01\n")
    _, (g,) = grade([path], chapter=1, roster={"Ada Lovelace_7_assignsubmission_file/x.ipynb": "ada01"})
    assert g.student_id == "ada01"


def test_a_merge_into_another_chapters_sheet_is_refused_before_grading(
        tmp_path, books, no_checkers, capsys):
    out = tmp_path / "grades.csv"
    ch3 = write(editions("03_majority")["solution"], tmp_path / "c3.ipynb")
    main([str(ch3), "--out", str(out)])
    before = out.read_text()
    no_checkers.clear()
    path = write(books["solution"], tmp_path / "c1.ipynb")
    start = time.monotonic()
    with pytest.raises(SystemExit) as stop:
        main([str(path), "--out", str(out)])
    assert stop.value.code not in (0, None)
    assert no_checkers == [], "graded before refusing"
    assert "another chapter" in str(stop.value.code) + capsys.readouterr().err
    assert out.read_text() == before and time.monotonic() - start < 30


def test_feedback_file_names_are_capped_in_bytes_distinct_and_visible(tmp_path):
    """Issue 60, item 9: a legal 255-byte name (83 CJK letters) crashed the grader while it
    wrote feedback, and 'a b' and 'a_b' overwrote each other. Every name is at most
    NAME_BYTES bytes, cut on a character, distinct (case too), never hidden, and a file of
    each name can be written."""
    from lncourse.grading.sheet import atomic_write

    cjk = "学" * 83
    ids = ["a b", "a_b", "A_B", cjk, cjk + "x", cjk[:-1] + "y", ".hidden", "", "a_b_2"]
    names = cli.feedback_names(ids)
    assert len({n.casefold() for n in names}) == len(ids), names
    assert all(len(n.encode()) <= cli.NAME_BYTES and not n.startswith(".") for n in names)
    assert names[:3] == ["a_b", "a_b_2", "A_B_3"] and names[-1] == "a_b_2_2"
    assert names[3] == "学" * (cli.NAME_BYTES // 3) and "\ufffd" not in "".join(names)
    for n in names:
        atomic_write(tmp_path / f"{n}.md", n)
    assert len(list(tmp_path.iterdir())) == len(ids)
