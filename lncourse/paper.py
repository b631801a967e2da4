"""Numbers reported by the papers the course reproduces, each with where it is reported."""

from __future__ import annotations

from collections.abc import Iterator, Mapping
import re
import textwrap
from dataclasses import dataclass, field

from lncourse.results import COLUMN_CHARS

__all__ = ["Reported", "format_table"]


@dataclass(frozen=True, eq=False)
class Reported(Mapping):
    """A paper's numbers (read like a dict) and their source, e.g. "Brody et al. (2023),
    Table 1". ``note`` says how they were read where that matters."""

    source: str
    values: Mapping = field(repr=False)
    note: str = ""

    def __getitem__(self, key):
        return self.values[key]

    def __iter__(self) -> Iterator:
        return iter(self.values)

    def __len__(self) -> int:
        return len(self.values)


def format_table(header: list[str], rows: list[list], widths: list[int] | None = None,
                 width: int = COLUMN_CHARS) -> str:
    """A plain-text table: ours beside a paper's, one row per line, numbers formatted
    ``{:.1f}`` (None prints as "-"). For printing in a chapter cell.

    A table wider than ``width`` characters (the book's column) has its widest columns
    narrowed to fit, down to their longest word: their cells wrap onto more lines (text
    columns then align left), and rows are separated by a blank line. The numbers and
    words are the same; only the layout changes.
    """
    def cell(v) -> str:
        if v is None:
            return "-"
        return f"{v:.1f}" if isinstance(v, float) else str(v)

    text = [[cell(v) for v in row] for row in [header, *rows]]
    n = len(header)
    widths = list(widths or [max(len(r[k]) for r in text) for k in range(n)])
    # a column narrows down to its longest word; "m [lo, hi]" and numbers never split
    floor = [max(len(c) if _INTERVAL.match(c) else max(map(len, c.split()), default=0)
                 for r in text for c in [r[k]]) for k in range(n)]
    while sum(widths) + 2 * (n - 1) > width:
        k = max((k for k in range(n) if widths[k] > floor[k]), key=lambda k: widths[k],
                default=None)
        if k is None:
            break                                           # as narrow as the words allow
        widths[k] -= 1
    wrapped = any(len(c) > widths[k] for r in text for k, c in enumerate(r))
    if not wrapped:
        lines = ["  ".join(c.ljust(w) if k == 0 else c.rjust(w)
                           for k, (c, w) in enumerate(zip(r, widths))) for r in text]
        lines.insert(1, "-" * len(lines[0]))
        return "\n".join(lines)
    numeric = [all(_is_number(r[k]) for r in text[1:]) for k in range(n)]
    out = []
    for i, r in enumerate(text):
        parts = [_wrap(c, widths[k]) for k, c in enumerate(r)]
        for j in range(max(len(p) for p in parts)):
            out.append("  ".join(
                (p[j] if j < len(p) else "").rjust(widths[k]) if k and numeric[k]
                else (p[j] if j < len(p) else "").ljust(widths[k])
                for k, p in enumerate(parts)).rstrip())
        out.append("-" * (sum(widths) + 2 * (n - 1)) if i == 0 else "")
    return "\n".join(out).rstrip("\n")


_INTERVAL = re.compile(r"^[-+]?[\d.,]+%? \[[-+]?[\d.,]+%?, [-+]?[\d.,]+%?\]$")


def _wrap(text: str, width: int) -> list[str]:
    """``text`` in lines of at most ``width`` characters, keeping its indentation."""
    lead = text[:len(text) - len(text.lstrip())]
    return [lead + line for line in textwrap.wrap(text.strip(), max(1, width - len(lead)))
            ] or [""]


def _is_number(text: str) -> bool:
    try:
        float(text.replace(",", ""))
    except ValueError:
        return text == "-"
    return True
