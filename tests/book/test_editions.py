"""The exercise system: one source per chapter, a student and a solution edition that
read as the site does, and the exercise table the grader uses in step with the sources."""

import ast
import json
import re
import subprocess

import jupytext
import pytest

from conftest import ROOT
from editions import (EXERCISE_HEADER, answer_leaks, build_editions, declared_answers,
                      drop_solution_text, hint_leaks, hints, stub_solution, telltale)
from myst import (NOTEBOOK_GLUE, Context, chapter_exercises, chapter_sources, glued_values,
                  myst_to_markdown, notebook_code, read_book, read_page)
from lncourse import checks
from lncourse.grading.exercises import CHAPTERS, chapter as exercise_chapter

SOURCES = chapter_sources(ROOT)
BOOK = read_book(ROOT)


def test_stub_keeps_signature_and_docstring():
    src = ('def f(x: int) -> int:\n    """Doc."""\n    # BEGIN SOLUTION\n    y = x + 1\n'
           '    return y\n    # END SOLUTION\n\n\ncheck(f)')
    out = stub_solution(src)
    assert 'def f(x: int) -> int:\n    """Doc."""\n    raise NotImplementedError' in out
    assert "return y" not in out and out.endswith("check(f)")
    for bad, message in [("# BEGIN SOLUTION\nx", "without"), ("x\n# END SOLUTION", "without"),
                         ("# BEGIN SOLUTION\n# BEGIN SOLUTION", "inside another")]:
        with pytest.raises(ValueError, match=message):
            stub_solution(bad)


def test_a_page_read_again_is_a_fresh_copy_of_what_the_file_says_now(tmp_path):
    """read_page parses each content of a page once: a second read is a copy (changing
    it changes nothing read later), the same as jupytext's but for the cells' random ids,
    and a page edited since is parsed again."""
    page = tmp_path / "page.md"
    page.write_text(SOURCES[0].read_text(encoding="utf-8"), encoding="utf-8")
    first = read_page(page)
    first.cells[0].source = "changed"
    second = read_page(page)
    fresh = jupytext.read(page)
    assert [(c.cell_type, c.source, c.metadata) for c in second.cells] == \
        [(c.cell_type, c.source, c.metadata) for c in fresh.cells]
    assert second.metadata == fresh.metadata
    page.write_text("# Edited\n\n```{code-cell} ipython3\nx = 1\n```\n", encoding="utf-8")
    assert [c.source for c in read_page(page).cells] == ["# Edited", "x = 1"]


def convert(md: str, chapter: int = 3) -> str:
    return myst_to_markdown(md, Context(chapter, BOOK))


def test_directives_become_plain_markdown():
    md = ("(lbl)=\n```{exercise-start} Title here\n:label: ex-x\n```\n\nBody {math}`x^2`.\n\n"
          "```{exercise-end}\n```\n\n```{dropdown} Hint\nUse *P*.\n```\n\n"
          "```{admonition} Overview\nLearn.\n```\n```{math}\na = b\n```")
    out = convert(md)
    assert "### Exercise 3.1: Title here" in out and "$x^2$" in out
    assert "<details>\n<summary>Hint</summary>" in out and "> **Overview**" in out
    assert "$$\na = b\n$$" in out and "{" not in out
    with pytest.raises(ValueError, match="cannot convert the directive"):
        convert("```{unknowndirective}\n```")
    with pytest.raises(ValueError, match="cannot convert the role"):
        convert("{weird}`x`")


def test_cross_references_read_as_on_the_site():
    out = convert("see chapter {ref}`ch-layernorm`, {numref}`fig-grid` and {ref}`ex-braid-reflect`")
    assert out == (f"see chapter LayerNorm is a projection and a scaling, "
                   f"{BOOK.numbers['fig-grid']} and Exercise 2.3")
    assert BOOK.numbers["fig-grid"].startswith("Figure 2.")
    with pytest.raises(ValueError, match="unknown label"):
        convert("{ref}`ch-nowhere`")


def test_citations_read_as_on_the_site():
    out = convert("{cite:p}`brody2023` (appendix B); {cite:t}`brody2023` (appendix C); "
                  "{cite:p}`zhang2019rmsnorm`; {cite:p}`haviv2022,chi2023`; "
                  "{cite:p}`{see}ba2016{p. 2}`; {cite:p}`blog_geometry`")
    assert "(Brody *et al.*, 2023, appendix B)" in out
    assert "Brody *et al.* (2023, appendix C)" in out
    assert "(Zhang and Sennrich, 2019)" in out
    assert "(Haviv *et al.*, 2022; Chi *et al.*, 2023)" in out
    assert "(see Ba *et al.*, 2016, p. 2)" in out
    assert "(Naiff, 2023)" in out
    assert ") (" not in out and "Anonymous" not in out
    with pytest.raises(ValueError, match="not in book/references.bib"):
        convert("{cite:p}`nobody1999`")


def test_files_a_colab_user_lacks_link_to_the_repository():
    out = convert("run `benchmarks/selectability_grid.py`; the test suite checks it; "
                  "`benchmarks/not_there.py` stays")
    assert f"[`benchmarks/selectability_grid.py`]({BOOK.url}/blob/{BOOK.branch}/benchmarks/selectability_grid.py)" in out
    assert f"[the test suite]({BOOK.url}/tree/{BOOK.branch}/tests)" in out
    assert "`benchmarks/not_there.py` stays" in out


def test_no_notebooks_tracked_under_book():
    tracked = subprocess.run(["git", "ls-files", "book"], cwd=ROOT, capture_output=True,
                             text=True).stdout.split()
    assert not [f for f in tracked if f.endswith(".ipynb")]


def test_the_grader_table_matches_the_sources():
    assert [exercise_chapter(s.stem) for s in SOURCES] == [chapter_exercises(s) for s in SOURCES]
    assert [c.stem for c in CHAPTERS] == [s.stem for s in SOURCES]
    for ch in CHAPTERS:
        for exercise in ch.exercises:
            assert callable(getattr(checks, exercise.check)), exercise.check


@pytest.fixture(scope="module", params=SOURCES, ids=lambda p: p.stem)
def chapter(request):
    path = request.param
    return path, jupytext.read(path), build_editions(path, BOOK)


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
    if path.stem.endswith("_replication"):      # a lesson's replication page (issue 36)
        assert "{exercise-start}" not in text, "exercises belong in the lesson"
        return
    assert "{admonition} Overview" in text
    n_ex = text.count("{exercise-start}")
    assert n_ex >= (5 if path.name.startswith("01") else 4)
    assert len(EXERCISE_HEADER.findall(text)) == n_ex, "every exercise needs the header line"
    assert text.count("{solution-start}") == n_ex and text.count(":class: dropdown") >= n_ex


def test_every_figure_is_cited_by_number_in_its_chapter(chapter):
    """Issue 19: 25 of 28 figures were never cited by number. Each figure is named, and
    the chapter's text cites it ({numref}: "Figure 2.3" on the site and in the notebook)."""
    path, nb, editions = chapter
    figures = [c.metadata["mystnb"]["figure"] for c in nb.cells if c.cell_type == "code"
               and c.metadata.get("mystnb", {}).get("figure")]
    assert figures and all(f.get("name", "").startswith("fig-") for f in figures)
    text = "\n".join(c.source for c in nb.cells if c.cell_type == "markdown")
    cited = set(re.findall(r"\{numref\}`(?:[^`<]*<)?(fig-[\w-]+)>?`", text))
    assert [f["name"] for f in figures if f["name"] not in cited] == []
    notebook = "\n".join(c.source for c in editions["solution"].cells if c.cell_type == "markdown")
    # numbered per chapter: a replication page's figures follow its lesson's, as on the site
    n = int(path.name[:2])
    numbers = [BOOK.numbers[f["name"]] for f in figures]
    assert all(num.startswith(f"Figure {n}.") for num in numbers), numbers
    if not path.stem.endswith("_replication"):
        assert numbers == [f"Figure {n}.{k}" for k in range(1, len(figures) + 1)]
    for num in numbers:
        assert num in notebook


def test_exercise_cells_follow_the_convention(chapter):
    path, nb, editions = chapter
    solution_cells = [c for c in nb.cells if c.cell_type == "code" and "# BEGIN SOLUTION" in c.source]
    assert solution_cells or path.stem.endswith("_replication")   # no exercises there
    for cell in solution_cells:
        fns = _functions(cell.source)
        assert len(fns) == 1, f"{path.name}: one function per exercise cell"
        fn = fns[0]
        assert ast.get_docstring(fn), f"{fn.name}: needs a docstring"
        assert fn.returns is not None and all(a.annotation is not None for a in fn.args.args), \
            f"{fn.name}: needs type annotations"
        last = ast.parse(cell.source).body[-1]
        assert isinstance(last, ast.Expr) and isinstance(last.value, ast.Call)
        assert ast.unparse(last.value.func) == f"checks.check_{fn.name}", \
            f"{fn.name}: the cell must end with checks.check_{fn.name}({fn.name})"
        assert ast.unparse(last.value.args[0]) == fn.name


def test_student_and_solution_in_step_and_labelled(chapter):
    path, _, editions = chapter
    student = [c for c in editions["student"].cells if "exercise" in c.metadata.get("tags", [])]
    solution = [c for c in editions["solution"].cells if "exercise" in c.metadata.get("tags", [])]
    labels = [e.label for e in exercise_chapter(path.stem).exercises]
    assert [c.metadata["lncourse"]["exercise"] for c in student] == labels
    assert [c.metadata["lncourse"]["exercise"] for c in solution] == labels
    for st, so in zip(student, solution):
        (f_st,), (f_so,) = _functions(st.source), _functions(so.source)
        assert ast.dump(f_st.args) == ast.dump(f_so.args) and ast.dump(f_st.returns) == ast.dump(f_so.returns)
        assert ast.get_docstring(f_st) == ast.get_docstring(f_so)
        body = [n for n in f_st.body if not (isinstance(n, ast.Expr) and isinstance(n.value, ast.Constant))]
        assert len(body) == 1 and isinstance(body[0], ast.Raise) and "NotImplementedError" in ast.unparse(body[0])
        assert "# BEGIN SOLUTION" not in st.source
    for nb in editions.values():
        assert nb.metadata["lncourse"]["chapter"] == path.stem


def test_editions_are_colab_ready_and_read_as_the_site(chapter):
    path, nb_source, editions = chapter
    cited = set(re.findall(r"\{cite:[pt]\}`([^`]+)`", "\n".join(
        c.source for c in nb_source.cells if c.cell_type == "markdown")))
    for nb in editions.values():
        assert nb.metadata["accelerator"] == "GPU"
        # neither Colab nor lncourse's dependencies have myst-nb (issue 33)
        assert "myst_nb" not in json.dumps(nb), "myst_nb in a generated notebook"
        assert "computed in a cell above" not in json.dumps(nb)
        first = nb.cells[0]
        assert "google.colab" in first.source and "pip" in first.source and "git+https://" in first.source
        text = "\n".join(c.source for c in nb.cells if c.cell_type == "markdown")
        assert not re.search(r"```\{|\{[\w:]+\}`", text), "MyST left in the notebook"
        assert not re.search(r"\bch [a-z]+\b", text), "a cross-reference rendered as its label"
        assert "Anonymous" not in text
        assert not re.search(r"\d{4}\)? \((appendix|section|figure|table|lemma)", text, re.I), \
            "a locator in its own parentheses after a citation"
        assert not re.search(r"(?<!\[)`benchmarks/", text), "a benchmark path without a link"
        if cited:
            assert nb.cells[-1].source.startswith("## References")


# ------------------------------------------------------- values the prose quotes (issue 33)
def _glue_output(name, bundle, hidden=True):
    """A cell output as myst_nb.glue writes it (display=False: prefixed MIME types)."""
    prefix = "application/papermill.record/" if hidden else ""
    return {"output_type": "display_data", "data": {prefix + k: v for k, v in bundle.items()},
            "metadata": {"scrapbook": {"name": name, "mime_prefix": prefix}}}


def _quote(md, values, strict=True, executed=None):
    ctx = Context(4, read_book(ROOT, executed=executed), values, "book/04_x",
                  unfilled_ok=not strict)
    return myst_to_markdown(md, ctx), ctx


def test_quotes_get_the_executed_builds_values():
    values = {"frac": {"text/plain": "0.123456"}, "claim": {"text/plain": "'a_b *c* $5 <x>'"},
              "n": {"text/plain": "1234"}, "table": {"text/markdown": "**bold** | 3",
                                                       "text/plain": "<Markdown>"}}
    out, ctx = _quote("f {glue:text}`frac:.3f`, {glue:text}`frac:.1%`, n {glue:text}`n:,d`, "
                      "{glue:text}`claim` and {glue:md}`table`; plain {glue}`n`.", values)
    # formatted as MyST-NB formats it on the site; plain text escaped for Markdown
    assert out == (r"f 0.123, 12.3%, n 1,234, a\_b \*c\* \$5 \<x\> and **bold** | 3; "
                   "plain 1234.")
    assert ctx.quoted == ["frac", "frac", "n", "claim", "table", "n"]


def test_a_quote_without_its_value_is_an_error_not_a_placeholder():
    with pytest.raises(ValueError, match="nothing was glued under 'other'"):
        _quote("{glue:text}`other:.2f`", {"frac": {"text/plain": "1.0"}})
    with pytest.raises(ValueError, match="no executed build"):
        _quote("{glue:text}`frac:.2f`", None)
    with pytest.raises(ValueError, match="without text/markdown"):
        _quote("{glue:md}`frac`", {"frac": {"text/plain": "1.0"}})
    # only the tests that execute code and read no prose may leave a quote unfilled
    assert _quote("x {glue:text}`frac:.2f`", None, strict=False)[0] == "x `frac`"


def test_glued_values_read_from_the_sites_build_or_an_executed_notebook(tmp_path):
    (tmp_path / "book").mkdir()
    site = {"a": {"output_type": "display_data", "metadata": {"scrapbook": {"name": "a"}},
                  "data": {"text/plain": "2.5"}}}
    (tmp_path / "book" / "01_x.glue.json").write_text(json.dumps(site))
    assert glued_values(tmp_path, "book/01_x") == {"a": {"text/plain": "2.5"}}
    nb = {"cells": [{"cell_type": "code", "source": "", "outputs": [
        _glue_output("b", {"text/plain": "7"}), _glue_output("c", {"text/plain": "'s'"}, False),
        {"output_type": "stream", "name": "stdout", "text": "printed"}]}]}
    (tmp_path / "book" / "02_y.ipynb").write_text(json.dumps(nb))
    assert glued_values(tmp_path, "book/02_y") == {"b": {"text/plain": "7"},
                                                   "c": {"text/plain": "'s'"}}
    assert glued_values(tmp_path, "book/03_z") is None and glued_values(None, "book/x") is None
    # a quote of another page's value (doc::name) reads that page's build
    out, _ = _quote("{glue:text}`01_x::a:.0f` and {glue:text}`02_y.md::c`", {},
                    executed=tmp_path)
    assert out == "2 and s"


def test_notebooks_import_lncourse_glue_not_myst_nb():
    assert notebook_code("import torch\nfrom myst_nb import glue\nglue('a', 1)") == \
        f"import torch\n{NOTEBOOK_GLUE}\nglue('a', 1)"
    assert notebook_code("    from myst_nb import glue  ") == f"    {NOTEBOOK_GLUE}"
    with pytest.raises(ValueError, match="beyond"):
        notebook_code("import myst_nb\nmyst_nb.glue('a', 1)")


def test_editions_write_every_quote_from_the_executed_build(tmp_path):
    """A chapter's notebooks, generated with a stand-in executed build holding a value for
    every name its prose quotes: each quote reads that value, and nothing is left of the
    quote or of myst_nb. Generic: the last chapter source, whatever it quotes."""
    import editions
    import nbformat

    source = SOURCES[-1]
    text = "\n".join(c.source for c in jupytext.read(source).cells if c.cell_type == "markdown")
    names = sorted({m.split("::")[-1].rsplit(":", 1)[0] if role == "text" else m for role, m in
                    re.findall(r"\{glue(?::(\w+))?\}`([^`]+)`", text)})
    assert names, f"{source.name} quotes no value"
    bundle = lambda k: {"text/plain": f"{100 + k}.25", "text/markdown": f"md{k}"}
    nb = {"cells": [{"cell_type": "code", "source": "", "outputs": [
        _glue_output(n, bundle(k)) for k, n in enumerate(names)]}]}
    (tmp_path / "run" / "book").mkdir(parents=True)
    (tmp_path / "run" / "book" / f"{source.stem}.ipynb").write_text(json.dumps(nb))
    editions.main(["--out", str(tmp_path / "out"), "--executed", str(tmp_path / "run"),
                   str(source)])
    for edition in ("student", "solution"):
        path = tmp_path / "out" / edition / f"{source.stem}.ipynb"
        raw = path.read_text()
        assert "myst_nb" not in raw and NOTEBOOK_GLUE in raw
        md = "\n".join(c.source for c in nbformat.read(path, as_version=4).cells
                       if c.cell_type == "markdown")
        assert "{glue" not in md and "computed in a cell above" not in md
        assert all(f"`{n}`" not in md for n in names)
        missing = [n for k, n in enumerate(names) if f"{100 + k}" not in md and f"md{k}" not in md]
        assert not missing, f"quotes without their value: {missing}"


def test_a_cell_that_calls_a_stub_runs_on_in_the_student_edition(chapter):
    """Issue 61, item 4: Jupyter and Colab stop "Run all" at the first error and ignore
    nbclient's raises-exception tag. No cell is tagged so; in the student edition a cell
    that calls the function of an exercise above it is wrapped so that the stub's
    NotImplementedError prints "not done yet", naming the exercise (the check of the
    exercise's own cell prints it too, tests/checks/test_core.py)."""
    from editions import calls_any

    assert calls_any("y = f(x)\nprint(y)", {"f"}) and calls_any("g(f)", {"f"})
    assert not calls_any("f = 3\nprint(x)", {"f"}) and not calls_any("ff(x)", {"f"})
    assert calls_any("%timeit f(x)", {"f"}) and not calls_any("%timeit ff(x)", {"f"})
    source, nb_source, editions = chapter
    exercises = chapter_exercises(source).exercises
    for edition, nb in editions.items():
        above: dict[str, str] = {}
        code = [c.source for c in nb_source.cells if c.cell_type == "code"]
        ours = [c for c in nb.cells if c.cell_type == "code"
                and "colab-setup" not in c.metadata.get("tags", [])]
        assert len(code) == len(ours)
        for original, cell in zip(code, ours):
            assert "raises-exception" not in cell.metadata.get("tags", [])
            label = cell.metadata.get("lncourse", {}).get("exercise")
            if label:
                e = next(e for e in exercises if e.label == label)
                above[e.function] = f"Exercise {e.number} ({e.function})"
                continue
            needs = [v for k, v in above.items() if calls_any(original, {k})]
            if edition == "solution" or not needs:
                assert cell.source == notebook_code(original)
                continue
            tree = ast.parse(cell.source)
            assert len(tree.body) == 1 and isinstance(tree.body[0], ast.Try)
            (handler,) = tree.body[0].handlers
            assert ast.unparse(handler.type) == "NotImplementedError"
            assert "not done yet" in cell.source and all(n in cell.source for n in needs)
            assert ast.unparse(tree.body[0].body) == ast.unparse(
                ast.parse(notebook_code(original)).body)


# ------------------------------------------- a student edition that keeps the answers back
def _answer_problems(path, student, solution, declared) -> list[str]:
    """What keeps a lesson's student edition from graded use (issue 60, item 5): an
    exercise without declared answer fragments, a fragment that its own solution edition
    never shows (so not a telltale of the answer), or a fragment in the student edition's
    stub or in the cells after it up to the next exercise or section."""
    labels = [e.label for e in chapter_exercises(path).exercises]
    problems = [f"{label}: no '% answer:' fragment declared" for label in labels
                if not declared.get(label)]
    problems += [f"'% answer:' under {label}, which is not an exercise" for label in declared
                 if label.startswith("ex-") and label not in labels and declared[label]]
    shown = answer_leaks(solution, declared)
    problems += [f"{label}: none of its fragments is in its solution edition"
                 for label in labels if declared.get(label)
                 and not any(s.startswith(f"{label}: ") for s in shown)]
    return problems + answer_leaks(student, declared)


def test_student_edition_holds_no_answer(chapter):
    """No stub's docstring, no cell after an exercise up to the next exercise or
    section, and no hint holds the exercise's answer in the student edition: each
    exercise declares its answer's telltale fragments (``% answer: ...``, a MyST comment
    that no edition shows) and none may appear there, nor in any ``{dropdown} Hint`` of
    the chapter. A reveal goes inside the solution block, which the student edition
    leaves out (AUTHORING.md, "Exercises")."""
    path, _, editions = chapter
    if path.stem.endswith("_replication"):
        return
    declared = declared_answers(path)
    problems = _answer_problems(path, editions["student"], editions["solution"], declared)
    problems += hint_leaks(path, declared)
    assert not problems, "\n".join(problems)
    for nb in editions.values():
        assert "% answer:" not in json.dumps(nb)


def test_the_answer_test_bites(monkeypatch):
    """The review's two leaks put back into chapter 1 (the formula in exercise 1.2's
    docstring, exercise 1.6's reveal after the solution block), and an exercise whose
    fragments are dropped: each is found."""
    import jupytext as jt

    assert telltale("P = I − 1 1ᵀ/d") == "P=I-11^T/d"
    assert telltale(r"P = I - \frac{1}{d}\mathbf 1 \mathbf 1^\top") == r"P=I-\frac1d11^T"
    path = next(s for s in SOURCES if s.stem.startswith("01_"))
    reveal = "The answer is $W' = W \\,\\mathrm{diag}(\\gamma)\\, P$ and $b' = W\\beta + b$."
    end = "```{solution-end}\n```"
    read = jt.read

    def as_reviewed(source, *args, **kwargs):
        nb = read(source, *args, **kwargs)
        for cell in nb.cells:
            cell.source = re.sub(r'"""The centring matrix P .*"""',
                                 '"""P = I − 1 1ᵀ/d, shape (d, d), float64."""', cell.source)
            cell.source = cell.source.replace(f"{reveal}\n\n{end}", f"{end}\n\n{reveal}")
        return nb
    monkeypatch.setattr(jt, "read", as_reviewed)
    editions = build_editions(path, BOOK)
    declared = declared_answers(path)
    problems = _answer_problems(path, editions["student"], editions["solution"], declared)
    assert any(p.startswith("ex-centering-matrix: cell ") and "1 1^T / d" in p
               for p in problems), problems
    assert any(p.startswith("ex-fold-into-linear: cell ") and "diag" in p
               for p in problems), problems
    declared["ex-rms-norm"] = []
    declared["ex-dyt"] = ["x * 0"]
    problems = _answer_problems(path, editions["student"], editions["solution"], declared)
    assert "ex-rms-norm: no '% answer:' fragment declared" in problems
    assert "'% answer:' under ex-dyt, which is not an exercise" in problems
    declared["ex-rms-norm"] = ["never written anywhere"]
    problems = _answer_problems(path, editions["student"], editions["solution"], declared)
    assert "ex-rms-norm: none of its fragments is in its solution edition" in problems


# the review's hints (issue 60): each gave its exercise's formula away
OLD_HINTS = {
    "ex-fraction-along-ones": ("05_", "$h - Ph = \\bar h\\,\\mathbf 1$, whose squared length "
                               "is $d\\,\\bar h^2$."),
    "ex-attend-counts": ("03_", "$\\log c_{bj}$ is $-\\infty$ for an absent class, which "
                         "`torch.softmax` turns into a weight\nof exactly 0. Broadcast "
                         "`scores` to `(1, C, C)` and the log-counts to `(B, 1, C)`."),
    "ex-layer-norm-backward": ("01_", "`grad_x` is $J^\\top$ `grad_out` with $J = "
                               "\\mathrm{diag}(\\gamma)\\,(P - z z^\\top/d)/s$."),
}


@pytest.mark.parametrize("label", sorted(OLD_HINTS))
def test_a_hint_that_gives_the_answer_away_is_found(label, tmp_path):
    """One of the review's hints put back as its exercise's first hint: the answer test
    names the exercise, the hint and the fragment. Chapter 1's old hint to exercise 1.7
    also restated exercise 1.5's answer, which counts too."""
    prefix, text = OLD_HINTS[label]
    path = next(s for s in SOURCES if s.stem.startswith(prefix))
    source = path.read_text(encoding="utf-8")
    start = source.index(f":label: {label}\n")
    at = source.index("```{dropdown} Hint", start)
    copy = tmp_path / path.name
    copy.write_text(source[:at] + f"```{{dropdown}} Hint 0\n{text}\n```\n\n" + source[at:],
                    encoding="utf-8")
    assert not hint_leaks(path, declared_answers(path))
    found = hint_leaks(copy, declared_answers(copy))
    assert found and all(f.startswith(f"{label}: 'Hint 0' shows ") for f in found), found
    if label == "ex-layer-norm-backward":
        assert f"{label}: 'Hint 0' shows ex-layer-norm-jacobian's answer 'z z^T / d'" in found


def test_hints_are_read_per_exercise(tmp_path):
    page = tmp_path / "page.md"
    page.write_text("```{exercise-start} A\n:label: ex-a\n```\n\n```{exercise-end}\n```\n\n"
                    "```{dropdown} Hint 1\nLook at x.\n```\n\n```{dropdown} Details\nP = 1\n```"
                    "\n\n```{exercise-start} B\n:label: ex-b\n```\n\n````{dropdown} Hint\n"
                    "P = 1\n````\n", encoding="utf-8")
    assert hints(page) == [("ex-a", "Hint 1", "Look at x."), ("ex-b", "Hint", "P = 1")]
    assert hint_leaks(page, {"ex-a": ["P = 1"]}) == ["ex-b: 'Hint' shows ex-a's answer 'P = 1'"]
    page.write_text("```{dropdown} Hint\nx\n```\n", encoding="utf-8")
    with pytest.raises(ValueError, match="before any exercise"):
        hints(page)
    page.write_text(":label: ex-a\n```{dropdown} Hint\nx\n", encoding="utf-8")
    with pytest.raises(ValueError, match="never closed"):
        hints(page)


def test_the_reveal_inside_the_solution_block_is_left_out():
    md = ("```{solution-start} ex-a\n:class: dropdown\n```\n\nThe answer is P.\n\n"
          "```{solution-end}\n```\n\nThe text goes on.")
    out, inside = drop_solution_text(md)
    assert "The answer is" not in out and "The text goes on." in out and not inside
    assert "{solution-start}" in out and "{solution-end}" in out
    # a solution block split by its code cell: the cell after the code starts inside
    out, inside = drop_solution_text("```{solution-start} ex-a\n:class: dropdown\n```")
    assert inside
    out, inside = drop_solution_text("Reveal.\n\n```{solution-end}\n```\n\nOn.", inside)
    assert "Reveal" not in out and out.endswith("On.") and not inside
