"""One folder per student (issue 60, item 9): ``alice/nb.ipynb`` and ``bob/nb.ipynb`` are
two students, named by their path relative to the class's folder; a roster is looked up
by that path; regrading one never deletes the other's row, and regrading one alone,
without ``--class-folder``, replaces its own row: the class's folder comes from the
sheet's names. The checks never run here (``no_checkers``, as in
``test_identities.py``)."""

import pytest

from .test_identities import books, no_checkers, rows, write  # noqa: F401 (fixtures)
from lncourse.grading.cli import class_folder_from_names
from lncourse.grading.grade import grade, main
from lncourse.grading.sheet import submission_names


def _class(tmp_path, books):
    return [write(books["solution"], tmp_path / "class" / who / "nb.ipynb")
            for who in ("alice", "bob")]


def test_a_folder_per_student_gives_two_students(tmp_path, books, no_checkers):
    _, graded = grade(_class(tmp_path, books), chapter=1)
    assert [(g.student_id, g.submission_name) for g in graded] == [
        ("alice/nb", "alice/nb.ipynb"), ("bob/nb", "bob/nb.ipynb")]
    assert not any(f.startswith("duplicate ID") for g in graded for f in g.flags)


def test_the_roster_is_looked_up_by_the_relative_path(tmp_path, books, no_checkers):
    roster = {"alice/nb.ipynb": "s-alice", "bob/nb.ipynb": "s-bob"}
    _, graded = grade(_class(tmp_path, books), chapter=1, roster=roster)
    assert [(g.student_id, g.id_source) for g in graded] == [("s-alice", "roster"),
                                                            ("s-bob", "roster")]


def test_a_bare_file_name_in_the_roster_names_nobody_it_cannot_tell(tmp_path, books,
                                                                     no_checkers):
    _, graded = grade(_class(tmp_path, books), chapter=1, roster={"nb.ipynb": "s-who"})
    assert [g.student_id for g in graded] == ["alice/nb", "bob/nb"]


def test_regrading_one_student_keeps_the_others_row(tmp_path, books, no_checkers):
    alice, bob = _class(tmp_path, books)
    out = tmp_path / "grades.csv"
    main([str(alice), str(bob), "--out", str(out), "--chapter", "1"])
    main([str(bob), "--out", str(out), "--chapter", "1",
          "--class-folder", str(tmp_path / "class")])
    assert sorted((r["student_id"], r["submission"]) for r in rows(out)) == [
        ("alice/nb", "alice/nb.ipynb"), ("bob/nb", "bob/nb.ipynb")]
    # without --class-folder the regrade finds its row by the sheet's names: still two
    main([str(bob), "--out", str(out), "--chapter", "1"])
    assert sorted((r["student_id"], r["submission"]) for r in rows(out)) == [
        ("alice/nb", "alice/nb.ipynb"), ("bob/nb", "bob/nb.ipynb")]


def test_a_regrade_of_one_student_alone_replaces_their_own_row(tmp_path, books,
                                                                no_checkers, capsys):
    """The teacher grades the class, alice resubmits, and the teacher regrades her file
    alone, without --class-folder: her row is replaced (the solution edition's flag
    goes), bob's stays as it was, and no third row appears."""
    alice, bob = _class(tmp_path, books)
    out = tmp_path / "grades.csv"
    main([str(alice), str(bob), "--out", str(out), "--chapter", "1"])
    write(books["student"], alice)
    main([str(alice), "--out", str(out), "--chapter", "1"])
    after = {r["submission"]: r for r in rows(out)}
    assert sorted(after) == ["alice/nb.ipynb", "bob/nb.ipynb"]
    assert after["alice/nb.ipynb"]["student_id"] == "alice/nb"
    assert "solution edition" not in after["alice/nb.ipynb"]["flags"]
    assert "solution edition" in after["bob/nb.ipynb"]["flags"]
    assert f"relative to {tmp_path / 'class'}" in capsys.readouterr().out


def test_a_late_student_is_named_in_the_class(tmp_path, books, no_checkers):
    """A late student graded alone is named in the class's folder, which holds the
    sheet's other submissions; graded beside a regrade, in the regrade's."""
    alice, bob = _class(tmp_path, books)
    out = tmp_path / "grades.csv"
    main([str(alice), str(bob), "--out", str(out), "--chapter", "1"])
    carol = write(books["solution"], tmp_path / "class" / "carol" / "nb.ipynb")
    main([str(carol), "--out", str(out), "--chapter", "1"])
    dave = write(books["solution"], tmp_path / "class" / "dave" / "nb.ipynb")
    main([str(dave), str(alice), "--out", str(out), "--chapter", "1"])
    assert sorted((r["student_id"], r["submission"]) for r in rows(out)) == [
        (f"{who}/nb", f"{who}/nb.ipynb") for who in ("alice", "bob", "carol", "dave")]


def test_a_regrade_that_two_rows_could_name_is_refused_before_grading(
        tmp_path, books, no_checkers, capsys):
    alice, bob = _class(tmp_path, books)
    out = tmp_path / "grades.csv"
    main([str(alice), str(bob), "--out", str(out), "--chapter", "1"])
    # a run that named alice's file by its own folder left a row "nb.ipynb" too
    main([str(alice), "--out", str(out), "--chapter", "1",
          "--class-folder", str(alice.parent)])
    before, calls = out.read_text(), len(no_checkers)
    with pytest.raises(SystemExit) as stop:
        main([str(alice), "--out", str(out), "--chapter", "1"])
    assert stop.value.code == 2 and len(no_checkers) == calls, "graded before refusing"
    err = capsys.readouterr().err
    assert "alice/nb.ipynb" in err and "'nb.ipynb'" in err and "--class-folder" in err
    assert out.read_text() == before
    # the teacher says which: the class's folder
    main([str(alice), "--out", str(out), "--chapter", "1",
          "--class-folder", str(tmp_path / "class")])
    assert len(rows(out)) == 3


@pytest.mark.parametrize("paths, names, expected", [
    (["c/alice/nb.ipynb"], ["alice/nb.ipynb", "bob/nb.ipynb"], "c"),
    (["c/alice/nb.ipynb"], ["nb.ipynb"], "c/alice"),                  # a flat sheet
    (["c/ada.ipynb", "c/new.ipynb"], ["ada.ipynb", "ben.ipynb"], "c"),
    (["c/carol/nb.ipynb"], ["alice/nb.ipynb"], None),   # nothing to go by on disk
    (["c/carol/nb.ipynb"], ["zed/nb.ipynb", "alice/nb.ipynb"], "c"),  # alice's on disk
    (["c/s1/alice/nb.ipynb"], ["s1/alice/nb.ipynb", "s2/alice/nb.ipynb"], "c"),
])
def test_the_class_folder_read_from_the_sheets_names(paths, names, expected, tmp_path):
    paths = [tmp_path / p for p in paths]
    if "zed/nb.ipynb" in names:
        write_file = tmp_path / "c" / "alice" / "nb.ipynb"
        write_file.parent.mkdir(parents=True)
        write_file.write_text("{}")
    found = class_folder_from_names(paths, names)
    assert found == (None if expected is None else tmp_path / expected)


def test_the_sheets_names_are_read_as_the_grader_wrote_them(tmp_path):
    sheet = tmp_path / "grades.csv"
    sheet.write_text("student_id,submission\n-x,'-x/nb.ipynb\nada,ada.ipynb\n",
                     encoding="utf-8")
    assert submission_names(sheet) == ["-x/nb.ipynb", "ada.ipynb"]
    assert submission_names(tmp_path / "none.csv") == []
    sheet.write_bytes(b"\xff\xfe\x00")
    assert submission_names(sheet) == []


@pytest.mark.parametrize("paths, names, message", [
    (["c/alice/nb.ipynb"], ["alice/nb.ipynb", "nb.ipynb"], "could be the sheet's"),
    (["c1/alice/nb.ipynb", "c2/bob/nb.ipynb"], ["alice/nb.ipynb", "bob/nb.ipynb"],
     "two class folders"),
])
def test_a_class_folder_the_sheet_cannot_tell_is_refused(paths, names, message, tmp_path):
    with pytest.raises(ValueError, match=message):
        class_folder_from_names([tmp_path / p for p in paths], names)


def test_a_flat_folder_keeps_its_file_names(tmp_path, books, no_checkers):
    paths = [write(books["solution"], tmp_path / f"{who}.ipynb") for who in ("ada", "ben")]
    _, graded = grade(paths, chapter=1)
    assert [(g.student_id, g.submission_name) for g in graded] == [
        ("ada", "ada.ipynb"), ("ben", "ben.ipynb")]
