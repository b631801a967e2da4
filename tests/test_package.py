"""The package's shape, as issue 12 set it: every module readable in one sitting, and no
two modules that import each other (directly or around a longer loop)."""

import ast
from pathlib import Path

import pytest

import lncourse

PACKAGE = Path(lncourse.__file__).resolve().parent
MODULES = sorted(PACKAGE.rglob("*.py"))
MAX_LINES = 350


def module_name(path: Path) -> str:
    parts = ("lncourse",) + path.relative_to(PACKAGE).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


NAMES = {module_name(p) for p in MODULES}


def imports(path: Path) -> set[str]:
    """The lncourse modules ``path`` imports, anywhere in it (in functions too)."""
    name = module_name(path)
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
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
    return {m for m in found if m in NAMES and m != name}



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


def test_no_module_is_longer_than_one_sitting():
    long = {module_name(p): n for p in MODULES
            if (n := len(p.read_text(encoding="utf-8").splitlines())) > MAX_LINES}
    assert not long, f"over {MAX_LINES} lines: {long}"


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
