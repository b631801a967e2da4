"""How much of ``lncourse`` a page's code reaches through its imports, at any depth.

Every ``import`` and ``from ... import`` statement counts wherever it stands (top level,
inside a function, under ``if``), because a lazy import runs as soon as the function
does. A ``from lncourse.x import y`` where ``y`` is a submodule reaches that submodule;
importing a package reaches its ``__init__``. The count is the lines of every module
reached.

    python scripts/import_reach.py                 # a table: every page of book/
    python scripts/import_reach.py --json          # the same, machine-readable
    python scripts/import_reach.py --modules book/01_layernorm_geometry.md
"""
from __future__ import annotations

import argparse
import ast
import json
import re
import sys
from functools import lru_cache
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PKG = ROOT / "lncourse"
LESSONS = ("01_layernorm_geometry", "02_unselectable_keys", "03_majority", "04_nope",
           "05_norms")


def module_path(name: str) -> Path | None:
    """The file of a module of lncourse, or None when ``name`` is not one."""
    if name != "lncourse" and not name.startswith("lncourse."):
        return None
    rel = Path(*name.split("."))
    for p in (ROOT / rel.with_suffix(".py"), ROOT / rel / "__init__.py"):
        if p.exists():
            return p
    return None


def module_name(path: Path) -> str:
    rel = path.relative_to(ROOT).with_suffix("")
    parts = list(rel.parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def imported(tree: ast.AST, package: str | None) -> set[str]:
    """Module names of lncourse that the statements of ``tree`` import, at any depth;
    ``package`` resolves relative imports (None for a page's code)."""
    out: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for a in node.names:
                parts = a.name.split(".")
                for i in range(1, len(parts) + 1):  # import a.b.c runs a, a.b, a.b.c
                    out.add(".".join(parts[:i]))
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                if package is None:
                    continue
                base = package.split(".")
                base = base[:len(base) - node.level + 1]
                mod = ".".join(base + ([node.module] if node.module else []))
            else:
                mod = node.module or ""
            parts = mod.split(".")
            for i in range(1, len(parts) + 1):
                out.add(".".join(parts[:i]))
            for a in node.names:
                out.add(f"{mod}.{a.name}")   # kept only when it is a module
    return {m for m in out if module_path(m) is not None}


@lru_cache(maxsize=None)
def direct(name: str) -> frozenset[str]:
    path = module_path(name)
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    return frozenset(imported(ast.parse(path.read_text()), package))


def reach(roots: set[str]) -> set[str]:
    seen: set[str] = set()
    todo = list(roots)
    while todo:
        m = todo.pop()
        if m in seen:
            continue
        seen.add(m)
        todo.extend(direct(m) - seen)
    return seen


def lines(name: str) -> int:
    return len(module_path(name).read_text().splitlines())


CELL = re.compile(r"^```\{code-cell\}[^\n]*\n(.*?)^```", re.S | re.M)


def page_imports(page: Path) -> set[str]:
    out: set[str] = set()
    for body in CELL.findall(page.read_text()):
        code = "\n".join(line for line in body.splitlines()
                         if not line.lstrip().startswith(("%", "!", ":")))
        try:
            out |= imported(ast.parse(code), None)
        except SyntaxError:
            continue
    return out


def table() -> dict:
    total = sum(lines(module_name(p)) for p in PKG.rglob("*.py"))
    pages = {}
    for page in sorted((ROOT / "book").glob("0*.md")):
        mods = reach(page_imports(page))
        pages[page.stem] = {"modules": len(mods), "lines": sum(map(lines, mods)),
                            "lesson": page.stem in LESSONS}
    lesson_mods = set().union(*(reach(page_imports(ROOT / "book" / f"{s}.md"))
                                for s in LESSONS))
    return {"package_lines": total, "pages": pages,
            "lessons_together": sum(map(lines, lesson_mods))}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--json", action="store_true")
    ap.add_argument("--modules", metavar="PAGE", help="list the modules a page reaches")
    args = ap.parse_args(argv)
    if args.modules:
        for m in sorted(reach(page_imports(Path(args.modules))), key=lines, reverse=True):
            print(f"{lines(m):6d}  {m}")
        return 0
    t = table()
    if args.json:
        print(json.dumps(t, indent=1))
        return 0
    print(f"lncourse: {t['package_lines']:,} lines")
    for stem, row in t["pages"].items():
        kind = "lesson" if row["lesson"] else "replication"
        print(f"{stem:32s} {kind:12s} {row['modules']:4d} modules {row['lines']:7,} lines")
    print(f"{'the five lessons together':45s} {t['lessons_together']:15,} lines")
    return 0


if __name__ == "__main__":
    sys.exit(main())
