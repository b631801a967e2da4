"""The package's shape: modules cut by concept (a very long one is pointed out), no two modules that import
each other (directly or around a longer loop) (issue 12), and the layout of issue 20: a
core at the root, one folder per chapter that imports the core and never another chapter,
the checks in one folder, and grading apart, imported by no science module."""

import ast
import re
import warnings
from pathlib import Path

import pytest

import lncourse

PACKAGE = Path(lncourse.__file__).resolve().parent
MODULES = sorted(PACKAGE.rglob("*.py"))
# Modules are cut by concept, not by size: past this many lines a module is worth a look
# (a warning, not a failure)
LONG_MODULE = 1000


def module_name(path: Path) -> str:
    parts = ("lncourse",) + path.relative_to(PACKAGE).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


NAMES = {module_name(p) for p in MODULES}


def imports(path: Path, source: str | None = None) -> set[str]:
    """The lncourse modules ``path`` (or ``source`` read as if it were that file) imports,
    anywhere in it (in functions too)."""
    name = module_name(path)
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found = set()
    tree = ast.parse(source if source is not None else path.read_text(encoding="utf-8"))
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found.update(a.name for a in node.names if a.name.startswith("lncourse"))
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")
                anchor = anchor[:len(anchor) - node.level + 1]
                base = ".".join(anchor + ([base] if base else []))
            if not base.startswith("lncourse"):
                continue
            for a in node.names:          # `from . import x` may name a module
                found.add(f"{base}.{a.name}" if f"{base}.{a.name}" in NAMES else base)
    found |= named_imports(tree)
    return {m for m in found if m in NAMES and m != name}


DYNAMIC = ("import_module", "__import__", "run_module", "find_spec")


def known_module(dotted: str) -> str | None:
    """The longest lncourse module that ``dotted`` names or lies inside, or None."""
    parts = dotted.split(".")
    for n in range(len(parts), 0, -1):
        if ".".join(parts[:n]) in NAMES:
            return ".".join(parts[:n])
    return None


def named_imports(tree: ast.AST) -> set[str]:
    """The lncourse modules a module imports by name at run time: a string constant
    passed to importlib.import_module, __import__, runpy.run_module or find_spec."""
    found = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Call) and node.args and isinstance(
                node.args[0], ast.Constant) and isinstance(node.args[0].value, str):
            func = node.func
            called = func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", "")
            if called in DYNAMIC and (m := known_module(node.args[0].value)):
                found.add(m)
    return found



def cycle(graph: dict[str, set[str]]) -> list[str] | None:
    """One cycle of ``graph`` (a list of nodes, first = last), or None."""
    state: dict[str, int] = {}            # 1: on the current path, 2: finished
    path: list[str] = []

    def visit(node):
        state[node] = 1
        path.append(node)
        for nxt in sorted(graph.get(node, ())):
            if state.get(nxt) == 1:
                return path[path.index(nxt):] + [nxt]
            if nxt not in state and (found := visit(nxt)):
                return found
        state[node] = 2
        path.pop()
        return None

    for node in sorted(graph):
        if node not in state and (found := visit(node)):
            return found
    return None


def test_a_very_long_module_is_pointed_out():
    long = {module_name(p): n for p in MODULES
            if (n := len(p.read_text(encoding="utf-8").splitlines())) > LONG_MODULE}
    if long:
        warnings.warn(f"over {LONG_MODULE} lines (one concept? then fine): {long}")


def test_no_import_cycle():
    graph = {module_name(p): imports(p) for p in MODULES}
    assert (found := cycle(graph)) is None, " -> ".join(found)


@pytest.mark.parametrize("graph, expected", [
    ({"a": {"b"}, "b": {"c"}, "c": set()}, None),
    ({"a": {"b"}, "b": {"c"}, "c": {"a"}}, ["a", "b", "c", "a"]),
    ({"a": {"b"}, "b": {"b"}}, ["b", "b"]),
])
def test_cycle_finds_loops(graph, expected):
    assert cycle(graph) == expected


def test_imports_are_read_relative_and_absolute():
    graph = {module_name(p): imports(p) for p in MODULES}
    assert "lncourse.majority.multiset" in graph["lncourse.majority.multiset_fused"]
    assert "lncourse.majority.train" in graph["lncourse.majority.single"]
    assert "lncourse.rng" in graph["lncourse.majority.config"]
    # relative forms resolve too (the package writes absolute ones today)
    relative = "from . import task\nfrom ..rng import generator\nfrom .config import X\n"
    assert imports(PACKAGE / "majority" / "stats.py", relative) == {
        "lncourse.majority.task", "lncourse.rng", "lncourse.majority.config"}


# ---------------------------------------------------------------- the layout (issue 20)
CHAPTERS = {"geometry": 1, "selectability": 2, "majority": 3, "nope": 4, "norms": 5}
CORE = {"_packages", "attention", "checkpoint", "device", "folding", "glue", "guard",
        "layernorm", "lm", "lm_recipe", "minilm", "modes", "paper", "progress", "published",
        "results", "rng", "smollm2", "summary", "text", "tolerance", "transformer"}
CORE_FOLDERS = {"plotting"}
CHECKS, GRADING, EVIDENCE = "checks", "grading", "evidence"
# The crossings between chapters, both from chapter 5 (issue 17), which reads earlier
# chapters' experiments through today's norms: it retrains chapter 3's majority model,
# so its majority modules build on chapter 3's package; and its V lens is chapter 4's
# Lemma 3 with each norm's factors, so lncourse.norms.vlens builds on chapter 4's lemmas
# and variance measurement.
CROSSINGS = {("lncourse.norms.majority", "majority"), ("lncourse.norms.vlens", "nope"),
             ("lncourse.evidence.norms.majority", "majority")}


def part(module: str) -> str:
    """The part of the package a module belongs to: a chapter, 'checks', 'grading',
    'evidence' or 'core'."""
    top = module.split(".")[1] if module.count(".") else ""
    if top in CHAPTERS or top in (CHECKS, GRADING, EVIDENCE):
        return top
    return "core"


def evidence_chapter(module: str) -> str | None:
    """The chapter an evidence module belongs to (``lncourse.evidence.<chapter>.x``), or
    None for the evidence every chapter shares (``lncourse.evidence.claims``)."""
    parts = module.split(".")
    return parts[2] if len(parts) > 3 and parts[2] in CHAPTERS else None


def layout_problems(graph: dict[str, set[str]]) -> list[str]:
    """Every import that crosses the layout's lines. Two layers: the course (the core, one
    folder per chapter, the checks) never imports the evidence beneath it. The core
    imports only the core; a chapter imports the core and itself; the checks import the
    core and the chapters (their references), never grading or the evidence. The evidence
    of a chapter imports the core, its chapter, its own evidence and the shared evidence
    (crossings as for the chapters); grading imports anything but the evidence."""
    problems = []
    for module, deps in sorted(graph.items()):
        mine = part(module)
        for dep in sorted(deps):
            theirs = part(dep)
            if mine != EVIDENCE and theirs == EVIDENCE:
                problems.append(f"{mine} module {module} imports the evidence layer: {dep}")
            elif mine == "core" and theirs != "core":
                problems.append(f"core module {module} imports {dep} ({theirs})")
            elif mine in CHAPTERS and theirs not in ("core", mine) and not any(
                    module.startswith(prefix) and theirs == chapter
                    for prefix, chapter in CROSSINGS):
                problems.append(f"chapter module {module} imports {dep} ({theirs})")
            elif mine == CHECKS and theirs == GRADING:
                problems.append(f"check module {module} imports {dep} ({theirs})")
            elif mine == EVIDENCE:
                own = evidence_chapter(module)
                ok = theirs == "core" or (theirs == EVIDENCE and evidence_chapter(dep) in (
                    None, own)) or theirs == own or any(
                    module.startswith(prefix) and chapter in (theirs, evidence_chapter(dep))
                    for prefix, chapter in CROSSINGS)
                if not ok:
                    problems.append(f"evidence module {module} imports {dep} ({theirs})")
    return problems


def test_layout_core_chapters_checks_and_grading():
    graph = {module_name(p): imports(p) for p in MODULES}
    assert layout_problems(graph) == []


def test_layout_rules_bite():
    assert layout_problems({"lncourse.majority.train": {"lncourse.nope.variance"}}) == [
        "chapter module lncourse.majority.train imports lncourse.nope.variance (nope)"]
    assert layout_problems({"lncourse.majority.stats": {"lncourse.grading.sandbox"}})
    assert layout_problems({"lncourse.majority.stats": {"lncourse.checks.majority"}})
    assert layout_problems({"lncourse.results": {"lncourse.majority.config"}})
    assert layout_problems({"lncourse.plotting.style": {"lncourse.nope.figures"}})
    assert layout_problems({"lncourse.norms.majority": {"lncourse.nope.variance"}})
    assert layout_problems({"lncourse.norms.hidden": {"lncourse.majority.task"}})
    assert layout_problems({"lncourse.norms.hidden": {"lncourse.nope.lemmas"}})
    assert not layout_problems({"lncourse.norms.vlens": {"lncourse.nope.lemmas"}})
    assert not layout_problems({"lncourse.evidence.norms.majority_run": {"lncourse.majority.train"}})
    assert layout_problems({"lncourse.checks.nope": {"lncourse.grading.wire"}})
    # the two layers: nothing of the course imports the evidence beneath it
    assert layout_problems({"lncourse.nope.figures": {"lncourse.evidence.nope.ledger"}}) == [
        "nope module lncourse.nope.figures imports the evidence layer: "
        "lncourse.evidence.nope.ledger"]
    assert layout_problems({"lncourse.results": {"lncourse.evidence.claims"}})
    assert layout_problems({"lncourse.checks.majority": {"lncourse.evidence.majority.claims"}})
    assert layout_problems({"lncourse.grading.grade": {"lncourse.evidence.claims"}})
    assert layout_problems({"lncourse.evidence.nope.ledger": {"lncourse.evidence.norms.ledger"}})
    assert layout_problems({"lncourse.evidence.nope.ledger": {"lncourse.majority.task"}})
    assert layout_problems({"lncourse.evidence.nope.ledger": {"lncourse.grading.sheet"}})
    assert not layout_problems({"lncourse.evidence.nope.ledger": {
        "lncourse.evidence.claims", "lncourse.evidence.nope.claims", "lncourse.nope.lemmas",
        "lncourse.results"}})
    assert not layout_problems({"lncourse.evidence.norms.majority_run": {
        "lncourse.majority.train"}})
    assert layout_problems({"lncourse.grading.grade": {"lncourse.checks.majority"},
                            "lncourse.checks.majority": {"lncourse.majority.task", "lncourse.guard"},
                            "lncourse.majority.train": {"lncourse.rng"},
                            "lncourse.evidence.majority.bench": {"lncourse.majority.train"}}) == []


def reach(graph: dict[str, set[str]], module: str) -> set[str]:
    """Every module ``module`` imports, directly or through others."""
    found, todo = set(), [module]
    while todo:
        for dep in graph.get(todo.pop(), ()):
            if dep not in found:
                found.add(dep)
                todo.append(dep)
    return found


def test_the_majority_trainer_trains_and_its_caller_records():
    """Issue 59: chapter 3's trainer shows each evaluation to its caller (on_evaluation)
    and records nothing itself; the parameter snapshots of the stored runs are recorded
    by their command line, in the evidence. The trainer reaches no recorder, at any
    depth, and the command that records reaches it."""
    graph = {module_name(p): imports(p) for p in MODULES}
    recorder = "lncourse.evidence.majority.snapshots"
    assert recorder in NAMES and "lncourse.majority.snapshots" not in NAMES
    assert recorder not in reach(graph, "lncourse.majority.train")
    assert recorder in reach(graph, "lncourse.evidence.majority.runs")
    assert reach({"a": {"b"}, "b": {"c"}, "c": {"a"}}, "a") == {"a", "b", "c"}


def test_root_holds_only_the_core_and_the_folders():
    root = {p.stem for p in PACKAGE.glob("*.py")} - {"__init__"}
    folders = {p.name for p in PACKAGE.iterdir() if (p / "__init__.py").exists()}
    assert root <= CORE, f"not core, so not at the root: {sorted(root - CORE)}"
    assert folders == set(CHAPTERS) | CORE_FOLDERS | {CHECKS, GRADING, EVIDENCE}, sorted(folders)
    evidence = PACKAGE / EVIDENCE
    assert {p.name for p in evidence.iterdir() if (p / "__init__.py").exists()} <= set(CHAPTERS)


def evidence_layout_problems(folders: dict[str, set[str]]) -> list[str]:
    """What breaks the one layout of the evidence (issue 59) in ``folders`` (chapter ->
    its module files): the checked sentences in claims.py, the ledger in ledger.py, and
    no verdict.py beside them."""
    problems = []
    for chapter, names in sorted(folders.items()):
        problems += [f"{chapter}: no {n}" for n in ("ledger.py", "claims.py")
                     if n not in names]
        if "verdict.py" in names:
            problems.append(f"{chapter}: verdict.py (claims belong in claims.py)")
    return problems


def test_every_chapters_evidence_has_the_same_modules():
    """Issue 59: every chapter's evidence keeps its checked sentences in claims.py and
    its numbers' ledger in ledger.py (whose main writes results/<chapter>/reported.json)."""
    evidence = PACKAGE / EVIDENCE
    folders = {p.name: {f.name for f in p.glob("*.py")} for p in evidence.iterdir()
               if (p / "__init__.py").exists()}
    assert set(folders) == set(CHAPTERS)
    assert evidence_layout_problems(folders) == []
    for chapter in folders:
        source = (evidence / chapter / "ledger.py").read_text(encoding="utf-8")
        assert "def main(" in source and "reported" in source, chapter
    # the check bites: chapter 3's old names, and a verdict left beside the claims
    assert evidence_layout_problems({"majority": {"report.py", "claims.py", "verdict.py"},
                                     "norms": {"ledger.py", "verdict.py"}}) == [
        "majority: no ledger.py", "majority: verdict.py (claims belong in claims.py)",
        "norms: no claims.py", "norms: verdict.py (claims belong in claims.py)"]


def test_names_inside_a_folder_drop_its_prefix():
    """`majority/train.py`, not `majority/majority_train.py`."""
    stuttering = [str(p.relative_to(PACKAGE)) for p in MODULES
                  if p.parent != PACKAGE and p.stem.startswith(p.parent.name + "_")]
    assert stuttering == []


def test_tests_mirror_the_layout():
    """A chapter's tests live in tests/<chapter>/, those of the checks and of grading in
    tests/checks/ and tests/grading/; the root's tests are the core's, and tests/book/ holds
    those of the book as a whole (site, notebooks, editions)."""
    tests = Path(__file__).resolve().parent
    at_root = [p.name for p in tests.glob("test_*.py")
               if any(p.stem.startswith(f"test_{c}") for c in [*CHAPTERS, CHECKS, GRADING, "grade"])]
    assert at_root == []
    for folder in [*CHAPTERS, CHECKS, GRADING, "book"]:
        assert list((tests / folder).glob("test_*.py")), f"no tests in tests/{folder}/"


MARKED_FOR_THE_BOOK_TASKS = re.compile(r"mark\.(notebooks|site)\b")


def test_notebook_and_site_tests_live_in_tests_book():
    """scripts/test.mk's tasks of notebooks and of the site collect tests/book only (4 s
    against 10 s for the whole suite, in three tasks): a test marked `notebooks` or `site`
    elsewhere would run in no task."""
    tests = Path(__file__).resolve().parent
    outside = [str(p.relative_to(tests)) for p in sorted(tests.rglob("*.py"))
               if p.relative_to(tests).parts[0] != "book" and p.name != "test_package.py"
               and MARKED_FOR_THE_BOOK_TASKS.search(p.read_text(encoding="utf-8"))]
    assert not outside, f"marked notebooks or site outside tests/book: {outside}"


def _private_uses(path: Path) -> list[str]:
    """Where a module reaches another's private names: ``from lncourse.x import _y``,
    ``import lncourse.x as X`` then ``X._y``, or a private module (``_core``) of another
    package. A package's own modules may share its private modules."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    me = module_name(path)
    package = me.rpartition(".")[0] if path.name != "__init__.py" else me
    aliases, found = {}, []

    def other(module: str) -> bool:
        return module != me

    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("lncourse"):
            for a in node.names:
                target = f"{node.module}.{a.name}"
                if a.name.startswith("_") and not a.name.startswith("__") and other(node.module):
                    if not (node.module == package and (PACKAGE / "/".join(
                            target.split(".")[1:])).with_suffix(".py").exists()):
                        found.append(f"{me}:{node.lineno} from {node.module} import {a.name}")
                aliases[a.asname or a.name] = target
        elif isinstance(node, ast.Import):
            for a in node.names:
                if a.name.startswith("lncourse"):
                    aliases[a.asname or a.name] = a.name
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) \
                and node.value.id in aliases and node.attr.startswith("_") \
                and not node.attr.startswith("__") and other(aliases[node.value.id]):
            found.append(f"{me}:{node.lineno} {node.value.id}.{node.attr}")
    return found


def test_no_module_reaches_into_another_modules_private_names():
    """A name that another module needs is public (no underscore), so that what a module
    exposes is what it names without one."""
    found = [f for p in MODULES for f in _private_uses(p)]
    assert not found, found


def test_the_private_name_check_bites(tmp_path, monkeypatch):
    fake = PACKAGE / "nope" / "_probe_of_the_check.py"
    try:
        fake.write_text("from lncourse.majority.train import lr_factor as _x\n"
                        "from lncourse.nope import probe as P\nP._hidden()\n"
                        "from lncourse.results import _secret\n")
        got = _private_uses(fake)
    finally:
        fake.unlink()
    assert any("P._hidden" in g for g in got) and any("_secret" in g for g in got), got
    assert not any("_x" in g for g in got), got


# ---------------------------------------------------------------- the two layers (issue 59)
BOOK = PACKAGE.parent / "book"
# every chapter's lesson: book/0N_<name>.md, its replication page apart
LESSONS = tuple(sorted(p.stem for p in BOOK.glob("[0-9][0-9]_*.md")
                       if not p.stem.endswith("_replication")))
# a code cell's fence is three backticks or more (MyST closes it with the same run)
CODE_CELL = re.compile(r"^(`{3,})\{code-cell\}[^\n]*\n(.*?)^\1", re.S | re.M)
MAGIC_MODULE = re.compile(r"\blncourse(?:\.\w+)+")


def page_imports(text: str) -> set[str]:
    """The lncourse modules a page's code cells import: import statements, names passed
    to importlib and runpy, and modules a line of IPython magic runs (``!python -m``,
    ``%run -m``)."""
    found = set()
    for _, body in CODE_CELL.findall(text):
        lines = body.splitlines()
        if lines and lines[0].strip() == "---":          # cell options as a YAML block
            lines = lines[lines.index("---", 1) + 1:]
        while lines and lines[0].startswith(":"):        # cell options as :key: lines
            lines = lines[1:]
        magic = [line for line in lines if line.lstrip().startswith(("%", "!"))]
        found |= {known_module(m) or m for line in magic for m in MAGIC_MODULE.findall(line)}
        code = "\n".join(line for line in lines if line not in magic)
        tree = ast.parse(code)
        found |= named_imports(tree)
        for node in ast.walk(tree):
            if isinstance(node, ast.Import):
                found.update(a.name for a in node.names)
            elif isinstance(node, ast.ImportFrom) and node.module:
                subs = {f"{node.module}.{a.name}" for a in node.names} & NAMES
                found.update(subs if len(subs) == len(node.names) else subs | {node.module})
    return {m for m in found if m.startswith("lncourse")}


def evidence_imports(text: str) -> set[str]:
    return {m for m in page_imports(text) if part(m) == EVIDENCE}


@pytest.mark.parametrize("lesson", LESSONS)
def test_a_lesson_imports_the_course_not_the_evidence(lesson):
    """Replication pages may import the evidence; a lesson reads stored runs through the
    core (lncourse.results), computes with the course, and leaves the claims its sentences
    rest on to the tests (chapter 1's: tests/geometry/test_claims.py)."""
    got = evidence_imports((BOOK / f"{lesson}.md").read_text(encoding="utf-8"))
    assert not got, f"{lesson} imports the evidence layer: {sorted(got)}"


def test_the_lesson_layer_check_reads_every_form_of_import():
    cell = "```{code-cell} ipython3\n:tags: [hide-input]\n%matplotlib inline\n{}\n```\n"
    for line in ("from lncourse.evidence.nope import ledger",
                 "import lncourse.evidence.nope.ledger as L",
                 "from lncourse.evidence.nope.ledger import reported",
                 "def f():\n    from lncourse.evidence import claims"):
        assert evidence_imports(cell.replace("{}", line)), line
    assert not evidence_imports(cell.replace("{}", "from lncourse.nope import lemmas"))
    assert evidence_imports("```{code-cell}\nfrom lncourse.evidence.nope import ledger\n```\n")
    # imports by name at run time, a module magic runs, a four-backtick fence
    for line in ('importlib.import_module("lncourse.evidence.nope.ledger")',
                 'L = __import__("lncourse.evidence.nope.ledger")',
                 '!python -m lncourse.evidence.nope.ledger',
                 '%run -m lncourse.evidence.majority.runs --preset quick'):
        assert evidence_imports(cell.replace("{}", line)), line
    assert evidence_imports("````{code-cell}\nfrom lncourse.evidence import claims\n````\n")
    assert not evidence_imports(cell.replace("{}", '!python -m lncourse.checks.key.store'))
    assert {"01_layernorm_geometry", "05_norms"} <= set(LESSONS) and not any(
        lesson.endswith("_replication") for lesson in LESSONS)


def test_the_module_layer_check_reads_imports_by_name():
    """A course module that loads the evidence through importlib, __import__ or runpy
    crosses the layers as an import statement does."""
    for line in ('importlib.import_module("lncourse.evidence.nope.ledger")',
                 'def f():\n    return __import__("lncourse.evidence.claims")',
                 'runpy.run_module("lncourse.evidence.majority.runs")'):
        deps = imports(PACKAGE / "nope" / "figures.py", "import importlib, runpy\n" + line)
        assert layout_problems({"lncourse.nope.figures": deps}), line
    # a docstring that names an evidence module imports nothing
    assert not imports(PACKAGE / "nope" / "figures.py",
                       '"""See lncourse.evidence.nope.ledger."""\n')


HIDING_TAGS = {"remove-cell", "remove-input", "hide-input", "hide-cell"}


def cell_tags_and_code(body: str) -> tuple[set[str], str]:
    """A code cell's tags (from a ``:tags: [...]`` line or a YAML block of options) and
    its code."""
    lines = body.splitlines()
    options = []
    if lines and lines[0].strip() == "---":               # options as a YAML block
        end = lines.index("---", 1)
        options, lines = lines[1:end], lines[end + 1:]
    while lines and lines[0].startswith(":"):             # options as :key: lines
        options.append(lines[0])
        lines = lines[1:]
    tags = set()
    for option in options:
        m = re.match(r"\s*:?tags:?\s*\[([^\]]*)\]", option)
        if m:
            tags |= {t.strip().strip("'\"") for t in m.group(1).split(",") if t.strip()}
    return tags, "\n".join(lines)


def lncourse_names(tree: ast.AST) -> set[str]:
    """What code imports from lncourse: ``module.name`` of a from-import, the module of a
    plain import."""
    names = set()
    for n in ast.walk(tree):
        if isinstance(n, ast.ImportFrom) and (n.module or "").startswith("lncourse"):
            names |= {f"{n.module}.{a.name}" for a in n.names}
        elif isinstance(n, ast.Import):
            names |= {a.name for a in n.names if a.name.startswith("lncourse")}
    return names


def import_cells(text: str) -> tuple[set[str], set[str]]:
    """What a lesson imports from lncourse in cells whose code the reader does not see
    (removed or hidden input, options as a :tags: line or as YAML), and what its first
    visible cell made only of lncourse imports imports (the lesson's tools, shown)."""
    hidden, shown = set(), None
    for _, body in CODE_CELL.findall(text):
        tags, code = cell_tags_and_code(body)
        code = "\n".join(line for line in code.splitlines()
                         if not line.lstrip().startswith(("%", "!")))
        tree = ast.parse(code)
        names = lncourse_names(tree)
        if tags & HIDING_TAGS:
            hidden |= names
        elif shown is None and tree.body and all(lncourse_names(n) and isinstance(
                n, (ast.Import, ast.ImportFrom)) and not (isinstance(n, ast.Import) and len(
                lncourse_names(n)) < len(n.names)) for n in tree.body):
            shown = names
    return hidden, shown or set()


@pytest.mark.parametrize("lesson", LESSONS)
def test_a_lesson_shows_its_tools(lesson):
    """One visible cell, after the key idea's figure, imports what the lesson takes from
    lncourse: everything its hidden setup cell imports from it."""
    hidden, shown = import_cells((BOOK / f"{lesson}.md").read_text(encoding="utf-8"))
    assert shown, f"{lesson}: no visible cell of lncourse imports"
    assert hidden <= shown, f"{lesson}: imported hidden, not shown: {sorted(hidden - shown)}"


def test_the_tools_check_sees_a_missing_name():
    page = ("```{code-cell} ipython3\n:tags: [remove-cell]\nimport torch\n"
            "from lncourse.nope import lemmas, variance\n```\n\n"
            "```{code-cell} ipython3\nfrom lncourse.nope import lemmas\n```\n")
    hidden, shown = import_cells(page)
    assert hidden == {"lncourse.nope.lemmas", "lncourse.nope.variance"}
    assert shown == {"lncourse.nope.lemmas"} and not hidden <= shown
    # every hidden cell counts, not only the first; options as YAML; removed input;
    # a plain import
    page += ("```{code-cell} ipython3\n---\ntags: [remove-cell]\n---\n"
             "from lncourse.nope import figures\n```\n"
             "```{code-cell} ipython3\n:tags: [remove-input]\nimport lncourse.results\n```\n"
             "```{code-cell} ipython3\n:tags: [hide-input]\nx = 1\n```\n")
    hidden, _ = import_cells(page)
    assert hidden == {"lncourse.nope.lemmas", "lncourse.nope.variance",
                      "lncourse.nope.figures", "lncourse.results"}
    assert cell_tags_and_code("---\ntags: [remove-input, full-width]\n---\nx = 1") == (
        {"remove-input", "full-width"}, "x = 1")
