"""Reading a submitted notebook: its chapter, and the code each exercise needs.

The grader never runs a submission top to bottom (that would re-run a chapter's
training). For each exercise it takes the learner's function and only the top-level
statements that function needs, found by following names back through the notebook:
the imports, the helpers, the constants it uses, and what those need in turn. Whether a
path is a file the grader reads at all, and a notebook of a shape it reads, is decided
first, by :mod:`lncourse.grading.intake`.
"""

from __future__ import annotations

import ast
import bisect
import hashlib
import json
import re
import symtable
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

from lncourse.grading.exercises import CHAPTERS, Chapter, Exercise, chapter as find_chapter
from lncourse.grading.intake import Refused, read_regular, shape_problem


@dataclass(frozen=True)
class Statement:
    cell: int             # index among the notebook's code cells
    index: int            # index among the cell's top-level statements
    binds: frozenset      # names the statement binds at the top level
    needs: frozenset      # names it reads from the top level (a function: when called)
    definition: bool      # a def or class: what it reads is looked up when it is called
    code: str = ""        # the statement as ``ast.unparse`` writes it (no comments, one layout)
    later: frozenset = frozenset()   # names its nested functions read: looked up when called


@dataclass
class Submission:
    path: Path
    chapter: Chapter | None = None
    notes: list[str] = field(default_factory=list)       # about the whole notebook
    sources: list[str] = field(default_factory=list)     # code cells, as Python
    syntax_errors: dict[int, str] = field(default_factory=dict)   # cell -> message
    labels: dict[str, int] = field(default_factory=dict)          # exercise label -> cell
    statements: list[Statement] = field(default_factory=list)
    student_id: str | None = None        # from the notebook's metadata (lncourse.student_id)
    solution_edition: bool = False       # a submitted solution edition: flagged
    refused: str | None = None           # why the file was not read (a link, a FIFO, ...)

    def filename(self, cell: int) -> str:
        return f"<cell {cell + 1}>"


@dataclass(frozen=True)
class Program:
    """What to run for one exercise: (file name, cell source, statement indices)."""
    cells: tuple[tuple[str, str, tuple[int, ...]], ...]
    code: tuple[str, ...] = ()    # those statements, unparsed (for ``fingerprint``)


# cell magics that run the cell's body as Python, in the notebook's namespace: the
# grader drops the magic's line and reads the body (timing or capturing changes nothing
# a check sees); ``%time`` and ``%timeit`` before a statement likewise
TRANSPARENT_MAGICS = ("time", "timeit", "capture", "prun")
_LINE_MAGIC = re.compile(r"^(\s*)%(?:time|timeit)(?:\s+-[a-z](?:\s*\d+)?)*\s+(?=\S)", re.M)


class MagicCell(ValueError):
    """A cell whose first line is a cell magic the grader does not run as Python."""


def _python(source: str) -> str:
    """A code cell as Python: IPython's magics and shell escapes become calls; a cell
    under a timing or capturing magic (``TRANSPARENT_MAGICS``) is its body."""
    from IPython.core.inputtransformer2 import TransformerManager

    first, _, body = source.lstrip("\n").partition("\n")
    if first.startswith("%%"):
        magic = first[2:].split(maxsplit=1)[0] if first[2:].strip() else ""
        if magic not in TRANSPARENT_MAGICS:
            raise MagicCell(f"it starts with the cell magic %%{magic}, which is not Python "
                            f"and which the grader does not run: move the function to a "
                            f"cell of its own without %%{magic}")
        source = body
    source = _LINE_MAGIC.sub(r"\1", source)
    return TransformerManager().transform_cell(source)


def _scope_names(source: str) -> tuple[set[str], set[str], set[str], set[str]]:
    """(names bound at the top level, names read from it, names its nested functions
    read from it, names its nested functions declare ``global`` and assign) by one
    top-level statement."""
    try:
        table = symtable.symtable(source, "<statement>", "exec")
    except SyntaxError:  # valid for the parser, not for the compiler (nonlocal at the top)
        return set(), set(), set(), set()
    binds = {s.get_name() for s in table.get_symbols()
             if s.is_assigned() or s.is_imported() or s.is_namespace()}
    needs = {s.get_name() for s in table.get_symbols() if s.is_referenced()}
    later: set[str] = set()
    sets: set[str] = set()

    def inner(t: symtable.SymbolTable) -> None:
        for child in t.get_children():
            later.update(s.get_name() for s in child.get_symbols()
                         if s.is_referenced() and (s.is_global() or s.is_declared_global()))
            sets.update(s.get_name() for s in child.get_symbols()
                        if s.is_declared_global() and s.is_assigned())
            inner(child)
    inner(table)
    return binds, needs, later, sets


# methods that change the object they are called on (a constant filled by mutation:
# ``CFG.update(...)``, ``SIZES.append(d)`` in a top-level loop)
MUTATORS = frozenset({"append", "extend", "insert", "update", "setdefault", "add",
                      "discard", "remove", "pop", "popitem", "clear", "sort", "reverse",
                      "__setitem__", "__delitem__"})


def _mutated(node: ast.AST) -> set[str]:
    """Names a top-level statement changes in place without binding them: ``N[k] = v``,
    ``N.attr = v``, ``N[k] += v``, ``del N[k]``, ``N.append(v)``, also inside a top-level
    loop, ``if``, ``with`` or ``try`` (not inside a function or a class: that runs when
    called)."""
    found: set[str] = set()

    def root(target: ast.AST) -> str | None:
        while isinstance(target, ast.Subscript):
            target = target.value
        if isinstance(target, ast.Attribute):
            target = target.value
            while isinstance(target, ast.Subscript):
                target = target.value
        return target.id if isinstance(target, ast.Name) else None

    def visit(n: ast.AST) -> None:
        if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef, ast.Lambda)):
            return
        targets = (n.targets if isinstance(n, (ast.Assign, ast.Delete)) else
                   [n.target] if isinstance(n, (ast.AugAssign, ast.AnnAssign)) else [])
        for t in targets:
            for leaf in (t.elts if isinstance(t, (ast.Tuple, ast.List)) else [t]):
                if isinstance(leaf, (ast.Subscript, ast.Attribute)) and root(leaf):
                    found.add(root(leaf))
        if (isinstance(n, ast.Call) and isinstance(n.func, ast.Attribute)
                and n.func.attr in MUTATORS and isinstance(n.func.value, ast.Name)):
            found.add(n.func.value.id)
        for child in ast.iter_child_nodes(n):
            visit(child)
    visit(node)
    return found


def _get(d, *keys):
    """``d[k1][k2]...``, or None where a level is missing or not a JSON object."""
    for k in keys:
        d = d.get(k) if isinstance(d, dict) else None
    return d


def _chapter_of(nb: dict, defined: set[str]) -> tuple[Chapter | None, str | None]:
    colab = _get(nb, "metadata", "colab", "name")
    for key in (_get(nb, "metadata", "lncourse", "chapter"),
                _get(nb, "metadata", "lncourse", "source"),
                colab.rsplit("_", 1)[0] if isinstance(colab, str) else None):
        if isinstance(key, (str, int)) and key:
            try:
                return find_chapter(key), None
            except KeyError:
                pass
    scores = {ch.stem: sum(e.function in defined for e in ch.exercises) for ch in CHAPTERS}
    best = max(scores, key=scores.get)
    if scores[best] == 0:
        return None, ("the notebook says nothing about its chapter (no lncourse metadata) "
                      "and defines none of the exercises' functions")
    return find_chapter(best), (f"the notebook's metadata names no chapter; it was taken "
                                f"for chapter {best} from the functions it defines")


def read_submission(path: str | Path) -> Submission:
    """Parse a notebook: chapter, code cells as Python, their top-level statements.

    A path that is not a regular file (a symbolic link, a FIFO, a device, a folder) or is
    larger than ``MAX_BYTES`` (:mod:`lncourse.grading.intake`) is refused
    (``Submission.refused``) without being read; a file that is not a notebook of the
    expected shape, or is too large to read quickly (``MAX_CODE_CELLS``, ``MAX_SOURCE``),
    gets a note and no code."""
    sub = Submission(Path(path))
    try:
        nb = json.loads(read_regular(path).decode("utf-8"))
        problem = shape_problem(nb)
        if problem:
            raise ValueError(problem)
        cells = [c for c in nb["cells"] if c.get("cell_type") == "code"]
    except Refused as err:
        sub.refused = str(err)
        sub.notes.append(f"REFUSED: {err}; nothing was graded")
        return sub
    except (OSError, ValueError, RecursionError, UnicodeDecodeError) as err:
        sub.notes.append(f"this file could not be read as a notebook ({type(err).__name__}: "
                         f"{str(err)[:300]}); nothing was graded")
        return sub
    try:
        _read_cells(sub, nb, cells)
    except Exception as err:  # noqa: BLE001 (one odd notebook never stops the class)
        sub.statements.clear()
        sub.notes.append(f"this notebook could not be parsed ({type(err).__name__}: "
                         f"{str(err)[:300]}); nothing was graded")
    return sub


def _globals_set_by_calls(sub: Submission, setters: dict[int, set[str]]) -> None:
    """A top-level statement that calls a function whose body sets names through
    ``global`` (a set-up function) binds those names, as a run from the top would."""
    sets: dict[str, set[str]] = {}
    for k, s in enumerate(sub.statements):
        if s.definition and setters.get(k):
            for name in s.binds:
                sets[name] = setters[k]
    if not sets:
        return
    for k, s in enumerate(sub.statements):
        if not s.definition:
            more = set().union(*(sets.get(n, set()) for n in s.needs))
            if more - s.binds:
                sub.statements[k] = Statement(s.cell, s.index, s.binds | more, s.needs,
                                              s.definition, s.code, s.later)


def _read_cells(sub: Submission, nb: dict, cells: list[dict]) -> None:
    defined = set()
    modules: set[str] = set()              # names bound by imports
    setters: dict[int, set[str]] = {}      # statement -> names its functions set by global
    for number, cell in enumerate(cells):
        source = cell.get("source", "")
        source = "".join(source) if isinstance(source, list) else source
        label = cell.get("metadata", {}).get("lncourse", {}).get("exercise")
        if label:
            sub.labels[label] = number
        try:
            source = _python(source)
            body = ast.parse(source, sub.filename(number)).body
        except MagicCell as err:
            sub.sources.append("")
            sub.syntax_errors[number] = str(err)
            continue
        except SyntaxError as err:
            sub.sources.append(source)
            sub.syntax_errors[number] = f"line {err.lineno}: {err.msg}"
            continue
        sub.sources.append(source)
        for index, node in enumerate(body):
            code = ast.unparse(node)
            binds, needs, later, sets = _scope_names(code)
            if isinstance(node, (ast.Import, ast.ImportFrom)):
                modules |= binds
            if isinstance(node, ast.ImportFrom) and any(a.name == "*" for a in node.names):
                binds.add(STAR)      # binds names no reading of the source can list
            definition = isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef))
            if definition:     # what it reads is looked up when it is called
                needs, later = needs | later, set()
            # a statement that changes a name in place is, for what comes after it, the
            # last to set it (a module's attributes aside: ``torch.manual_seed(0)``)
            binds |= _mutated(node) - modules
            sub.statements.append(Statement(number, index, frozenset(binds), frozenset(needs),
                                            definition, code, frozenset(later)))
            setters[len(sub.statements) - 1] = sets
            defined |= binds
    _globals_set_by_calls(sub, setters)
    sub.chapter, note = _chapter_of(nb, defined)
    if note:
        sub.notes.append(note)
    student = _get(nb, "metadata", "lncourse", "student_id")
    if isinstance(student, (str, int)) and str(student).strip():
        sub.student_id = str(student).strip()[:100]
    edition = _get(nb, "metadata", "lncourse", "edition")
    if edition == "solution" or any("# BEGIN SOLUTION" in s for s in sub.sources):
        sub.solution_edition = True
        sub.notes.append("FLAGGED: this is the course's solution edition (its metadata or its "
                         "`# BEGIN SOLUTION` markers say so), not the student notebook")


STAR = "*"      # what a star import binds, for ``program_for``


def program_for(sub: Submission, exercise: Exercise) -> tuple[Program | None, str | None]:
    """The statements ``exercise.function`` needs, or why it cannot be graded.

    A name is looked up as the notebook would see it when the exercise's check runs: the
    last statement binding it before the end of the cell that defines the function
    (a statement run at the top level: before that statement).
    """
    name = exercise.function
    definitions = [k for k, s in enumerate(sub.statements) if name in s.binds]
    if not definitions:
        return None, _missing(sub, exercise)
    cell = sub.statements[definitions[-1]].cell
    end = max(k for k, s in enumerate(sub.statements) if s.cell == cell) + 1

    binders: dict[str, list[int]] = {}      # name -> statements binding it, in order
    for k, s in enumerate(sub.statements):
        for n in s.binds:
            binders.setdefault(n, []).append(k)
    chosen: set[int] = set()
    todo, seen = [(name, end)], set()
    while todo:
        wanted, before = todo.pop()
        if (wanted, before) in seen:
            continue
        seen.add((wanted, before))
        at = bisect.bisect_left(binders.get(wanted, []), before)
        if at == 0 and wanted != STAR and STAR in binders:
            todo.append((STAR, before))   # perhaps bound by a star import before it
            stars = binders[STAR][:bisect.bisect_left(binders[STAR], before)]
            todo.extend((STAR, k + 1) for k in stars[:-1])   # every one of them
        if at == 0 or binders[wanted][at - 1] in chosen:
            continue
        k = binders[wanted][at - 1]
        chosen.add(k)
        s = sub.statements[k]
        todo.extend((n, end if s.definition else k) for n in s.needs)
        todo.extend((n, end) for n in s.later)     # a function defined under if or try
    by_cell: dict[int, list[int]] = {}
    for k in sorted(chosen):
        s = sub.statements[k]
        by_cell.setdefault(s.cell, []).append(s.index)
    return Program(tuple((sub.filename(c), sub.sources[c], tuple(ix))
                         for c, ix in sorted(by_cell.items())),
                   tuple(sub.statements[k].code for k in sorted(chosen))), None


def fingerprint(programs) -> str | None:
    """A hash of the code the exercises' programs run, after normalising its layout
    (``ast.unparse``, then every run of whitespace as one space: blank lines, spacing,
    comments and quotes do not count); None without code. Two submissions with the same
    fingerprint handed in the same code."""
    code = [re.sub(r"\s+", " ", c) for p in programs if p is not None for c in p.code]
    return hashlib.sha256("\n".join(code).encode()).hexdigest() if code else None


def _missing(sub: Submission, exercise: Exercise) -> str:
    name = exercise.function
    cell = sub.labels.get(exercise.label)
    if cell is not None and sub.syntax_errors.get(cell, "").startswith("it starts with"):
        return (f"the cell of exercise {exercise.number} was not read as Python: "
                f"{sub.syntax_errors[cell]}; so `{name}` is not defined")
    if cell is not None and cell in sub.syntax_errors:
        return (f"the cell of exercise {exercise.number} has a syntax error "
                f"({sub.syntax_errors[cell]}), so `{name}` is not defined")
    if cell is not None:
        others = [n for s in sub.statements if s.cell == cell for n in s.binds]
        if others:
            return (f"the cell of exercise {exercise.number} defines {', '.join(f'`{n}`' for n in others)}"
                    f" but not `{name}`: the grader looks for a function named `{name}` "
                    "(was it renamed?)")
        return f"the cell of exercise {exercise.number} no longer defines `{name}`"
    broken = [f"cell {c + 1} ({m})" for c, m in sub.syntax_errors.items()]
    return (f"no cell defines `{name}`: the cell of exercise {exercise.number} is missing "
            "(deleted?)" + (f"; cells with syntax errors: {', '.join(broken)}" if broken else ""))


class UnclearChapter(ValueError):
    """The submissions do not clearly belong to one chapter: the teacher names it."""


def chapter_of_class(submissions: list[Submission],
                     students: list[str] | None = None) -> Chapter | None:
    """The chapter of the class, decided so that no student can sway it: each student
    (``students[i]`` is the ID of ``submissions[i]``; without IDs, each file) has one vote,
    for the chapter all of their files name (a student whose files name several chapters
    casts none), and a chapter needs more than half of the votes cast. None when no file
    names a chapter; :class:`UnclearChapter`, whose message asks for ``--chapter``, when no
    chapter has that majority (a tie of one student against another, for example)."""
    students = list(range(len(submissions))) if students is None else list(students)
    if len(students) != len(submissions):
        raise ValueError("one student ID per submission")
    named: dict = {}
    for who, sub in zip(students, submissions):
        if sub.chapter is not None:
            named.setdefault(who, set()).add(sub.chapter.stem)
    votes = Counter(next(iter(chs)) for chs in named.values() if len(chs) == 1)
    if not named:
        return None
    cast = sum(votes.values())
    if votes:
        stem, n = votes.most_common(1)[0]
        if 2 * n > cast:
            return find_chapter(stem)
    tally = ", ".join(f"{stem}: {n}" for stem, n in votes.most_common()) or "none"
    split = sum(len(chs) > 1 for chs in named.values())
    raise UnclearChapter(
        "the submissions do not clearly belong to one chapter (students per chapter: "
        f"{tally}" + (f"; {split} handed in files of several chapters" if split else "")
        + "); name the class's chapter with --chapter N")
