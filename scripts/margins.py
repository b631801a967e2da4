"""The margins table of TESTING.md: for every test that reads a stored result, the
smallest margin (tolerance over difference) of its comparisons, across the native pass
and the perturbed one.

    LNCOURSE_MARGINS=_build/margins/native  pytest -m "replay and not slow" tests
    LNCOURSE_MARGINS=_build/margins/perturbed bash scripts/perturbed.sh
    python scripts/margins.py _build/margins/native _build/margins/perturbed

rewrites the table between the markers in TESTING.md. With ``--check`` (the test
command, on its own recordings) it rewrites nothing and fails when a margin measured on
this machine is under 10 without a reason. A test's margin is its smallest
over its parameters and over the kinds of comparison it makes (``array``: an
elementwise ``assert_allclose``; ``approx``: ``pytest.approx``; ``reported``: a ledger
number under lncourse.tolerance). A test that records none compares exactly (integers,
counts, texts) or by a fixed threshold; the table says so. A margin under 10 needs its
reason in REASONS below (tests/test_margins.py holds the table to that).
"""

from __future__ import annotations

import json
import math
import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
DOC = ROOT / "TESTING.md"
BEGIN, END = "<!-- margins: begin -->", "<!-- margins: end -->"

# test function -> why a margin under 10 is acceptable
REASONS: dict[str, str] = {
    "tests/checks/test_key.py::test_stored_outputs_recompute_from_the_key":
        "the check's own tolerance, 16 roundings of the inputs: the other kernels move the key's float64 answer by a fifth of it",
}


def _edit_test(name: str) -> bool:
    """A test that edits a stored number and asserts that a comparison fails: the
    numbers its edit moves by less than a printed unit pass with small margins, which
    are the edit's, not rounding's."""
    return "edit" in name.rsplit("::", 1)[-1]


def _function(nodeid: str) -> str:
    return nodeid.split("[", 1)[0]


def collect(folders: list[Path]) -> dict[str, dict]:
    """test function -> {"margin", "kind", "difference", "tolerance", "passes"}."""
    out: dict[str, dict] = {}
    for folder in folders:
        for f in sorted(folder.glob("margins-*.json")):
            for e in json.loads(f.read_text()):
                name = _function(e["test"])
                row = out.setdefault(name, {"margin": math.inf, "passes": set()})
                row["passes"].add(folder.name)
                if e["margin"] < row["margin"]:
                    row.update(margin=e["margin"], kind=e["kind"], difference=e["difference"],
                               tolerance=e["tolerance"], worst=folder.name)
    return out


def _fmt(x: float) -> str:
    return "equal" if x == 0 else f"{x:.1e}"


def table(rows: dict[str, dict], tests: list[str]) -> str:
    lines = ["| test | smallest margin | comparison | largest difference | its tolerance | "
             "in the pass |", "| --- | --- | --- | --- | --- | --- |"]
    for name in tests:
        row = rows.get(name)
        if _edit_test(name):
            lines.append(f"| `{name}` | edit | a test of an edited number: it must fail, "
                         f"and what the edit moves a little is no rounding | | | |")
            continue
        if row is None or math.isinf(row["margin"]):
            lines.append(f"| `{name}` | exact | equality or a threshold: no tolerance | | | |")
            continue
        m = row["margin"]
        note = f" ({REASONS[name]})" if name in REASONS else ""
        lines.append(f"| `{name}` | {m:,.0f}×{note} | {row['kind']} | "
                     f"{_fmt(row['difference'])} | {row['tolerance']:.1e} | {row['worst']} |")
    return "\n".join(lines)


def main(argv: list[str]) -> int:
    check = "--check" in argv
    argv = [a for a in argv if a != "--check"]
    folders = [Path(a) for a in argv] or [ROOT / "_build/margins/native",
                                           ROOT / "_build/margins/perturbed"]
    rows = collect(folders)
    if check:       # the test command: this machine's margins, the table left as it is
        tests = sorted(rows)
        listed = set(re.findall(r"^\| `([^`]+)` \|", DOC.read_text(), re.M))
        unlisted = sorted(set(tests) - listed)
        if unlisted:
            print("not in TESTING.md's margins table (python scripts/margins.py):",
                  *unlisted, sep="\n  ")
            return 1
    else:
        tests = sorted(_replay_tests())
        text = DOC.read_text()
        a, b = text.index(BEGIN) + len(BEGIN), text.index(END)
        DOC.write_text(text[:a] + "\n" + table(rows, tests) + "\n" + text[b:])
    low = [n for n in tests if n in rows and rows[n]["margin"] < 10 and n not in REASONS
           and not _edit_test(n)]
    print(f"{len(tests)} tests; smallest margins: "
          + ", ".join(f"{rows[n]['margin']:.0f}× {n}" for n in sorted(
              (n for n in rows if not math.isinf(rows[n]["margin"]) and not _edit_test(n)),
              key=lambda n: rows[n]["margin"])[:5]))
    if low:
        print("under 10 without a reason:", *(f"{rows[n]['margin']:.1f}x {n}" for n in low),
              sep="\n  ")
    return 1 if check and low else 0


def _replay_tests() -> set[str]:
    """Every test function marked replay (not slow), as pytest collects them."""
    import subprocess

    out = subprocess.run([sys.executable, "-m", "pytest", "--collect-only", "-q",
                          "-p", "no:cacheprovider", "-m", "replay and not slow", "tests"],
                         cwd=ROOT, capture_output=True, text=True).stdout
    return {_function(line.strip()) for line in out.splitlines() if "::" in line}


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
