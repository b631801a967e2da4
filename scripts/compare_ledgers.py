"""Every ledger's entries at two commits, compared: what was added, removed or changed.

    python scripts/compare_ledgers.py fa87e41 HEAD
    python scripts/compare_ledgers.py fa87e41 HEAD --by-commit
    python scripts/compare_ledgers.py fa87e41 HEAD --rtol 1e-6

A ledger is ``results/<folder>/reported.json`` or ``<name>_reported.json``; its
``numbers`` are compared entry by entry, exactly and with their types (``true`` is not
``1``, nor ``3`` ``3.0``), or for two floats within a relative tolerance (``--rtol``: a
value recomputed on other threads or kernels differs in its last digits, and is counted
apart, as "within rtol"). Added entries are listed with their values, beside the removed
ones, so that a renamed entry shows on both sides. ``--by-commit`` walks the first-parent commits between the two that
touch a ledger and compares each with its parent, so that every change is laid at the
commit (and its message) that made it: a move of code that changes no number shows as
nothing changed or removed. Exit status 1 if any entry was removed or changed beyond the
tolerance.
"""
from __future__ import annotations

import argparse
import json
import math
import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
LEDGER = re.compile(r"^results/[^/]+/(?:\w+_)?reported\.json$")


def _git(*args: str) -> str:
    return subprocess.run(["git", *args], cwd=ROOT, capture_output=True, text=True,
                          check=True).stdout


def ledgers(commit: str) -> dict[str, dict]:
    out = {}
    for name in _git("ls-tree", "-r", "--name-only", commit, "results").split():
        if LEDGER.match(name):
            out[name] = json.loads(_git("show", f"{commit}:{name}"))["numbers"]
    return out


def same(a, b) -> bool:
    """Equal and of the same type (JSON's true, 1 and 1.0 are three values)."""
    return type(a) is type(b) and a == b


def close(a, b, rtol: float) -> bool:
    """Equal, or two finite floats within ``rtol`` of each other (relative to the larger)."""
    if same(a, b):
        return True
    if rtol and all(isinstance(v, float) and math.isfinite(v) for v in (a, b)):
        return abs(a - b) <= rtol * max(abs(a), abs(b))
    return False


def compare(before: dict, after: dict, rtol: float = 0.0, out=print) -> int:
    """Print each ledger's difference; return the number of entries removed or changed."""
    bad = 0
    for name in sorted(set(before) | set(after)):
        a, b = before.get(name, {}), after.get(name, {})
        added = sorted(set(b) - set(a))
        removed = sorted(set(a) - set(b))
        differ = sorted(k for k in set(a) & set(b) if not same(a[k], b[k]))
        near = [k for k in differ if close(a[k], b[k], rtol)]
        changed = [k for k in differ if k not in near]
        bad += len(removed) + len(changed)
        if not (added or removed or differ):
            continue
        extra = f", {len(near)} within rtol {rtol:g}" if rtol else ""
        out(f"{name}: {len(a)} -> {len(b)} entries; {len(added)} added, "
            f"{len(removed)} removed, {len(changed)} changed{extra}")
        for k in changed:
            out(f"  changed {k}: {a[k]!r} -> {b[k]!r}")
        for k in removed:
            out(f"  removed {k}: {a[k]!r}")
        for k in added:
            out(f"  added {k}: {b[k]!r}")
    return bad


def main(argv: list[str]) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("before")
    p.add_argument("after")
    p.add_argument("--rtol", type=float, default=0.0)
    p.add_argument("--by-commit", action="store_true")
    args = p.parse_args(argv)
    if not args.by_commit:
        return 1 if compare(ledgers(args.before), ledgers(args.after), args.rtol) else 0
    commits = _git("rev-list", "--first-parent", "--reverse", f"{args.before}..{args.after}",
                   "--", "results").split()
    bad = 0
    for commit in commits:
        lines: list[str] = []
        n = compare(ledgers(f"{commit}^"), ledgers(commit), args.rtol, lines.append)
        if lines:
            bad += n
            print(_git("log", "-1", "--format=%h %s", commit).strip()[:160])
            print("\n".join("    " + line for line in lines))
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
