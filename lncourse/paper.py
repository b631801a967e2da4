"""Numbers reported by the papers the course reproduces, each with where it is reported."""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field

__all__ = ["Reported"]


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
