"""Numbers reported by the papers the course reproduces, each with where it is reported."""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field

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


def format_table(header: list[str], rows: list[list], widths: list[int] | None = None) -> str:
    """A plain-text table: ours beside a paper's, one row per line, numbers formatted
    ``{:.1f}`` (None prints as "-"). For printing in a chapter cell."""
    def cell(v) -> str:
        if v is None:
            return "-"
        return f"{v:.1f}" if isinstance(v, float) else str(v)

    text = [[cell(v) for v in row] for row in [header, *rows]]
    widths = widths or [max(len(r[k]) for r in text) for k in range(len(header))]
    lines = ["  ".join(c.ljust(w) if k == 0 else c.rjust(w)
                       for k, (c, w) in enumerate(zip(r, widths))) for r in text]
    lines.insert(1, "-" * len(lines[0]))
    return "\n".join(lines)
