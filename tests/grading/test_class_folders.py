"""One folder per student (issue 60, item 9): ``alice/nb.ipynb`` and ``bob/nb.ipynb`` are
two students, named by their path relative to the class's folder; a roster is looked up
by that path; regrading one never deletes the other's row. The checks never run here
(``no_checkers``, as in ``test_identities.py``)."""

from .test_identities import books, no_checkers, rows, write  # noqa: F401 (fixtures)
from lncourse.grading.grade import grade, main


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
    # without --class-folder the regrade is named by its own folder: alice's row stays
    main([str(bob), "--out", str(out), "--chapter", "1"])
    assert ("alice/nb", "alice/nb.ipynb") in {(r["student_id"], r["submission"])
                                              for r in rows(out)}


def test_a_flat_folder_keeps_its_file_names(tmp_path, books, no_checkers):
    paths = [write(books["solution"], tmp_path / f"{who}.ipynb") for who in ("ada", "ben")]
    _, graded = grade(paths, chapter=1)
    assert [(g.student_id, g.submission_name) for g in graded] == [
        ("ada", "ada.ipynb"), ("ben", "ben.ipynb")]
