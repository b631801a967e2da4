"""The teacher's assignment file (issue 60, items 1 to 3): exercises chosen and weighted,
partial credit by input, a teacher's own exercise, written answers marked by hand and
merged back; bad files refused with a message naming the key or the line.

``test_a_class_graded_by_an_assignment`` is the issue's done-when in small: three
students of chapter 1, an assignment that subsets and weights the chapter's exercises,
gives one partial credit, adds a teacher's exercise and a written answer; the grade
sheet and the LMS sheet are checked cell by cell, before and after the teacher marks
the written answers. It grades for real (the sandbox), twice."""

import copy
import csv
import io

import nbformat
import pytest

from .test_grade import editions, exercise_cell, with_function
from lncourse.grading.assignment import AssignmentError, load
from lncourse.grading.exercises import chapter as find_chapter
from lncourse.grading.grade import main

CH = find_chapter("01_layernorm_geometry")
P, RMS = "ex-centering-matrix", "ex-rms-norm"
TEACHER_LABEL, WRITTEN = "ex-teacher-softmax-rows", "wr-why-project"

TEACHER_FILE = '''
import torch
from lncourse.grading.teacher import exercise, case

g = torch.Generator().manual_seed(7)
exercise(
    "softmax_rows", params=("x",),
    reference=lambda x: torch.softmax(x, dim=-1),
    cases=[case(torch.randn(3, 5, generator=g, dtype=torch.float64)),
           case(torch.randn(4, 2, generator=g, dtype=torch.float64)),
           case(torch.tensor([[1000.0, 0.0, -5.0]], dtype=torch.float64))],
    mistakes=[("softmax over the columns: each row should sum to 1",
               lambda x: torch.softmax(x, dim=0))],
    title="Softmax by rows")
'''

ASSIGNMENT = '''
chapter = 1
title = "Lab 1"

[exercises]
"1.2" = { points = 4, partial = true }
"ex-rms-norm" = 3

[teacher.softmax_rows]
file = "teacher/exercises.py"
points = 2

[written.wr-why-project]
points = 5
title = "Why project?"
'''

# the right answers, written as a student would (not the solution edition's code)
P_RIGHT = '''
def centering_matrix(d):
    ones = torch.ones(d, d, dtype=torch.float64)
    return torch.eye(d, dtype=torch.float64) - ones / d
'''
P_SMALL_ONLY = '''
def centering_matrix(d):
    if d > 8:      # "works on the small ones": d = 16 fails
        return torch.eye(d, dtype=torch.float64)
    return torch.eye(d, dtype=torch.float64) - torch.full((d, d), 1.0 / d,
                                                         dtype=torch.float64)
'''
RMS_RIGHT = '''
def rms_norm_gain(x, gain, eps):
    scale = torch.rsqrt((x * x).mean(dim=-1, keepdim=True) + eps)
    return x * scale * gain
'''
RMS_NO_EPS = '''
def rms_norm_gain(x, gain, eps):
    return x / (x * x).mean(dim=-1, keepdim=True).sqrt() * gain
'''
SOFTMAX_RIGHT = '''import torch

def softmax_rows(x):
    e = torch.exp(x - x.max(dim=-1, keepdim=True).values)
    return e / e.sum(dim=-1, keepdim=True)
'''
# a submission that reads the teacher's file and runs its reference (TEACHER is filled in)
SOFTMAX_THIEF = '''import torch

def softmax_rows(x):
    spec = {}
    exec(open(TEACHER).read(), spec)       # the teacher's file: hidden from it
    return torch.softmax(x, dim=-1)

TEACHER = "{teacher}"
'''
SOFTMAX_COLUMNS = '''import torch

def softmax_rows(x):
    return torch.softmax(x, dim=0)
'''


def notebook(student, p, rms, softmax, answer):
    nb = student
    if p:
        nb = with_function(nb, P, p)
    if rms:
        nb = with_function(nb, RMS, rms)
    nb = copy.deepcopy(nb)
    nb.cells.append(nbformat.v4.new_code_cell(softmax))
    question = nbformat.v4.new_markdown_cell(answer)
    question.metadata["lncourse"] = {"written": WRITTEN}
    nb.cells.append(question)
    return nb


def table(path):
    with open(path, newline="", encoding="utf-8") as f:
        return list(csv.DictReader(f))


@pytest.fixture(scope="module")
def graded_class(tmp_path_factory):
    root = tmp_path_factory.mktemp("lab1")
    class_dir, teacher_dir = root / "submissions", root / "teacher"
    class_dir.mkdir()
    teacher_dir.mkdir()
    (teacher_dir / "exercises.py").write_text(TEACHER_FILE)
    (root / "lab1.toml").write_text(ASSIGNMENT)
    student = editions(CH.stem)["student"]
    books = {
        "ada.ipynb": notebook(student, P_RIGHT, RMS_RIGHT, SOFTMAX_RIGHT,
                              "The projection removes the mean; the scale sets the norm."),
        "ben.ipynb": notebook(student, P_SMALL_ONLY, RMS_RIGHT, SOFTMAX_COLUMNS,
                              "It makes the keys orthogonal to 1."),
        "cai.ipynb": notebook(student, None, RMS_NO_EPS, SOFTMAX_RIGHT, ""),
        "dan.ipynb": notebook(student, None, None, SOFTMAX_THIEF.replace(
            "{teacher}", str(teacher_dir / "exercises.py")), "*Your answer here.*"),
    }
    for name, nb in books.items():
        nbformat.write(nb, class_dir / name)
    (root / "roster.csv").write_text("file,student_id\nada.ipynb,S1\nben.ipynb,S2\n"
                                     "cai.ipynb,S3\ndan.ipynb,S4\n")
    args = [*(str(class_dir / n) for n in books), "--assignment", str(root / "lab1.toml"),
            "--written", str(root / "written.csv"), "--out", str(root / "grades.csv"),
            "--lms", str(root / "moodle.csv"), "--roster", str(root / "roster.csv"),
            "--feedback", str(root / "feedback"), "--timeout", "30"]
    assert main(args) == 0
    first = {name: (root / name).read_text() for name in
             ("grades.csv", "moodle.csv", "written.csv")}
    first["ben.md"] = (root / "feedback" / "S2.md").read_text()
    # the teacher marks the answers in the spreadsheet, then runs the grader again
    marks = table(root / "written.csv")
    for row in marks:
        row["points"] = {"S1": "4", "S2": "2.5"}.get(row["student_id"], "")
        row["comment"] = "clear" if row["student_id"] == "S1" else ""
    out = io.StringIO()
    writer = csv.DictWriter(out, list(marks[0]))
    writer.writeheader()
    writer.writerows(marks)
    (root / "written.csv").write_text(out.getvalue())
    assert main(args) == 0
    return root, first


HEADER = ["student_id", "name", "submission", P, RMS, TEACHER_LABEL, WRITTEN, "total",
          "max_points", "flags"]


def cells(text):
    return [[r.get(c, "") for c in HEADER] for r in csv.DictReader(io.StringIO(text))]


def test_a_class_graded_by_an_assignment(graded_class):
    """Weights, a subset, partial credit, a teacher's exercise and a written answer, in
    the grade sheet and the LMS sheet, cell by cell; the marks merged on the next run."""
    root, first = graded_class
    assert first["grades.csv"].splitlines()[0] == ",".join(HEADER + ["graded_at"])
    unmarked = "not yet marked: wr-why-project"
    assert cells(first["grades.csv"]) == [
        ["S1", "", "ada.ipynb", "4", "3", "2", "", "9", "14", unmarked],
        ["S2", "", "ben.ipynb", "3", "3", "0", "", "6", "14", unmarked],
        ["S3", "", "cai.ipynb", "0", "0", "2", "0", "2", "14", ""],
        ["S4", "", "dan.ipynb", "0", "0", "0", "0", "0", "14", ""],
    ]
    assert cells((root / "grades.csv").read_text()) == [
        ["S1", "", "ada.ipynb", "4", "3", "2", "4", "13", "14", ""],
        ["S2", "", "ben.ipynb", "3", "3", "0", "2.5", "8.5", "14", ""],
        ["S3", "", "cai.ipynb", "0", "0", "2", "0", "2", "14", ""],
        ["S4", "", "dan.ipynb", "0", "0", "0", "0", "0", "14", ""],
    ]
    lms = list(csv.reader(io.StringIO((root / "moodle.csv").read_text())))
    assert [row[:3] for row in lms] == [
        ["ID number", "Lab 1", "Maximum points"],
        ["S1", "13", "14"], ["S2", "8.5", "14"], ["S3", "2", "14"], ["S4", "0", "14"]]
    # the feedback column: each exercise not passed, with its points as the sheet has them
    said = {row[0]: row[3] for row in lms[1:]}
    assert said["S1"].startswith("<p>13/14 points: ")
    assert "W1: Why project?</strong> (4/5, marked)" in said["S1"]
    assert "1.2" not in said["S1"]
    assert said["S2"].startswith("<p>8.5/14 points: ")
    for part in ("(3/4, partly passed)", "(0/2, not passed)", "(2.5/5, marked)"):
        assert part in said["S2"], part
    assert said["S4"].startswith("<p>0/14 points: ") and said["S4"].count("not passed") == 3
    first_lms = list(csv.reader(io.StringIO(first["moodle.csv"])))
    assert first_lms[1][:3] == ["S1", "9", "14"]
    assert "W1: Why project?</strong> (-/5, not yet marked)" in first_lms[1][3]


def test_written_answers_go_to_the_marks_sheet_and_back(graded_class):
    root, first = graded_class
    head = ["student_id", "submission", "question", "max_points", "points", "comment",
            "answer"]
    got = [[r[c] for c in head] for r in csv.DictReader(io.StringIO(first["written.csv"]))]
    assert got == [
        ["S1", "ada.ipynb", WRITTEN, "5", "", "",
         "The projection removes the mean; the scale sets the norm."],
        ["S2", "ben.ipynb", WRITTEN, "5", "", "", "It makes the keys orthogonal to 1."],
        ["S3", "cai.ipynb", WRITTEN, "5", "", "", ""],
        ["S4", "dan.ipynb", WRITTEN, "5", "", "", ""],       # the placeholder
    ]
    again = table(root / "written.csv")   # the marks survive the second run
    assert [(r["points"], r["comment"]) for r in again] == [("4", "clear"), ("2.5", ""),
                                                           ("", ""), ("", "")]
    feedback = (root / "feedback" / "S1.md").read_text()
    assert "| W1 Why project? | 4/5 | marked |" in feedback
    assert "marked 4/5: clear" in feedback


def test_the_teacher_exercise_names_the_mistake_and_hides_the_inputs(graded_class):
    root, first = graded_class
    ben = first["ben.md"]
    assert "| T1 Softmax by rows | 0/2 | not passed |" in ben
    assert ("softmax_rows: softmax over the columns: each row should sum to 1 (on the "
            "teacher's input 1 of 3)") in ben
    assert "tensor" not in ben.split("## Exercise T1")[1]     # no input echoed
    assert "| 1.2 Build the centring matrix | 3/4 | partly passed |" in ben
    assert "1 of 4 inputs failed; partial credit for the 3 passed" in ben
    ada = (root / "feedback" / "S1.md").read_text()
    assert "| T1 Softmax by rows | 2/2 | passed |" in ada


def test_a_submission_cannot_read_the_teachers_file(graded_class):
    """Dan's function opens the teacher's exercise file by its path: the sandbox does
    not show it (a class's folder, a bound folder or the system's /tmp alike)."""
    root, _ = graded_class
    dan = (root / "feedback" / "S4.md").read_text()
    assert "| T1 Softmax by rows | 0/2 | not passed |" in dan
    assert "FileNotFoundError" in dan or "PermissionError" in dan


def test_the_teachers_folders_are_hidden_from_every_learner(tmp_path, monkeypatch):
    """The folders of the assignment file and of the teacher's exercise file join the
    class's folders in what every learner's sandbox hides (``Job.hide``)."""
    from lncourse.grading import grade as grade_module
    from lncourse.grading.grade import Outcome, grade
    seen = []

    def run(jobs, workers, template=True):
        seen.extend(jobs)
        return [[Outcome(True, "stand-in") for _ in job.programs] for job in jobs]
    monkeypatch.setattr(grade_module, "run_jobs", run)
    (tmp_path / "class").mkdir()
    nb = tmp_path / "class" / "a.ipynb"
    nbformat.write(editions(CH.stem)["student"], nb)
    (tmp_path / "setup").mkdir()
    path = _files(tmp_path / "setup", "[exercises]\n\"1.2\" = 1\n[teacher.softmax_rows]\n"
                  "file = \"teacher/exercises.py\"\npoints = 1\n")
    grade([nb], assignment=load(path))
    assert set(seen[0].hide) == {str((tmp_path / d).resolve())
                                 for d in ("class", "setup", "setup/teacher")}


def test_a_changed_answer_loses_its_mark(tmp_path):
    """A mark belongs to the answer it was given for (nbgrader keeps a checksum)."""
    from types import SimpleNamespace
    from lncourse.grading import written
    g = SimpleNamespace(submission="x/a.ipynb", submission_name="a.ipynb", student_id="A")
    path = tmp_path / "w.csv"
    written.merge(path, [g], {WRITTEN: 5.0}, {"x/a.ipynb": {WRITTEN: "first"}})
    path.write_text(path.read_text().replace(",5,,,first", ",5,3,,first"))
    assert written.merge(path, [g], {WRITTEN: 5.0},
                         {"x/a.ipynb": {WRITTEN: "first"}})[("a.ipynb", WRITTEN)]["_mark"] == 3
    row = written.merge(path, [g], {WRITTEN: 5.0},
                        {"x/a.ipynb": {WRITTEN: "second"}})[("a.ipynb", WRITTEN)]
    assert row["_mark"] is None and "changed since it was marked 3" in row["comment"]


def test_chapter_3s_student_edition_hands_out_a_written_answer_cell(tmp_path):
    """The chapter's source marks the cell; the student edition carries the marker, and
    the grader reads what the student wrote there (the placeholder is no answer)."""
    from lncourse.grading import written
    nb = editions("03_majority")["student"]
    marked = [c for c in nb.cells if c.metadata.get("lncourse", {}).get("written")]
    assert [(c.cell_type, c.metadata["lncourse"]["written"], c.source) for c in marked] \
        == [("markdown", "wr-majority-scale", written.PLACEHOLDER)]
    nbformat.write(nb, tmp_path / "blank.ipynb")
    assert written.answers(tmp_path / "blank.ipynb") == {"wr-majority-scale": ""}
    marked[0].source = "The scale sets the logits' size.\n\nA run at fixed scale."
    nbformat.write(nb, tmp_path / "done.ipynb")
    assert written.answers(tmp_path / "done.ipynb") == {
        "wr-majority-scale": "The scale sets the logits' size.\n\nA run at fixed scale."}


P_BUT_LARGE = '''
def centering_matrix(d):
    if d > 80:     # right on every size but the teacher-only 100
        return torch.eye(d, dtype=torch.float64)
    return torch.eye(d, dtype=torch.float64) - 1.0 / d
'''


def test_partial_credit_counts_the_teacher_only_inputs(tmp_path):
    """With --hidden the share counts the teacher-only inputs, and a failure there says
    it was one (the notebook's own check does not run it)."""
    from lncourse.grading.grade import grade
    nb = tmp_path / "a.ipynb"
    nbformat.write(with_function(editions(CH.stem)["student"], P, P_BUT_LARGE), nb)
    path = _files(tmp_path, "[exercises]\n\"1.2\" = { points = 8, partial = true }\n")
    ch, (g,) = grade([nb], assignment=load(path), hidden=True, hidden_key="k",
                     timeout=30.0)
    o = g.outcomes[P]
    # 4 visible sizes and 3 drawn from the key (checks.layernorm); the large one fails
    assert (o.passed, o.score, g.points(ch)) == (False, 6 / 7, 6.86)
    assert o.message.startswith("(on a teacher-only input, which the notebook's own "
                                "check does not run) centering_matrix:")
    assert "1 of 7 inputs failed; partial credit for the 6 passed" in o.message


def test_a_teacher_exercise_by_reference_or_by_property(tmp_path, capsys):
    """The teacher's check, called in-process as the checker calls it: a reference
    without named mistakes, and a property instead of a reference."""
    import torch
    from lncourse.grading import teacher
    (tmp_path / "ex.py").write_text(
        "import torch\n"
        "from lncourse.grading.teacher import case, exercise\n"
        "exercise('unit_rows', params=('x',), cases=[case(torch.ones(2, 3)),\n"
        "         case(torch.arange(6.0).reshape(3, 2) + 1)],\n"
        "         property=lambda y, x: None if torch.allclose(y.norm(dim=-1),\n"
        "             torch.ones(len(x))) else 'a row is not of length 1')\n"
        "exercise('double', params=('x',), cases=[case(torch.arange(3.0))],\n"
        "         reference=lambda x: 2 * x,\n"
        "         forbidden={'torch.mul': 'add x to itself instead'})\n")
    unit = teacher.load(tmp_path / "ex.py", "unit_rows")
    unit.check(lambda x: x / x.norm(dim=-1, keepdim=True))
    assert capsys.readouterr().out == ("check_unit_rows passed: has the property asked on 2 "
                                         "inputs\n")
    with pytest.raises(AssertionError, match=r"^unit_rows: a row is not of length 1 \(on "
                                             r"the teacher's input 1 of 2\)$"):
        unit.check(lambda x: x)
    double = teacher.load(tmp_path / "ex.py", "double")
    with pytest.raises(AssertionError, match=r"^double: your output differs from the "
                                             r"reference \(on the teacher's input 1 of 1\)$"):
        double.check(lambda x: x + 1)
    assert double.check(lambda x: x + 1, hidden=True) is None   # no input of its own
    with pytest.raises(AssertionError, match="add x to itself instead"):
        double.check(lambda x: torch.mul(x, 2))


def test_a_sheet_of_another_assignment_is_not_merged_into(tmp_path, monkeypatch, capsys):
    """A regrade merges into the sheet only if its columns are this assignment's."""
    from lncourse.grading import grade as grade_module
    from lncourse.grading.grade import Outcome
    monkeypatch.setattr(grade_module, "run_jobs", lambda jobs, workers, template=True: [
        [Outcome(True, "stand-in") for _ in job.programs] for job in jobs])
    nb = tmp_path / "a.ipynb"
    nbformat.write(editions(CH.stem)["student"], nb)
    first = _files(tmp_path, "[exercises]\n\"1.2\" = 1\n")
    main([str(nb), "--out", str(tmp_path / "g.csv"), "--assignment", str(first)])
    (tmp_path / "b").mkdir()
    again = _files(tmp_path / "b", "[exercises]\n\"1.4\" = 1\n")
    with pytest.raises(SystemExit, match="graded by another assignment file"):
        main([str(nb), "--out", str(tmp_path / "g.csv"), "--assignment", str(again)])
    assert table(tmp_path / "g.csv")[0][P] == "1"


# ------------------------------------------------------------------- bad input
def _files(tmp_path, assignment, teacher=TEACHER_FILE):
    (tmp_path / "teacher").mkdir(exist_ok=True)
    (tmp_path / "teacher" / "exercises.py").write_text(teacher)
    (tmp_path / "a.toml").write_text(assignment)
    return tmp_path / "a.toml"


@pytest.mark.parametrize("text, message", [
    ("chapter = 1\n[exercises]\n\"1.2\" = 4\n\"1.3\" = \n", r"not valid TOML: .*line 4"),
    ("chapter = 1\npoints = 3\n", r"unknown key 'points'"),
    ("[exercises]\n\"1.2\" = -1\n", r"\[exercises\] \"1.2\"\.points: points must be a "
                                    r"number >= 0, not -1"),
    ("[exercises]\n\"1.2\" = { points = 2, partal = true }\n", r"unknown key 'partal'"),
    ("[exercises]\n\"1.2\" = { points = 2, partial = 1 }\n", r"partial: must be bool"),
    ("[written.why]\npoints = 2\n", r"\[written.why\]: a written question's name"),
    ("[teacher.softmax_rows]\nfile = \"teacher/exercises.py\"\n", r"give its points"),
    ("[teacher.softmax_rows]\nfile = \"nope.py\"\npoints = 1\n", r"nope.py: no such file"),
    ("[teacher.soft_max]\nfile = \"teacher/exercises.py\"\npoints = 1\n",
     r"declares no exercise\('soft_max', \.\.\.\) \(it declares: softmax_rows\)"),
])
def test_a_bad_assignment_file_is_refused_with_its_key(text, message, tmp_path):
    with pytest.raises(AssignmentError, match=message):
        load(_files(tmp_path, text))


def test_an_unknown_exercise_is_refused_naming_the_chapters(tmp_path):
    a = load(_files(tmp_path, "[exercises]\n\"1.9\" = 2\n"))
    with pytest.raises(AssignmentError, match=r"\"1.9\": chapter 1 has no such exercise; "
                                              r"its exercises are 1.1 \(ex-layer-norm-fgh\)"):
        a.apply(CH)


@pytest.mark.parametrize("teacher, message", [
    ("import torch\nx = 1\ny = x.nope\n", r"exercises.py, line 3: AttributeError: 'int'"),
    ("def f(:\n", r"exercises.py, line 1: syntax error"),
    (TEACHER_FILE.replace("dim=-1)", "dim=-1) / 0", 1),
     r"exercise 'softmax_rows': the reference returns NaN or inf on input 1"),
    (TEACHER_FILE.replace("torch.softmax(x, dim=0)", "torch.softmax(x, dim=-1)"),
     r"the mistake 'softmax over the columns.*passes every input"),
    (TEACHER_FILE.replace("cases=[", "cases=[case(torch.ones(2, 2), 3), "),
     r"the reference raised TypeError on input 1"),
])
def test_a_teacher_file_with_an_error_gets_a_clear_message(teacher, message, tmp_path):
    text = "[teacher.softmax_rows]\nfile = \"teacher/exercises.py\"\npoints = 1\n"
    with pytest.raises(AssignmentError, match=message):
        load(_files(tmp_path, text, teacher))


def test_the_command_line_refuses_a_bad_assignment_before_grading(tmp_path, capsys):
    nb = tmp_path / "a.ipynb"
    nbformat.write(editions(CH.stem)["student"], nb)
    path = _files(tmp_path, "[exercises]\n\"1.2\" = { points = -2 }\n")
    with pytest.raises(SystemExit) as info:
        main([str(nb), "--out", str(tmp_path / "g.csv"), "--assignment", str(path)])
    assert info.value.code == 2
    err = capsys.readouterr().err
    assert "--assignment:" in err and "points must be a number >= 0, not -2" in err
    assert "Traceback" not in err and not (tmp_path / "g.csv").exists()
    unknown = _files(tmp_path, "chapter = 1\n[exercises]\n\"1.9\" = 2\n")
    with pytest.raises(SystemExit):
        main([str(nb), "--out", str(tmp_path / "g.csv"), "--assignment", str(unknown)])
    assert "--assignment: " in (err := capsys.readouterr().err)
    assert "[exercises] \"1.9\": chapter 1 has no such exercise" in err
    written = _files(tmp_path, "[written.wr-a]\npoints = 2\n")
    with pytest.raises(SystemExit):
        main([str(nb), "--out", str(tmp_path / "g.csv"), "--assignment", str(written)])
    assert "declares written answers: pass --written FILE" in capsys.readouterr().err
    (tmp_path / "w.csv").write_text("student_id,submission,question,max_points,points\n"
                                    "A,a.ipynb,wr-a,2,lots\n")
    with pytest.raises(SystemExit):
        main([str(nb), "--out", str(tmp_path / "g.csv"), "--assignment", str(written),
              "--written", str(tmp_path / "w.csv")])
    assert "w.csv, line 2: points 'lots' is not a number" in capsys.readouterr().err
