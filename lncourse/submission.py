"""Reading a submitted notebook: its chapter, and the code each exercise needs.

The grader never runs a submission top to bottom (that would re-run a chapter's
training). For each exercise it takes the learner's function and only the top-level
statements that function needs, found by following names back through the notebook:
the imports, the helpers, the constants it uses, and what those need in turn.
"""

from __future__ import annotations

import ast
import json
import symtable
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

from .exercises import CHAPTERS, Chapter, Exercise, chapter as find_chapter


@dataclass(frozen=True)
class Statement:
    cell: int             # index among the notebook's code cells
    index: int            # index among the cell's top-level statements
    binds: frozenset      # names the statement binds at the top level
    needs: frozenset      # names it reads from the top level (a function: when called)
    definition: bool      # a def or class: what it reads is looked up when it is called


@dataclass
class Submission:
    path: Path
    chapter: Chapter | None = None
    notes: list[str] = field(default_factory=list)       # about the whole notebook
    sources: list[str] = field(default_factory=list)     # code cells, as Python
    syntax_errors: dict[int, str] = field(default_factory=dict)   # cell -> message
    labels: dict[str, int] = field(default_factory=dict)          # exercise label -> cell
    statements: list[Statement] = field(default_factory=list)

    def filename(self, cell: int) -> str:
        return f"<cell {cell + 1}>"


@dataclass(frozen=True)
class Program:
    """What to run for one exercise: (file name, cell source, statement indices)."""
    cells: tuple[tuple[str, str, tuple[int, ...]], ...]


def _python(source: str) -> str:
    """A code cell as Python: IPython's magics and shell escapes become calls."""
    from IPython.core.inputtransformer2 import TransformerManager

    return TransformerManager().transform_cell(source)


def _scope_names(source: str) -> tuple[set[str], set[str]]:
    """(names bound at the top level, names read from it) by one top-level statement."""
    try:
        table = symtable.symtable(source, "<statement>", "exec")
    except SyntaxError:  # valid for the parser, not for the compiler (nonlocal at the top)
        return set(), set()
    binds = {s.get_name() for s in table.get_symbols()
             if s.is_assigned() or s.is_imported() or s.is_namespace()}
    needs = {s.get_name() for s in table.get_symbols() if s.is_referenced()}

    def inner(t: symtable.SymbolTable) -> None:
        for child in t.get_children():
            needs.update(s.get_name() for s in child.get_symbols()
                         if s.is_referenced() and (s.is_global() or s.is_declared_global()))
            inner(child)
    inner(table)
    return binds, needs


def _chapter_of(nb: dict, defined: set[str]) -> tuple[Chapter | None, str | None]:
    meta = nb.get("metadata", {}).get("lncourse", {})
    for key in (meta.get("chapter"), meta.get("source"), nb.get("metadata", {}).get(
            "colab", {}).get("name", "").rsplit("_", 1)[0]):
        if key:
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
    """Parse a notebook: chapter, code cells as Python, their top-level statements."""
    sub = Submission(Path(path))
    try:
        nb = json.loads(Path(path).read_text(encoding="utf-8"))
        cells = [c for c in nb["cells"] if c.get("cell_type") == "code"]
    except (OSError, ValueError, KeyError, TypeError) as err:
        sub.notes.append(f"this file could not be read as a notebook ({type(err).__name__}: "
                         f"{err}); nothing was graded")
        return sub
    defined = set()
    for number, cell in enumerate(cells):
        source = cell.get("source", "")
        source = "".join(source) if isinstance(source, list) else source
        label = cell.get("metadata", {}).get("lncourse", {}).get("exercise")
        if label:
            sub.labels[label] = number
        try:
            source = _python(source)
            body = ast.parse(source, sub.filename(number)).body
        except SyntaxError as err:
            sub.sources.append(source)
            sub.syntax_errors[number] = f"line {err.lineno}: {err.msg}"
            continue
        sub.sources.append(source)
        for index, node in enumerate(body):
            binds, needs = _scope_names(ast.unparse(node))
            definition = isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef))
            sub.statements.append(Statement(number, index, frozenset(binds), frozenset(needs),
                                            definition))
            defined |= binds
    sub.chapter, note = _chapter_of(nb, defined)
    if note:
        sub.notes.append(note)
    return sub


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

    chosen: set[int] = set()
    todo = [(name, end)]
    while todo:
        wanted, before = todo.pop()
        binders = [k for k in range(before) if wanted in sub.statements[k].binds]
        if not binders or binders[-1] in chosen:
            continue
        k = binders[-1]
        chosen.add(k)
        s = sub.statements[k]
        todo.extend((n, end if s.definition else k) for n in s.needs)
    by_cell: dict[int, list[int]] = {}
    for k in sorted(chosen):
        s = sub.statements[k]
        by_cell.setdefault(s.cell, []).append(s.index)
    return Program(tuple((sub.filename(c), sub.sources[c], tuple(ix))
                         for c, ix in sorted(by_cell.items()))), None


def _missing(sub: Submission, exercise: Exercise) -> str:
    name = exercise.function
    cell = sub.labels.get(exercise.label)
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


def chapter_of_class(submissions: list[Submission]) -> Chapter | None:
    """The chapter most of the submissions belong to."""
    counts = Counter(s.chapter.stem for s in submissions if s.chapter)
    return find_chapter(counts.most_common(1)[0][0]) if counts else None
