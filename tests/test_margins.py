"""The margins table of TESTING.md (scripts/margins.py) covers every test that reads a
stored result, and each margin is at least 10 or carries its reason."""

from __future__ import annotations

import re
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "scripts"))
import margins  # noqa: E402

ROW = re.compile(r"^\| `([^`]+)` \| ([^|]+) \|", re.M)


def _rows(text: str) -> dict[str, str]:
    a, b = text.index(margins.BEGIN), text.index(margins.END)
    return dict(ROW.findall(text[a:b]))


def _collected(request) -> set[str]:
    items = request.session.items
    return {margins._function(i.nodeid) for i in items
            if i.get_closest_marker("replay") and not i.get_closest_marker("slow")}


def test_every_test_that_reads_a_stored_result_has_its_margin(request):
    """Run on the whole suite, every test marked replay (and not slow) has its row; run
    on part of it, those collected do. A new one without a row fails until the table is
    rewritten (python scripts/margins.py, after recording both passes)."""
    rows = _rows(margins.DOC.read_text())
    missing = sorted(_collected(request) - set(rows))
    assert not missing, f"not in TESTING.md's margins table: {missing}"


def _low(rows: dict[str, str]) -> list[str]:
    """Rows whose margin is under 10 without a reason in brackets."""
    low = []
    for name, cell in rows.items():
        cell = cell.strip()
        if cell not in ("exact", "edit") and float(cell.split("×")[0].replace(",", "")) < 10 \
                and "(" not in cell:
            low.append(f"{name}: {cell}")
    return low


def test_every_margin_is_at_least_ten_or_says_why():
    rows = _rows(margins.DOC.read_text())
    assert rows, "the margins table is empty"
    assert not _low(rows), _low(rows)


def test_the_table_check_bites():
    text = (f"{margins.BEGIN}\n| `tests/x.py::test_a` | 3× | array | 1e-5 | 3e-5 | native |\n"
            f"| `tests/x.py::test_b` | 3× (one seed's loss is a near-tie) | array | | | |\n"
            f"| `tests/x.py::test_c` | 1,200× | approx | | | |\n{margins.END}")
    rows = _rows(text)
    assert set(rows) == {"tests/x.py::test_a", "tests/x.py::test_b", "tests/x.py::test_c"}
    assert _low(rows) == ["tests/x.py::test_a: 3×"]
