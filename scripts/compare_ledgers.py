"""Every ledger's entries at two commits, compared: what was added, removed or changed.

    python scripts/compare_ledgers.py ce3a101 HEAD

A ledger is ``results/<folder>/*reported.json``; its ``numbers`` are compared entry by
entry, exactly. Exit status 1 if any entry was removed or changed.
"""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def ledgers(commit: str) -> dict[str, dict]:
    names = subprocess.run(["git", "ls-tree", "-r", "--name-only", commit, "results"],
                           cwd=ROOT, capture_output=True, text=True, check=True).stdout.split()
    out = {}
    for name in names:
        if name.endswith("reported.json"):
            text = subprocess.run(["git", "show", f"{commit}:{name}"], cwd=ROOT,
                                  capture_output=True, text=True, check=True).stdout
            out[name] = json.loads(text)["numbers"]
    return out


def main(argv: list[str]) -> int:
    if len(argv) != 2:
        print(__doc__)
        return 2
    before, after = (ledgers(c) for c in argv)
    bad = 0
    for name in sorted(set(before) | set(after)):
        a, b = before.get(name, {}), after.get(name, {})
        added = sorted(set(b) - set(a))
        removed = sorted(set(a) - set(b))
        changed = sorted(k for k in set(a) & set(b) if a[k] != b[k])
        bad += len(removed) + len(changed)
        print(f"{name}: {len(a)} -> {len(b)} entries; {len(added)} added, "
              f"{len(removed)} removed, {len(changed)} changed")
        for k in changed:
            print(f"  changed {k}: {a[k]!r} -> {b[k]!r}")
        for k in removed:
            print(f"  removed {k}")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
