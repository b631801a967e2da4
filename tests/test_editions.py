"""The exercise system: one source per chapter, a student and a solution edition."""

import ast
import re
import subprocess

import jupytext
import pytest

from lncourse.editions import (EXERCISE_HEADER, _Context, build_editions, chapter_sources,
                               myst_to_markdown, stub_solution)

from conftest import ROOT

CHAPTERS = chapter_sources(ROOT)


def test_stub_keeps_signature_and_docstring():
    src = ('def f(x: int) -> int:\n    """Doc."""\n    # BEGIN SOLUTION\n    y = x + 1\n'
           '    return y\n    # END SOLUTION\n\n\ncheck(f)')
    out = stub_solution(src)
    assert 'def f(x: int) -> int:\n    """Doc."""\n    raise NotImplementedError' in out
    assert "return y" not in out and out.endswith("check(f)")
    for bad in ["# BEGIN SOLUTION\nx", "x\n# END SOLUTION", "# BEGIN SOLUTION\n# BEGIN SOLUTION"]:
        with pytest.raises(ValueError):
            stub_solution(bad)


def test_myst_conversion():
    ctx = _Context(3, {"fig-a": 2}, {"brody2023": ("Brody et al.", "2023")})
    md = ("(lbl)=\n```{exercise-start} Title here\n:label: ex-x\n```\n\nBody {cite:p}`brody2023`, "
          "{numref}`fig-a`, {cite:t}`brody2023`, {math}`x^2`.\n\n```{exercise-end}\n```\n\n"
          "```{dropdown} Hint\nUse *P*.\n```\n\n```{admonition} Overview\nLearn.\n```\n"
          "```{math}\na = b\n```")
    out = myst_to_markdown(md, ctx)
    assert "### Exercise 3.1: Title here" in out
    assert "(Brody et al., 2023)" in out and "Brody et al. (2023)" in out
    assert "Figure 3.2" in out and "$x^2$" in out
    assert "<details>\n<summary>Hint</summary>" in out and "> **Overview**" in out
    assert "$$\na = b\n$$" in out
    assert "{" not in out.replace("{numref}", "")
    with pytest.raises(ValueError, match="cannot convert the directive"):
        myst_to_markdown("```{unknowndirective}\n```", ctx)
    with pytest.raises(ValueError, match="cannot convert the role"):
        myst_to_markdown("{weird}`x`", ctx)


def test_no_notebooks_tracked_under_book():
    tracked = subprocess.run(["git", "ls-files", "book"], cwd=ROOT, capture_output=True,
                             text=True).stdout.split()
    assert not [f for f in tracked if f.endswith(".ipynb")]


@pytest.fixture(scope="module", params=CHAPTERS, ids=lambda p: p.stem)
def chapter(request):
    path = request.param
    return path, jupytext.read(path), build_editions(path)


def _functions(source):
    return [n for n in ast.parse(source).body if isinstance(n, ast.FunctionDef)]


def test_parameters_cell(chapter):
    path, nb, _ = chapter
    params = [c for c in nb.cells if "parameters" in c.metadata.get("tags", [])]
    assert len(params) == 1, f"{path.name}: needs exactly one cell tagged 'parameters'"
    assert re.search(r"^FULL = False\b", params[0].source, re.M), "parameters cell must set FULL = False"


def test_chapter_has_label_title_overview_and_five_or_four_exercises(chapter):
    path, nb, _ = chapter
    text = "\n".join(c.source for c in nb.cells if c.cell_type == "markdown")
    assert re.search(r"^\(ch-[\w-]+\)=\n# ", text, re.M), "label and title"
    assert "{admonition} Overview" in text
    n_ex = text.count("{exercise-start}")
    assert n_ex >= (5 if path.name.startswith("01") else 4)
    assert len(EXERCISE_HEADER.findall(text)) == n_ex, "every exercise needs the header line"
    assert text.count("{solution-start}") == n_ex and text.count(":class: dropdown") >= n_ex


def test_exercise_cells_follow_the_convention(chapter):
    path, nb, editions = chapter
    solution_cells = [c for c in nb.cells if c.cell_type == "code" and "# BEGIN SOLUTION" in c.source]
    assert solution_cells
    for cell in solution_cells:
        fns = _functions(cell.source)
        assert len(fns) == 1, f"{path.name}: one function per exercise cell"
        fn = fns[0]
        assert ast.get_docstring(fn), f"{fn.name}: needs a docstring"
        assert fn.returns is not None and all(a.annotation is not None for a in fn.args.args), \
            f"{fn.name}: needs type annotations"
        last = ast.parse(cell.source).body[-1]
        assert isinstance(last, ast.Expr) and isinstance(last.value, ast.Call)
        called = ast.unparse(last.value.func)
        assert called.startswith("checks.check_"), f"{fn.name}: the cell must end with a check"
        assert ast.unparse(last.value.args[0]) == fn.name


def test_student_and_solution_signatures_in_step(chapter):
    _, _, editions = chapter
    student = [c for c in editions["student"].cells if "exercise" in c.metadata.get("tags", [])]
    solution = [c for c in editions["solution"].cells if "exercise" in c.metadata.get("tags", [])]
    assert len(student) == len(solution) > 0
    for st, so in zip(student, solution):
        (f_st,), (f_so,) = _functions(st.source), _functions(so.source)
        assert ast.dump(f_st.args) == ast.dump(f_so.args) and ast.dump(f_st.returns) == ast.dump(f_so.returns)
        assert ast.get_docstring(f_st) == ast.get_docstring(f_so)
        body = [n for n in f_st.body if not (isinstance(n, ast.Expr) and isinstance(n.value, ast.Constant))]
        assert len(body) == 1 and isinstance(body[0], ast.Raise) and "NotImplementedError" in ast.unparse(body[0])
        assert "raises-exception" in st.metadata["tags"]
        assert "# BEGIN SOLUTION" not in st.source


def test_editions_are_colab_ready_and_plain_markdown(chapter):
    _, _, editions = chapter
    for nb in editions.values():
        assert nb.metadata["accelerator"] == "GPU"
        first = nb.cells[0]
        assert "google.colab" in first.source and "pip" in first.source and "git+https://" in first.source
        for cell in nb.cells:
            if cell.cell_type == "markdown":
                assert not re.search(r"```\{|\{[\w:]+\}`", cell.source), cell.source[:200]
