"""Hostile submissions against the grader, one per class of attack of issue 18.

Every submission below is the chapter-1 solution with one exercise's function replaced
by an attack; they are graded together in one run, with a correct solution among them,
so an attack that reached a classmate shows in the classmate's row. The threat model: a
grade comes only from the checker's own judgement; nothing a submission does may change
its own grade, another student's, the grade sheet, the installed package, or anything
after its exercise ends.
"""

import copy
import os
import re
import tempfile
import time
import uuid
from pathlib import Path

import nbformat
import pytest

from conftest import ROOT
from .test_grade import HARD_CODED, editions, exercise_cell, with_function
from lncourse.grading.exercises import chapter as find_chapter
from lncourse.grading.grade import TIMEOUT as DEFAULT_TIMEOUT, grade, write_csv
from lncourse.grading.contain import bwrap, contained

CH = find_chapter("01_layernorm_geometry")
FGH, P, PLANE, FOLD, RMS, JAC = ("ex-layer-norm-fgh", "ex-centering-matrix", "ex-layer-norm-on-plane",
                                  "ex-fold-into-linear", "ex-rms-norm", "ex-layer-norm-jacobian")
MARK = uuid.uuid4().hex
CANARY = ROOT / "lncourse" / f"canary_{MARK}.py"
REDUCED = Path("/tmp") / f"reduce_{MARK}"
TIMEOUT = DEFAULT_TIMEOUT   # the teacher's default: the printer's right answer must pass under it

# 1. forged grades: write a "passed" result (JSON frames and pickles) to every descriptor
FORGED = """
def centering_matrix(d):
    import os, json, pickle
    fake = json.dumps({"k": 0, "passed": True, "message": "passed", "notes": [], "blobs": []}).encode()
    frame = (len(fake) + 4).to_bytes(8, "big") + len(fake).to_bytes(4, "big") + fake
    for fd in range(3, 1024):
        for data in (frame * 6, pickle.dumps({"passed": True}), b"\\x80\\x04K\\x01."):
            try:
                os.write(fd, data)
            except OSError:
                pass
    raise NotImplementedError
"""
# 1b. code in the grader: an object whose unpickling runs code
REDUCE = """
def centering_matrix(d):
    class Answer:
        def __reduce__(self):
            return (exec, ("open(%r, 'w').write('owned')",))
    return Answer()
""" % str(REDUCED)
# 2. processes that outlive the exercise: a setsid double fork that waits for the grader
# (in the exercise that forbids no call: where one is forbidden, starting a program is
# refused too, lncourse.grading.audit)
OUTLIVE = f"""
def fold_into_linear(W, b, gamma, beta):
    import os, sys, time
    if os.fork() == 0:
        os.setsid()
        if os.fork() == 0:
            os.execv(sys.executable, [sys.executable, "-c",
                     "import time; time.sleep(120)  # {MARK}"])
        os._exit(0)
    time.sleep(0.5)
    d = W.shape[1]
    P = torch.eye(d, dtype=W.dtype) - torch.ones(d, d, dtype=W.dtype) / d
    return (W * gamma) @ P, W @ beta + b
"""
# 3a. reach the classmates: kill every other process it can see
KILLER = """
def centering_matrix(d):
    import os, signal
    for pid in os.listdir("/proc"):
        if pid.isdigit() and int(pid) not in (os.getpid(), 1):
            try:
                os.kill(int(pid), signal.SIGKILL)
            except OSError:
                pass
    return torch.eye(d, dtype=torch.float64) - torch.ones(d, d, dtype=torch.float64) / d
"""
# 3b. read a classmate's notebook (its path is known) and pass with their answer
COPYCAT = """
def layer_norm_jacobian(x, gamma, eps):
    import json
    nb = json.load(open(%r))
    source = next("".join(c["source"]) for c in nb["cells"]
                  if "def layer_norm_jacobian" in "".join(c["source"]))
    space = {"torch": torch, "math": math}
    exec(source.split("checks.")[0], space)
    return space["layer_norm_jacobian"](x, gamma, eps)
"""
# 3c. write into the installed package
WRITER = """
def rms_norm_gain(x, gain, eps):
    open(%r, "w").write("import os")
    return x / torch.sqrt((x * x).mean(-1, keepdim=True) + eps) * gain
""" % str(CANARY)
# 4. memory: a huge answer, and a frame that claims to be huge
HUGE = """
def centering_matrix(d):
    return torch.zeros(200 * 2**20 // 8, dtype=torch.float64)
"""
HUGE_FRAME = """
def centering_matrix(d):
    import os
    for fd in range(3, 64):
        try:
            os.write(fd, (2**40).to_bytes(8, "big"))
        except OSError:
            pass
    import time
    time.sleep(60)
"""
# 6. the checks' references (the teacher's key) and hidden inputs from the learner's process
REFERENCE = """
def layer_norm_fgh(x, gamma, beta, eps):
    from lncourse.checks.key.layernorm import REFERENCES
    return REFERENCES["layer_norm_fgh"](x, gamma, beta, eps)
"""
HIDDEN_SIZES = """
def centering_matrix(d):
    import lncourse, os, re
    text = open(os.path.join(os.path.dirname(lncourse.__file__), "checks", "layernorm.py")).read()
    if "def check_centering_matrix" in text:    # the checks could be read: right answers
        return torch.eye(d, dtype=torch.float64) - torch.ones(d, d, dtype=torch.float64) / d
    return torch.zeros(d, d, dtype=torch.float64)
"""
ATEN = """
def layer_norm_fgh(x, gamma, beta, eps):
    return torch.ops.aten.native_layer_norm(x, [x.shape[-1]], gamma, beta, eps)[0]
"""
GROUP = """
def layer_norm_fgh(x, gamma, beta, eps):
    y = torch.nn.functional.group_norm(x.reshape(-1, x.shape[-1]), 1, eps=eps).reshape(x.shape)
    return y * gamma + beta
"""
RMS_CALL = """
def rms_norm_gain(x, gain, eps):
    return torch.nn.functional.rms_norm(x, x.shape[-1:], gain, eps)
"""
LINEARIZE = """
def layer_norm_jacobian(x, gamma, eps):
    f = lambda v: torch.nn.functional.layer_norm(v, v.shape, gamma, None, eps)
    _, jvp = torch.func.linearize(lambda v: (v - v.mean()) / torch.sqrt(v.var(unbiased=False) + eps) * gamma, x)
    return torch.stack([jvp(e) for e in torch.eye(len(x), dtype=x.dtype)], 1)
"""
HELPER = """
def centering_matrix(d):
    from lncourse.layernorm import projection_matrix
    return projection_matrix(d, dtype=torch.float64)
"""
# 7. output capture: a correct function that prints in a loop
PRINTER = """
def rms_norm_gain(x, gain, eps):
    for i in range(100_000):
        print("step", i)
    return x / torch.sqrt((x * x).mean(-1, keepdim=True) + eps) * gain
"""

ATTACKS = {   # name: (exercise label, source)
    "forged": (P, FORGED), "reduce": (P, REDUCE), "outlive": (FOLD, OUTLIVE),
    "killer": (P, KILLER), "writer": (RMS, WRITER), "huge": (P, HUGE),
    "huge_frame": (P, HUGE_FRAME), "reference": (FGH, REFERENCE),
    "hidden_sizes": (P, HIDDEN_SIZES), "aten": (FGH, ATEN), "group_norm": (FGH, GROUP),
    "rms_norm": (RMS, RMS_CALL), "linearize": (JAC, LINEARIZE), "helper": (P, HELPER),
    "printer": (RMS, PRINTER),
}


def only(nb, labels):
    """``nb`` keeping the exercise cells ``labels`` (and every cell that is no exercise's)."""
    nb = copy.deepcopy(nb)
    nb.cells = [c for c in nb.cells
                if c.metadata.get("lncourse", {}).get("exercise", labels[0]) in labels]
    return nb


@pytest.fixture(scope="module")
def attacked():
    # the class sits outside /tmp (bubblewrap gives the learner an empty /tmp of its own):
    # what hides it must be the grader's hiding of the class's folder
    folder = ROOT / "_build" / f"attacks-{MARK}"
    folder.mkdir(parents=True)
    solution = editions(CH.stem)["solution"]
    paths = {"classmate": folder / "classmate.ipynb"}
    nbformat.write(solution, paths["classmate"])
    for name, (label, source) in ATTACKS.items():
        if name == "killer" and not contained():
            continue      # without bubblewrap it could kill this test's own process
        paths[name] = folder / f"{name}.ipynb"
        nbformat.write(only(with_function(solution, label, source), [label]), paths[name])
    paths["copycat"] = folder / "copycat.ipynb"
    nbformat.write(only(with_function(solution, JAC, COPYCAT % str(paths["classmate"])), [JAC]),
                   paths["copycat"])
    # graded in this run too (each grading run starts a template, seconds each): a
    # hard-coded answer for the hidden inputs, and the malformed notebooks of section 5
    paths["hard_coded"] = folder / "hard_coded.ipynb"
    nbformat.write(only(with_function(solution, P, HARD_CODED), [P]), paths["hard_coded"])
    for name in _write_malformed(solution, folder):
        paths[name] = folder / f"{name}.ipynb"
    before = set(Path(tempfile.gettempdir()).glob("lncourse-grade-*"))
    start = time.monotonic()
    _, graded = grade(list(paths.values()), chapter=1, hidden=True, timeout=TIMEOUT, workers=2)
    seconds = time.monotonic() - start
    write_csv(CH, graded, folder / "grades.csv")
    left = set(Path(tempfile.gettempdir()).glob("lncourse-grade-*")) - before
    yield {name: g for name, g in zip(paths, graded)}, folder, seconds, left
    CANARY.unlink(missing_ok=True)
    import shutil
    shutil.rmtree(folder, ignore_errors=True)


def outcome(attacked, name):
    graded = attacked[0]
    label = ATTACKS[name][0] if name in ATTACKS else P if name == "hard_coded" else JAC
    return graded[name].outcomes[label]


def test_the_classmate_graded_in_the_same_run_keeps_full_marks(attacked):
    graded = attacked[0]
    assert graded["classmate"].total == len(CH.exercises), {
        label: o.message for label, o in graded["classmate"].outcomes.items() if not o.passed}


def test_forged_results_on_every_descriptor_score_nothing(attacked):
    assert not outcome(attacked, "forged").passed


def test_an_object_with_reduce_runs_no_code_in_the_grader(attacked):
    assert not outcome(attacked, "reduce").passed
    assert not REDUCED.exists()


def test_no_process_outlives_its_exercise(attacked):
    alive = []
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            if MARK.encode() in Path(f"/proc/{pid}/cmdline").read_bytes():
                alive.append(pid)
        except OSError:
            pass
    assert alive == []
    assert outcome(attacked, "outlive").passed       # it is a correct answer otherwise


@pytest.mark.skipif(not contained(), reason="needs bubblewrap or Landlock ABI 6")
def test_killing_every_visible_process_hurts_only_itself(attacked):
    """It sees only its own sandbox: killing its own learner process ends its exercise,
    and the classmate graded beside it keeps full marks."""
    graded = attacked[0]
    assert graded["classmate"].total == len(CH.exercises)
    assert set(graded["killer"].outcomes) == {e.label for e in CH.exercises}


@pytest.mark.skipif(not contained(), reason="needs bubblewrap or Landlock ABI 6")
def test_a_classmates_notebook_cannot_be_read(attacked):
    assert not outcome(attacked, "copycat").passed
    assert re.search("No such file|Permission denied", outcome(attacked, "copycat").message)


def test_the_installed_package_cannot_be_written(attacked):
    assert not CANARY.exists()


def test_huge_answers_and_frames_are_refused_by_the_receiver(attacked):
    assert not outcome(attacked, "huge").passed
    assert "larger than" in outcome(attacked, "huge").message
    huge = outcome(attacked, "huge_frame")
    assert not huge.passed and "refused" in huge.message and "allowed" in huge.message


def test_the_checks_cannot_be_imported_by_the_learner(attacked):
    message = outcome(attacked, "reference").message
    assert not outcome(attacked, "reference").passed and "cannot be imported" in message


@pytest.mark.skipif(not contained(), reason="needs bubblewrap or Landlock ABI 6")
def test_the_hidden_inputs_cannot_be_read(attacked):
    assert not outcome(attacked, "hidden_sizes").passed


def test_hidden_inputs_catch_a_hard_coded_answer(attacked):
    """An answer right on the visible inputs only (it passes them in the chapter-1 class
    of test_grade.py) fails on a teacher-only input; the classmate's solution passes them
    all (test_the_classmate_graded_in_the_same_run_keeps_full_marks: this run is hidden)."""
    o = outcome(attacked, "hard_coded")
    assert not o.passed
    # its input was drawn from the key: the message names its kind, not its value
    assert "on a teacher-only input: an int" in o.message, o.message


@pytest.mark.parametrize("name, called", [
    ("aten", "aten.native_layer_norm"), ("group_norm", "group_norm"),
    ("rms_norm", "rms_norm"), ("linearize", "linearize"), ("helper", "projection_matrix")])
def test_forbidden_routes_are_closed(attacked, name, called):
    o = outcome(attacked, name)
    assert not o.passed and called in o.message, o.message


def test_printing_in_a_loop_does_not_time_out_a_correct_answer(attacked):
    o = outcome(attacked, "printer")
    assert o.passed, o.message
    assert any("printed" in n for n in o.notes)


def test_no_temporary_folder_is_left_behind(attacked):
    assert attacked[3] == set()


# 5. malformed notebooks: each becomes a row of zeros with a note, and the class is graded
# (they are graded in the attacked class above, beside the classmate's solution)
def _malformed(code):
    cell = lambda i: {"cell_type": "code", "source": f"a{i} = {i}", "metadata": {},
                      "outputs": [], "execution_count": None}
    return {
        "cells_as_strings": lambda nb: nb.__setitem__("cells", ["a", "b"]),
        "cells_as_a_dict": lambda nb: nb.__setitem__("cells", {"a": 1}),
        "integer_source": lambda nb: nb["cells"][code[0]].__setitem__("source", 5),
        "source_of_ints": lambda nb: nb["cells"][code[0]].__setitem__("source", [1, 2]),
        "list_metadata": lambda nb: nb.__setitem__("metadata", [1]),
        "list_cell_metadata": lambda nb: nb["cells"][code[0]].__setitem__("metadata", [1]),
        "list_label": lambda nb: nb["cells"][code[1]]["metadata"].__setitem__(
            "lncourse", {"exercise": ["ex-rms-norm"]}),
        "deep_json": None,
        "twenty_thousand_cells": lambda nb: nb["cells"].extend(cell(i) for i in range(20_000)),
    }


def _write_malformed(solution, folder) -> list[str]:
    """The malformed notebooks (spoilt copies of the solution's RMSNorm exercise) in
    ``folder``; returns their names."""
    import json
    text = nbformat.writes(only(solution, [RMS]))
    code = [i for i, c in enumerate(json.loads(text)["cells"]) if c["cell_type"] == "code"]
    names = []
    for name, spoil in _malformed(code).items():
        path = folder / f"{name}.ipynb"
        names.append(name)
        if spoil is None:
            path.write_text("[" * 100_000 + "]" * 100_000)
            continue
        nb = json.loads(text)
        spoil(nb)
        path.write_text(json.dumps(nb))
    return names


def test_malformed_notebooks_get_a_row_of_zeros_and_a_note(attacked):
    from lncourse.grading.submission import read_submission
    graded, folder = attacked[0], attacked[1]
    start = time.monotonic()
    assert read_submission(folder / "twenty_thousand_cells.ipynb").notes
    assert time.monotonic() - start < 5           # refused at once, not parsed for 86 s
    assert graded["classmate"].outcomes[RMS].passed
    for name in _malformed([0, 1]):
        g = graded[name]
        assert g.total == 0 and "could not be read as a notebook" in " ".join(g.notes), g
    # a row each on the sheet, the malformed ones included
    assert len((folder / "grades.csv").read_text().splitlines()) == len(graded) + 1


# 8. the command line and what it writes
@pytest.mark.parametrize("option", [["--timeout", "nan"], ["--timeout", "0"], ["--timeout", "-1"],
                                    ["--timeout", "inf"], ["--workers", "-1"],
                                    ["--workers", "0"], ["--memory-mb", "0"]])
def test_bad_command_line_values_are_refused(option, tmp_path, capsys):
    from lncourse.grading.grade import main
    with pytest.raises(SystemExit) as exit:
        main(["nothing.ipynb", "--out", str(tmp_path / "g.csv"), *option])
    assert exit.value.code == 2 and "out of range" in capsys.readouterr().err
    assert not (tmp_path / "g.csv").exists()


def test_sheets_for_the_teacher(tmp_path, capsys):
    """Student IDs (metadata when asked, roster, file-name pattern), points set by the chapter, a
    flagged solution edition, the LMS sheet, a regrade that merges, and names that try
    to inject a formula into the CSV and Markdown into the feedback."""
    import csv
    import json
    from lncourse.grading.grade import main
    books = editions(CH.stem)
    student = only(books["student"], [RMS])
    right = only(with_function(books["student"], RMS, """
def rms_norm_gain(x, gain, eps):
    return x / torch.sqrt((x * x).mean(-1, keepdim=True) + eps) * gain
"""), [RMS])
    right.metadata["lncourse"]["student_id"] = "s-from-metadata"
    nbformat.write(right, tmp_path / "a.ipynb")
    nbformat.write(student, tmp_path / "=HYPERLINK(1)`](x)<b>.ipynb")
    nbformat.write(student, tmp_path / "id_42_blank.ipynb")
    nbformat.write(only(books["solution"], [RMS]), tmp_path / "copied.ipynb")
    (tmp_path / "roster.csv").write_text("file,student_id\ncopied.ipynb,s-roster\n")
    paths = [str(tmp_path / n) for n in ("a.ipynb", "=HYPERLINK(1)`](x)<b>.ipynb",
                                        "id_42_blank.ipynb", "copied.ipynb")]
    sheet, lms, fb = tmp_path / "grades.csv", tmp_path / "lms.csv", tmp_path / "fb"
    main([*paths, "--out", str(sheet), "--lms", str(lms), "--feedback", str(fb),
          "--roster", str(tmp_path / "roster.csv"), "--id-pattern", r"^id_(\d+)_",
          "--id-from-metadata", "--workers", "2", "--timeout", str(TIMEOUT)])
    rows = {r["student_id"]: r for r in csv.DictReader(open(sheet))}
    assert set(rows) == {"s-from-metadata", "'=HYPERLINK(1)`](x)<b>", "42", "s-roster"}
    points = next(e.points for e in CH.exercises if e.label == RMS)
    assert rows["s-from-metadata"][RMS] == str(points) and rows["42"][RMS] == "0"
    assert rows["s-from-metadata"]["max_points"] == str(sum(e.points for e in CH.exercises))
    assert rows["s-roster"]["flags"] == "solution edition" and rows["42"]["flags"] == ""
    assert "FLAGGED" in capsys.readouterr().out
    text = open(lms).read().splitlines()
    assert text[0] == f"ID number,Chapter {CH.number}: {CH.title},Maximum points,Feedback"
    assert any(line.startswith("'=HYPERLINK") for line in text)
    md = (fb / "_HYPERLINK_1____x__b_.md").read_text()
    assert "\\`\\]" in md and "\\<b\\>" in md and "](x)<b>" not in md
    # a regrade of one student merges into the sheet
    nbformat.write(only(with_function(books["student"], RMS, """
def rms_norm_gain(x, gain, eps):
    return x / torch.sqrt((x * x).mean(-1, keepdim=True) + eps) * gain
"""), [RMS]), tmp_path / "id_42_blank.ipynb")
    main([paths[2], "--out", str(sheet), "--id-pattern", r"^id_(\d+)_", "--timeout", str(TIMEOUT)])
    again = {r["student_id"]: r for r in csv.DictReader(open(sheet))}
    assert set(again) == set(rows) and again["42"][RMS] == str(points)
    assert again["s-from-metadata"] == rows["s-from-metadata"]
    assert not list(tmp_path.glob(".grades.csv.*"))      # the atomic write left no temporary


def test_a_failed_write_leaves_the_old_sheet_whole(tmp_path, monkeypatch):
    from lncourse.grading import sheet as grade_sheet
    (tmp_path / "grades.csv").write_text("old sheet\n")
    def full_disk(fd):
        raise OSError(28, "No space left on device")
    monkeypatch.setattr(grade_sheet.os, "fsync", full_disk)
    with pytest.raises(OSError):
        grade_sheet.atomic_write(tmp_path / "grades.csv", "new")
    assert (tmp_path / "grades.csv").read_text() == "old sheet\n"
    assert [p.name for p in tmp_path.iterdir()] == ["grades.csv"]


# 9. the submitted files themselves (issue 34): links, FIFOs, devices and huge files are
# refused with a line in the sheet, and read without following or blocking; identical
# code is flagged for the teacher
def _refusals(tmp_path):
    solution = editions(CH.stem)["solution"]
    lastterm = tmp_path / "last_term"
    lastterm.mkdir()
    nbformat.write(solution, lastterm / "ada.ipynb")
    folder = tmp_path / "class"
    folder.mkdir()
    nbformat.write(solution, folder / "classmate.ipynb")
    (folder / "zero.ipynb").symlink_to("/dev/zero")
    (folder / "copy_of_classmate.ipynb").symlink_to(folder / "classmate.ipynb")
    (folder / "last_term.ipynb").symlink_to(lastterm / "ada.ipynb")
    os.mkfifo(folder / "fifo.ipynb")
    with open(folder / "huge.ipynb", "wb") as f:          # sparse: no disk used
        f.truncate(40 * 2**20)
    (folder / "Eve_9_assignsubmission_file").symlink_to(lastterm, target_is_directory=True)
    return folder, {
        "zero.ipynb": "symbolic link", "copy_of_classmate.ipynb": "symbolic link",
        "last_term.ipynb": "symbolic link", "fifo.ipynb": "FIFO",
        "huge.ipynb": "more than the", "Eve_9_assignsubmission_file/ada.ipynb": "folder"}


def test_links_fifos_and_huge_files_are_refused_at_once(tmp_path):
    """Read directly, each is refused in well under a second: /dev/zero is not read for
    seconds, the FIFO does not block, a link to a classmate's notebook is not graded."""
    import signal
    from lncourse.grading.submission import read_submission
    folder, expected = _refusals(tmp_path)
    signal.signal(signal.SIGALRM, lambda *_: (_ for _ in ()).throw(TimeoutError("blocked")))
    signal.alarm(20)
    try:
        for name, why in expected.items():
            start = time.monotonic()
            sub = read_submission(folder / name)
            assert time.monotonic() - start < 1, name
            assert sub.refused and why in sub.refused and not sub.statements, (name, sub.refused)
    finally:
        signal.alarm(0)
    if os.path.exists("/dev/null") and os.geteuid() != 0:
        sub = read_submission("/dev/null")      # a device, named directly
        assert "character device" in sub.refused


def test_refused_files_get_a_clear_line_in_the_sheet(tmp_path, monkeypatch):
    """Graded as a class beside a classmate: a row of zeros each, flagged "refused: ...";
    the classmate's row is untouched. (The checks are replaced by a stand-in that passes
    every exercise it is given: a refused file is given none.)"""
    import csv
    from lncourse.grading import grade as grade_module
    from lncourse.grading.grade import Outcome, main
    monkeypatch.setattr(grade_module, "run_jobs", lambda jobs, workers, template=True: [
        [Outcome(True, "stand-in")] * len(job.programs) for job in jobs])
    folder, expected = _refusals(tmp_path)
    paths = [str(folder / "classmate.ipynb")] + [str(folder / n) for n in expected]
    main([*paths, "--out", str(tmp_path / "g.csv"), "--chapter", "1"])
    rows = {r["submission"]: r for r in csv.DictReader(open(tmp_path / "g.csv"))}
    assert rows["classmate.ipynb"]["total"] == str(sum(e.points for e in CH.exercises))
    for name, why in expected.items():
        assert rows[name]["total"] == "0" and "refused: " in rows[name]["flags"], rows[name]
        assert why in rows[name]["flags"]


def test_identical_code_is_flagged(tmp_path, monkeypatch):
    """Two notebooks with the same answers, laid out differently (blank lines, spaces,
    comments), are flagged as identical; a third, with its own code, is not."""
    from lncourse.grading import grade as grade_module
    from lncourse.grading.grade import Outcome, grade
    monkeypatch.setattr(grade_module, "run_jobs", lambda jobs, workers, template=True: [
        [Outcome(True, "stand-in")] * len(job.programs) for job in jobs])
    solution = editions(CH.stem)["solution"]
    nbformat.write(solution, tmp_path / "a.ipynb")
    spaced = copy.deepcopy(solution)
    for c in spaced.cells:
        if c.cell_type == "code" and not c.source.lstrip().startswith(("%", "!")):
            c.source = "# my own work\n\n" + c.source.replace(" = ", "  =  ") + "\n\n"
    nbformat.write(spaced, tmp_path / "b.ipynb")
    own = with_function(solution, P, """
def centering_matrix(d):
    return torch.eye(d, dtype=torch.float64) - 1.0 / d
""")
    nbformat.write(own, tmp_path / "c.ipynb")
    _, graded = grade([tmp_path / n for n in ("a.ipynb", "b.ipynb", "c.ipynb")])
    flags = {g.submission_name: "; ".join(g.flags) for g in graded}
    assert "identical code to b.ipynb" in flags["a.ipynb"]
    assert "identical code to a.ipynb" in flags["b.ipynb"]
    assert "identical" not in flags["c.ipynb"]


# 10. fair to every right answer (issue 34): the time limit holds per call (CPU time, and
# wall time stretched by the machine's load), and right answers written with a cell
# magic, a star import, a sparse tensor or a big-endian array are graded as right
FAIR = {
    FGH: """%%time
def layer_norm_fgh(x, gamma, beta, eps):
    c = x - x.mean(-1, keepdim=True)
    return c / torch.sqrt((c * c).mean(-1, keepdim=True) + eps) * gamma + beta
""",
    PLANE: """
def layer_norm_on_plane(s, t, v):
    return sqrt(v.shape[-1]) * torch.sign(s)[:, None] * v      # sqrt: from math import *
""",
    P: """
def centering_matrix(d):
    P = torch.eye(d, dtype=torch.float64) - torch.ones(d, d, dtype=torch.float64) / d
    return P.to_sparse()
""",
    FOLD: """
def fold_into_linear(W, b, gamma, beta):
    d = W.shape[1]
    P = torch.eye(d, dtype=W.dtype) - torch.ones(d, d, dtype=W.dtype) / d
    M, c = ((W * gamma) @ P).numpy(), (W @ beta + b).numpy()
    return M.astype(M.dtype.newbyteorder(">")), c.astype(c.dtype.newbyteorder(">"))
""",
    RMS: """
def rms_norm_gain(x, gain, eps):
    import time
    time.sleep(1.0)                       # slow, and chatty, on every call
    for i in range(100_000):
        print("step", i)
    %time y = x / torch.sqrt((x * x).mean(-1, keepdim=True) + eps) * gain
    return y
""",
}
FAIR_TIMEOUT = 3.0     # per call; the RMSNorm answer's 4 calls take more than that together


def test_right_answers_written_every_way_pass(tmp_path, monkeypatch):
    """Graded with the load factor held at 1 (the checkers are forks of this process), so
    that what is tested is the limit's being per call, whatever the machine's load."""
    from lncourse.grading import sandbox
    monkeypatch.setattr(sandbox, "load_factor", lambda: 1.0)
    nb = editions(CH.stem)["solution"]
    for label, source in FAIR.items():
        nb = with_function(nb, label, source)
        if label == FGH:     # the magic goes first in the cell, as a learner writes it
            cell = exercise_cell(nb, FGH)
            cell.source = source.strip() + "\n" + cell.source.split("\n\n\n", 1)[1]
    nb.cells.insert(1, nbformat.v4.new_code_cell("from math import *"))
    nbformat.write(only(nb, list(FAIR)), tmp_path / "fair.ipynb")
    _, (g,) = grade([tmp_path / "fair.ipynb"], chapter=1, timeout=FAIR_TIMEOUT, workers=1)
    assert {label: g.outcomes[label].passed for label in FAIR} == dict.fromkeys(FAIR, True), {
        label: g.outcomes[label].message for label in FAIR}


@pytest.mark.parametrize("load, cores, factor", [(0.3, 2, 1.0), (4.0, 2, 2.0), (40.0, 2, 3.0)])
def test_the_wall_clock_limit_stretches_with_the_load(load, cores, factor, monkeypatch):
    from lncourse.grading import sandbox
    monkeypatch.setattr(sandbox.os, "getloadavg", lambda: (load, load, load))
    monkeypatch.setattr(sandbox.os, "cpu_count", lambda: cores)
    assert sandbox.load_factor() == factor


def test_a_cell_magic_that_is_not_python_says_what_to_change(tmp_path):
    from lncourse.grading.submission import program_for, read_submission
    nb = with_function(editions(CH.stem)["solution"], FGH, "def layer_norm_fgh(x, gamma, beta, eps):\n    return x")
    cell = exercise_cell(nb, FGH)
    cell.source = "%%writefile answer.py\n" + cell.source
    nbformat.write(nb, tmp_path / "magic.ipynb")
    _, problem = program_for(read_submission(tmp_path / "magic.ipynb"), CH.exercises[0])
    assert "cell magic %%writefile" in problem and "without %%writefile" in problem, problem


# ----------------------------------------------- the class's chapter, which no student sways
def _subs(*stems):
    from types import SimpleNamespace
    return [SimpleNamespace(chapter=None if s is None else SimpleNamespace(stem=s))
            for s in stems]


def test_extra_files_of_one_student_cannot_decide_the_class_chapter():
    """A student who hands in many files claiming another chapter has one vote; a tie,
    or a class without a majority, is refused and the teacher names the chapter."""
    from lncourse.grading.submission import UnclearChapter, chapter_of_class

    ch1, ch3 = "01_layernorm_geometry", "03_majority"
    # three honest students; mallory hands in five chapter-3 files: chapter 1 still
    subs = _subs(ch1, ch1, ch1, *[ch3] * 5)
    who = ["ann", "ben", "cleo", *["mallory"] * 5]
    assert chapter_of_class(subs, who).stem == ch1
    # one honest student and one attacker: a 1-1 tie decides nothing
    with pytest.raises(UnclearChapter, match=r"--chapter N"):
        chapter_of_class(_subs(ch1, ch3, ch3), ["ann", "mallory", "mallory"])
    # a student whose files name two chapters casts no vote
    assert chapter_of_class(_subs(ch1, ch1, ch3), ["ann", "mal", "mal"]).stem == ch1
    with pytest.raises(UnclearChapter, match="1 handed in files of several chapters"):
        chapter_of_class(_subs(ch1, ch3), ["mal", "mal"])
    # without IDs each file votes, as before; no chapter named at all: None
    assert chapter_of_class(_subs(ch3, ch3, ch1)).stem == ch3
    assert chapter_of_class(_subs(None, None)) is None


def test_an_unclear_class_stops_the_grader_with_a_message(tmp_path):
    """The command line prints the reason and grades nobody (no sheet of zeros)."""
    import subprocess
    import sys

    import nbformat

    for name, stem in (("ann.ipynb", "01_layernorm_geometry"), ("bob.ipynb", "03_majority")):
        nb = nbformat.v4.new_notebook(metadata={"lncourse": {"chapter": stem}})
        nbformat.write(nb, tmp_path / name)
    done = subprocess.run([sys.executable, "-m", "lncourse.grading.grade",
                           str(tmp_path / "ann.ipynb"), str(tmp_path / "bob.ipynb"),
                           "--out", str(tmp_path / "grades.csv")],
                          capture_output=True, text=True, timeout=300)
    assert done.returncode != 0 and "--chapter N" in done.stderr, done.stderr[-2000:]
    assert not (tmp_path / "grades.csv").exists()
