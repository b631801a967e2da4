"""The autograder on synthetic classes built from the editions: the solution, the blank
student notebook, every known mistake of every check, and the submissions that try to
break the grader or to fool it. The grade sheets are checked exactly."""

import copy
import csv
import re
import time

import nbformat
import pytest

from answers import RIGHT, WRONG
from conftest import ROOT
from editions import build_editions
from myst import read_book
from lncourse.grading.exercises import CHAPTERS, chapter as find_chapter
from lncourse.grading.grade import feedback, grade, write_csv
from lncourse.grading.submission import program_for, read_submission

TIMEOUT = 60.0     # seconds per exercise: ample for every check here
LOOP_TIMEOUT = 5.0  # for the notebook with an infinite loop
BOOK = read_book(ROOT)


def editions(stem):
    return build_editions(ROOT / "book" / f"{stem}.md", BOOK)


def exercise_cell(nb, label):
    return next(c for c in nb.cells if c.metadata.get("lncourse", {}).get("exercise") == label)


def with_function(nb, label, source):
    """A copy of ``nb`` whose exercise cell defines the function as ``source`` does."""
    nb = copy.deepcopy(nb)
    cell = exercise_cell(nb, label)
    check_call = cell.source.strip().splitlines()[-1]
    cell.source = f"{source.strip()}\n\n\n{check_call}"
    return nb


def sheet(path):
    """The grade sheet's rows by submission (the file's name)."""
    with open(path, newline="") as f:
        return {row["submission"]: row for row in csv.DictReader(f)}


def points(label):
    return next(e.points for ch in CHAPTERS for e in ch.exercises if e.label == label)


def mistake_class(stem, folder):
    """The solution, the blank notebook, and submission k = the k-th wrong answer to every
    exercise that has one (the solution elsewhere). Returns paths and expected rows."""
    ch = find_chapter(stem)
    books = editions(stem)
    expected, messages = {}, {}
    rounds = max(len(WRONG[e.function]) for e in ch.exercises)
    for name, nb, row in [("solution", books["solution"], {e.label: 1 for e in ch.exercises}),
                          ("blank", books["student"], {e.label: 0 for e in ch.exercises})]:
        nbformat.write(nb, folder / f"{name}.ipynb")
        expected[f"{folder / name}.ipynb"] = row
    for k in range(rounds):
        nb, row = books["solution"], {}
        for e in ch.exercises:
            answers = WRONG[e.function]
            if k < len(answers):
                nb = with_function(nb, e.label, answers[k].source)
                messages[(f"mistake{k}", e.label)] = answers[k].match
            row[e.label] = int(k >= len(answers))
        nbformat.write(nb, folder / f"mistake{k}.ipynb")
        expected[f"{folder / f'mistake{k}'}.ipynb"] = row
    return expected, messages


def assert_sheet(path, expected, labels):
    """``expected``: passed (1) or not (0) by exercise; the sheet holds points."""
    rows = sheet(path)
    assert list(rows) == [name.rsplit("/", 1)[-1] for name in expected]
    for name, row in expected.items():
        name = name.rsplit("/", 1)[-1]
        got = {label: int(rows[name][label]) for label in labels}
        assert got == {label: passed * points(label) for label, passed in row.items()}, name
        assert int(rows[name]["total"]) == sum(got.values())


# 13-23 s a chapter: the test command grades chapter 4's (seven exercises, the newest
# check), the slow suite every chapter's (tests/checks runs every check on every listed
# mistake in the test command too, without the grader)
@pytest.mark.parametrize("stem", [c.stem if c.stem == "04_nope" else
                                  pytest.param(c.stem, marks=pytest.mark.slow)
                                  for c in CHAPTERS[1:] if c.exercises])
def test_every_known_mistake_is_graded_and_named(stem, tmp_path):
    ch = find_chapter(stem)
    expected, messages = mistake_class(stem, tmp_path)
    _, graded = grade(list(expected), timeout=TIMEOUT)
    write_csv(ch, graded, tmp_path / "grades.csv")
    assert_sheet(tmp_path / "grades.csv", expected, [e.label for e in ch.exercises])
    by_name = {g.submission.rsplit("/", 1)[-1][:-6]: g for g in graded}
    for (name, label), match in messages.items():
        assert re.search(match, by_name[name].outcomes[label].message), (name, label)
    assert "not done" in by_name["blank"].outcomes[ch.exercises[0].label].message


# --------------------------------------------------------------- chapter 1: the full class
CRASH = """
def layer_norm_fgh(x, gamma, beta, eps):
    return x / 0 if x.sum() > 1e9 else 1 / 0
"""
OUT_OF_MEMORY = """
def rms_norm_gain(x, gain, eps):
    eight_gigabytes = torch.empty(10**9, dtype=torch.float64)   # never touched: cheap without a cap
    return x
"""
LOOP = """
def centering_matrix(d):
    while True:
        pass
"""
SYNTAX_ERROR = """
def layer_norm_on_plane(s, t, v)
    return s
"""
RENAMED = """
def my_rms_norm(x, gain, eps):
    return x / torch.sqrt((x * x).mean(-1, keepdim=True) + eps) * gain
"""
TAMPERING_IN_THE_FUNCTION = """
def layer_norm_fgh(x, gamma, beta, eps):
    import lncourse.checks._core as core
    import lncourse.checks._compare as compare
    core.compare = compare.compare = lambda *args, **kwargs: (True, 0.0, "")
    print("check_layer_norm_fgh passed: matches the reference on 5 inputs")
    return x
"""
SMUGGLED = """
def rms_norm_gain(x, gain, eps):
    class Answer:   # unpickling it where the check runs would patch the check
        def __reduce__(self):
            return (exec, ("import lncourse.checks._compare as c, lncourse.checks._core as k\\n"
                           "k.compare = c.compare = lambda *a, **kw: (True, 0.0, '')",))
    return Answer()
"""
HARD_CODED = """
def centering_matrix(d):
    # the check's inputs are d = 3, 5, 16 and 2: answer those, and nothing else
    if d in (2, 3, 5, 16):
        return torch.eye(d, dtype=torch.float64) - torch.ones(d, d, dtype=torch.float64) / d
    return torch.zeros(d, d, dtype=torch.float64)
"""
CHATTY = """
def layer_norm_fgh(x, gamma, beta, eps):
    print("x" * 5_000_000)
    c = x - x.mean(-1, keepdim=True)
    return c / torch.sqrt((c * c).mean(-1, keepdim=True) + eps) * gamma + beta
"""


def tampered(solution):
    """A wrong Jacobian whose check is replaced in the notebook, with a faked passing
    output, and a LayerNorm that monkeypatches the checks from inside."""
    nb = with_function(solution, "ex-layer-norm-jacobian",
                       "def layer_norm_jacobian(x, gamma, eps):\n    return torch.eye(len(x), dtype=x.dtype)")
    cell = exercise_cell(nb, "ex-layer-norm-jacobian")
    cell.outputs = [nbformat.v4.new_output(
        "stream", name="stdout", text="check_layer_norm_jacobian passed: matches the reference\n")]
    patch = nbformat.v4.new_code_cell(
        "checks.check_layer_norm_jacobian = lambda fn: print('check_layer_norm_jacobian passed')\n"
        "import lncourse.checks.layernorm_grad\n"
        "lncourse.checks.layernorm_grad.check_layer_norm_jacobian = checks.check_layer_norm_jacobian")
    nb.cells.insert(nb.cells.index(cell), patch)
    nb = with_function(nb, "ex-rms-norm", SMUGGLED)
    return with_function(nb, "ex-layer-norm-fgh", TAMPERING_IN_THE_FUNCTION)


@pytest.fixture(scope="module")
def chapter1(tmp_path_factory):
    folder = tmp_path_factory.mktemp("chapter1")
    ch = find_chapter("01_layernorm_geometry")
    expected, messages = mistake_class(ch.stem, folder)
    solution = editions(ch.stem)["solution"]
    ones = {e.label: 1 for e in ch.exercises}
    fgh, p, plane, fold, rms, jac = ("ex-layer-norm-fgh", "ex-centering-matrix", "ex-layer-norm-on-plane",
                                  "ex-fold-into-linear", "ex-rms-norm", "ex-layer-norm-jacobian")
    deleted = copy.deepcopy(solution)
    deleted.cells.remove(exercise_cell(deleted, fold))
    no_metadata = copy.deepcopy(solution)
    no_metadata.metadata.pop("lncourse")
    no_metadata.metadata.pop("colab")
    specials = {
        "crash": (with_function(with_function(solution, fgh, CRASH), rms, OUT_OF_MEMORY),
                  {**ones, fgh: 0, rms: 0}),
        "broken": (with_function(with_function(with_function(solution, plane, SYNTAX_ERROR),
                                               rms, RENAMED), p, HARD_CODED),
                   {**ones, plane: 0, rms: 0}),
        "deleted": (deleted, {**ones, fold: 0}),
        "tampered": (tampered(solution), {**ones, fgh: 0, rms: 0, jac: 0}),
        "chatty": (with_function(solution, fgh, CHATTY), ones),
        "no_metadata": (no_metadata, ones),
        "other_chapter": (editions("03_majority")["solution"], {e.label: 0 for e in ch.exercises}),
    }
    for name, (nb, row) in specials.items():
        nbformat.write(nb, folder / f"{name}.ipynb")
        expected[f"{folder / name}.ipynb"] = row
    (folder / "not_a_notebook.ipynb").write_text("this is not JSON")
    expected[f"{folder / 'not_a_notebook'}.ipynb"] = {e.label: 0 for e in ch.exercises}
    _, graded = grade(list(expected), timeout=TIMEOUT)
    write_csv(ch, graded, folder / "grades.csv")
    return ch, folder, expected, messages, {g.submission.rsplit("/", 1)[-1][:-6]: g for g in graded}


def test_chapter1_sheet_is_exact(chapter1):
    ch, folder, expected, _, _ = chapter1
    assert_sheet(folder / "grades.csv", expected, [e.label for e in ch.exercises])
    header = (folder / "grades.csv").read_text().splitlines()[0]
    assert header == ("student_id,name,submission," + ",".join(e.label for e in ch.exercises)
                      + ",total,max_points,flags,graded_at")


def test_chapter1_mistakes_are_named(chapter1):
    _, _, _, messages, graded = chapter1
    for (name, label), match in messages.items():
        assert re.search(match, graded[name].outcomes[label].message), (name, label)


def test_failures_of_every_kind_get_a_clear_note(chapter1):
    ch, _, _, _, graded = chapter1
    fgh, p, plane, fold, rms, jac = ("ex-layer-norm-fgh", "ex-centering-matrix", "ex-layer-norm-on-plane",
                                  "ex-fold-into-linear", "ex-rms-norm", "ex-layer-norm-jacobian")
    message = lambda name, label: graded[name].outcomes[label].message
    assert "raised ZeroDivisionError" in message("crash", fgh)
    assert "ran out of memory" in message("crash", rms)
    assert "has a syntax error (line 1: expected ':')" in message("broken", plane)
    assert "defines `my_rms_norm` but not `rms_norm_gain`" in message("broken", rms)
    assert "missing (deleted?)" in message("deleted", fold)
    assert re.search(r"printed [\d,]{9,} characters", " ".join(graded["chatty"].outcomes[fgh].notes))
    assert "chapter 3's" in " ".join(graded["other_chapter"].notes)
    assert "could not be read as a notebook" in " ".join(graded["not_a_notebook"].notes)
    assert "from the functions it defines" in " ".join(graded["no_metadata"].notes)


def test_an_infinite_loop_scores_zero_for_that_exercise_only(tmp_path):
    """The loop's exercise stops at the time limit; the others are graded as usual
    (here the loop's notebook keeps one other exercise, to keep the test short)."""
    ch = find_chapter("01_layernorm_geometry")
    nb = with_function(editions(ch.stem)["solution"], "ex-centering-matrix", LOOP)
    keep = {"ex-centering-matrix", "ex-rms-norm"}
    nb.cells = [c for c in nb.cells if c.metadata.get("lncourse", {}).get("exercise", "ex-rms-norm") in keep]
    nbformat.write(nb, tmp_path / "loop.ipynb")
    start = time.monotonic()
    _, (graded,) = grade([tmp_path / "loop.ipynb"], timeout=LOOP_TIMEOUT)
    # the loop's call is stopped within its limit stretched by the load (at most 3 times);
    # the rest is the learner's start and the other exercise
    assert time.monotonic() - start < LOOP_TIMEOUT * 3 + 60
    assert {label: o.passed for label, o in graded.outcomes.items()} == {
        e.label: e.label == "ex-rms-norm" for e in ch.exercises}
    assert (f"time limit of {LOOP_TIMEOUT:.2g} s ran out"
            in graded.outcomes["ex-centering-matrix"].message)
    write_csv(ch, [graded], tmp_path / "grades.csv")
    row = ",".join(str(e.points) if e.label == "ex-rms-norm" else "0" for e in ch.exercises)
    lines = (tmp_path / "grades.csv").read_text().splitlines()
    assert lines[1].startswith(f"loop,,loop.ipynb,{row},{points('ex-rms-norm')},"
                               f"{sum(e.points for e in ch.exercises)},solution edition,")


def test_tampering_gains_nothing(chapter1):
    ch, _, _, _, graded = chapter1
    outcomes = graded["tampered"].outcomes
    assert not outcomes["ex-layer-norm-jacobian"].passed
    assert "differs from the reference" in outcomes["ex-layer-norm-jacobian"].message
    assert not outcomes["ex-layer-norm-fgh"].passed
    assert "got Answer" in outcomes["ex-rms-norm"].message     # plain data only, no pickles


def test_feedback_lists_each_failed_check_message(chapter1):
    ch, _, _, _, graded = chapter1
    text = feedback(ch, graded["mistake0"])
    assert text.startswith("# Feedback on mistake0.ipynb")
    assert "unbiased variance (dividing by d - 1)" in text and "| 1.1 LayerNorm from f, g and h | 0/1 | not passed |" in text
    assert "## Exercise 1.2" in text and "divide the all-ones matrix by d" in text


def test_a_hard_coded_answer_passes_the_visible_inputs(chapter1):
    """HARD_CODED passes the notebook's own check; the hidden inputs catch it
    (test_grade_attacks.py::test_hidden_inputs_catch_a_hard_coded_answer, graded in the
    attack tests' run, which is hidden)."""
    ch, folder, _, _, graded = chapter1
    assert graded["broken"].outcomes["ex-centering-matrix"].passed        # visible inputs only


def test_only_what_an_exercise_needs_runs():
    """Chapter 3's training and chapter 1's MiniLM never run: an exercise's program holds
    the imports its function uses and the function, nothing else."""
    path = ROOT / "_build" / "test_grade_ch3.ipynb"
    path.parent.mkdir(exist_ok=True)
    nbformat.write(editions("03_majority")["solution"], path)
    sub = read_submission(path)
    for e in find_chapter("03_majority").exercises:
        program, _ = program_for(sub, e)
        code = "\n".join(
            ast_line for _, source, indices in program.cells
            for ast_line in _statements(source, indices))
        assert "train" not in code and "make_dataset" not in code and f"def {e.function}" in code
    path.unlink()


def _statements(source, indices):
    import ast
    body = ast.parse(source).body
    return [ast.unparse(body[i]) for i in indices]


def test_names_are_followed_through_helpers_and_constants(tmp_path):
    nb = copy.deepcopy(editions("04_nope")["solution"])
    cell = exercise_cell(nb, "ex-running-mean")
    cell.source = ("def running_mean(v):\n    return helper(v) * SCALE\n\n\n"
                   "checks.check_running_mean(running_mean)")
    nb.cells.insert(nb.cells.index(cell), nbformat.v4.new_code_cell(
        "SCALE = 1.0\nexpensive = train_for_hours()\n\ndef helper(v):\n"
        "    return v.cumsum(-2) / torch.arange(1, v.shape[-2] + 1, dtype=v.dtype)[:, None]"))
    nbformat.write(nb, tmp_path / "helpers.ipynb")
    running_mean = next(e for e in find_chapter("04_nope").exercises
                        if e.function == "running_mean")
    program, _ = program_for(read_submission(tmp_path / "helpers.ipynb"), running_mean)
    code = [s for _, source, indices in program.cells for s in _statements(source, indices)]
    assert "SCALE = 1.0" in code and any(s.startswith("def helper") for s in code)
    assert not any("train_for_hours" in s for s in code)


def _first_line_of_body(source: str, line: str) -> str:
    """``source`` (a right answer's def) with ``line`` as the first statement of its body."""
    head, _, rest = source.partition(":\n")
    return f"{head}:\n    {line}\n{rest}"


@pytest.mark.slow
@pytest.mark.parametrize("stem", ["01_layernorm_geometry", "03_majority"])
def test_thirty_submissions_grade_in_under_two_minutes(stem, tmp_path):
    """A class of 30 (solutions, blank notebooks, and notebooks with a known mistake in
    every exercise), graded by the command a teacher runs, on the 2-core CPU. Issue 34:
    one solution's first exercise never returns and another's allocates 20 GB; each
    loses that exercise only, and the class still grades within 60 s on a quiet 2-core
    machine. The bound asserted is 120 s, for the slow suite beside other work,
    stretched by the load average beyond the cores (a busy machine is slow, not
    broken); the time, the load and the bound are printed."""
    import os
    import subprocess
    import sys

    ch = find_chapter(stem)
    books = editions(stem)
    first = ch.exercises[0]
    spoiled = {25: "while True: pass", 28: "__import__('torch').ones(5 * 2**30)  # 20 GB"}
    for k in range(30):
        nb = books["student"] if k % 3 == 0 else books["solution"]
        if k % 3 == 2:
            for e in ch.exercises:
                if WRONG[e.function]:
                    nb = with_function(nb, e.label, WRONG[e.function][k % len(WRONG[e.function])].source)
        if k in spoiled:
            nb = with_function(nb, first.label, _first_line_of_body(
                RIGHT[first.function][0].source, spoiled[k]))
        nbformat.write(nb, tmp_path / f"s{k:02d}.ipynb")
    start, before = time.monotonic(), os.getloadavg()[0]
    subprocess.run([sys.executable, "-m", "lncourse.grading.grade", *sorted(map(str, tmp_path.glob("*.ipynb"))),
                    "--out", str(tmp_path / "grades.csv"), "--feedback", str(tmp_path / "fb")],
                   check=True, cwd=ROOT, capture_output=True)
    seconds, cores = time.monotonic() - start, os.cpu_count() or 1
    load = max(before, os.getloadavg()[0])
    # a busy machine slows the class down without failing it: the 120 s stretch by the
    # load beyond the cores (the sandboxed children run outside this process's rusage,
    # so CPU time cannot stand in for it)
    bound = 120 * max(1.0, load / cores)
    print(f"30 submissions of {stem}: {seconds:.0f} s, load average {load:.1f} on "
          f"{cores} cores (bound {bound:.0f} s)")
    assert seconds < bound, f"30 submissions took {seconds:.0f} s (load {load:.1f})"
    rows = sheet(tmp_path / "grades.csv")
    assert len(rows) == 30 and len(list((tmp_path / "fb").glob("*.md"))) == 30
    full = sum(e.points for e in ch.exercises)
    assert [int(r["total"]) for r in rows.values()] == [
        (full - first.points if k in spoiled else full) if k % 3 == 1 else 0
        for k in range(30)]


# ------------------------------- issue 60, items 4 and 7: judged by what it computes, named
# (stem, label, function source, the message's pattern; None: it passes)
SIGNATURES = {
    "01_layernorm_geometry": [
        ("ex-rms-norm", "def rms_norm_gain(v, g, epsilon):\n"
                        "    return v / torch.sqrt((v * v).mean(-1, keepdim=True) + epsilon) * g",
         None),
        ("ex-layer-norm-fgh", "def layer_norm_fgh(x, gamma, beta):\n    return x",
         r"should take 4 parameters, in this order: \(x, gamma, beta, eps\); their names "
         r"are yours to choose .* but yours takes \(x, gamma, beta\)"),
        # a float32 tensor made inside: the hint; every tensor float64: none
        ("ex-layer-norm-jacobian",
         "def layer_norm_jacobian(x, gamma, eps):\n"
         "    d = len(x)\n    c = x - x.mean()\n    s = torch.sqrt((c * c).mean() + eps)\n"
         "    z = c / s\n    P = (torch.eye(d) - torch.ones(d, d) / d).double()\n"
         "    return gamma[:, None] * (P - torch.outer(z, z) / d) / s",
         r"differs from the reference.*rounding of float32"),
        ("ex-fold-into-linear",
         "def fold_into_linear(W, b, gamma, beta):\n"
         "    d = W.shape[1]\n"
         "    P = torch.eye(d, dtype=W.dtype) - torch.ones(d, d, dtype=W.dtype) / d\n"
         "    return (W * gamma) @ P, W @ beta + b * (1 + 1e-7)",
         r"^fold_into_linear: your output differs from the reference on input .*: "
         r"the folded b \(item 1 of the tuple\): largest difference [0-9.e-]+$"),
    ],
    "03_majority": [
        ("ex-query-angle",
         "def query_angle(q):\n"
         "    cos = q.sum(-1) / (q.norm(dim=-1) * math.sqrt(q.shape[-1]))\n"
         "    return torch.rad2deg(torch.acos(cos.abs().clamp(max=1.0)))", None),
        ("ex-projection-main-effect",
         "def projection_main_effect(c, conf=0.95):\n    return 0.0, 0.0, 0.0",
         r"should have a parameter named `level`: the check calls it by keyword, "
         r"projection_main_effect\(cells, level=...\)"),
    ],
    "05_norms": [
        ("ex-dyt", "def dyt(inputs, a, weight, bias):\n"
                   "    return weight * torch.tanh(a * inputs) + bias", None),
        ("ex-qk-logit-bound", "def qk_logit_bound(gains_q, gains_k):\n"
                              "    return math.sqrt(gains_q.shape[-1]) * "
                              "(gains_q * gains_k).abs().amax(-1)", None),
        ("ex-fraction-along-ones", "def fraction_along_ones(h, d):\n    return h",
         r"should take 1 parameter, \(h\); its name is yours to choose"),
    ],
}


@pytest.mark.parametrize("stem", [pytest.param(s, marks=pytest.mark.replay)   # 3.5 reads runs
                                  if s == "03_majority" else s for s in SIGNATURES])
def test_names_are_free_where_the_check_calls_in_order(stem, tmp_path):
    """Issue 60, item 4 (and 7's float32 hint and named outputs): through the grader, a
    right answer whose parameters are renamed passes, a wrong number of parameters and a
    renamed keyword are refused with messages that say so; the notebook's own check gives
    the same verdict and message."""
    nb = editions(stem)["solution"]
    for label, source, _ in SIGNATURES[stem]:
        nb = with_function(nb, label, source)
    nbformat.write(nb, tmp_path / "renamed.ipynb")
    _, graded = grade([str(tmp_path / "renamed.ipynb")], timeout=TIMEOUT)
    outcomes = graded[0].outcomes
    ch = find_chapter(stem)
    for e in ch.exercises:
        expect = next((m for label, _, m in SIGNATURES[stem] if label == e.label), None)
        outcome = outcomes[e.label]
        assert outcome.passed == (expect is None), (e.label, outcome.message)
        if expect is not None:
            assert re.search(expect, outcome.message), (e.label, outcome.message)
    from lncourse import checks
    import math as _math
    import numpy as _np
    import torch as _torch
    for label, source, expect in SIGNATURES[stem]:
        function = next(e.function for e in ch.exercises if e.label == label)
        namespace = {"torch": _torch, "np": _np, "math": _math, "Tensor": _torch.Tensor}
        exec(source, namespace)
        check = getattr(checks, f"check_{function}")
        if expect is None:
            check(namespace[function])
        else:
            with pytest.raises(AssertionError) as info:
                check(namespace[function])
            assert re.search(expect, str(info.value)), str(info.value)
            assert str(info.value) == outcomes[label].message
