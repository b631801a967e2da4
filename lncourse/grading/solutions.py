"""The solution edition recognised by its code, not only by its metadata or markers.

A submission whose exercise functions are the solutions' (``book/NN_topic.md``, the code
between ``# BEGIN SOLUTION`` and ``# END SOLUTION``) is flagged for the teacher even with
its metadata and markers removed. Functions are compared in a canonical form: the syntax
tree without docstrings, comments, annotations or layout, with the function's parameters
and local variables renamed by their order of appearance (so renaming them changes
nothing). A submission is flagged when at least half of the chapter's functions, and at
least ``MATCHES``, are the solution's: one short function can be written the same way by
a student who worked it out.
"""

from __future__ import annotations

import ast
import functools
import re
from pathlib import Path

BOOK = Path(__file__).resolve().parent.parent.parent / "book"
MATCHES = 2
_CELL = re.compile(r"^```\{code-cell\}[^\n]*\n(.*?)^```", re.S | re.M)


def canonical(node: ast.FunctionDef) -> str:
    """``node`` (a function definition) in the canonical form described above."""
    node = ast.parse(ast.unparse(node)).body[0]     # a copy
    body = node.body
    if body and isinstance(body[0], ast.Expr) and isinstance(getattr(body[0], "value", None),
                                                             ast.Constant) \
            and isinstance(body[0].value.value, str):
        node.body = body[1:] or [ast.Pass()]
    local: dict[str, str] = {}
    for sub in ast.walk(node):
        if isinstance(sub, ast.arg):
            sub.annotation = None
            local.setdefault(sub.arg, f"v{len(local)}")
        elif isinstance(sub, ast.Name) and isinstance(sub.ctx, ast.Store):
            local.setdefault(sub.id, f"v{len(local)}")
    node.returns = None
    node.name = "f"
    node.decorator_list = []
    for sub in ast.walk(node):
        if isinstance(sub, ast.arg):
            sub.arg = local.get(sub.arg, sub.arg)
        elif isinstance(sub, ast.Name):
            sub.id = local.get(sub.id, sub.id)
        elif isinstance(sub, ast.AnnAssign):
            sub.annotation = ast.Constant(None)
    return ast.dump(node, annotate_fields=False, include_attributes=False)


@functools.lru_cache(maxsize=None)
def solutions(stem: str) -> dict[str, str]:
    """The canonical form of each solution function of chapter ``stem`` (empty where the
    book's sources are not installed beside the package)."""
    path = BOOK / f"{stem}.md"
    try:
        text = path.read_text(encoding="utf-8")
    except OSError:
        return {}
    out = {}
    for match in _CELL.finditer(text):
        source = match.group(1)
        if "# BEGIN SOLUTION" not in source:
            continue
        lines = [line for line in source.splitlines()
                 if line.strip() not in ("# BEGIN SOLUTION", "# END SOLUTION")
                 and not line.lstrip().startswith((":", "%", "!"))]
        try:
            body = ast.parse("\n".join(lines)).body
        except SyntaxError:
            continue
        for node in body:
            if isinstance(node, ast.FunctionDef):
                out[node.name] = canonical(node)
    return out


def matches(sources: list[str], stem: str, functions: list[str]) -> list[str]:
    """The exercise ``functions`` that ``sources`` (a notebook's code cells, as Python)
    define exactly as the solution does (their last definition)."""
    reference = solutions(stem)
    last: dict[str, str] = {}
    for source in sources:
        try:
            body = ast.parse(source).body
        except (SyntaxError, ValueError, RecursionError):
            continue
        for node in body:
            if isinstance(node, ast.FunctionDef) and node.name in functions:
                try:
                    last[node.name] = canonical(node)
                except (SyntaxError, ValueError, RecursionError):
                    pass
    return [f for f in functions if f in reference and last.get(f) == reference[f]]


def flagged(found: list[str], functions: list[str]) -> bool:
    """Whether that many solution functions make a solution edition: at least half of the
    chapter's, and at least ``MATCHES`` (all of them in a chapter of fewer)."""
    return bool(found) and len(found) >= min(max(MATCHES, (len(functions) + 1) // 2),
                                             len(functions))
