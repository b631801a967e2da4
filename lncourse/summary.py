"""Summaries every chapter reports: a paired t interval over seeds, and a Markdown table
for the page (the site parses it as MyST)."""

from __future__ import annotations

import math

import numpy as np
from scipy import stats

__all__ = ["paired_interval", "markdown_table"]


def paired_interval(differences: np.ndarray, level: float = 0.95) -> tuple[float, float, float]:
    """Mean of per-seed differences and its t interval: (mean, low, high)."""
    d = np.asarray(differences, dtype=float)
    if d.ndim != 1 or len(d) < 2 or not np.isfinite(d).all():
        raise ValueError(f"need at least two finite paired differences, got {d}")
    mean = float(d.mean())
    half = float(stats.t.ppf(0.5 + level / 2, len(d) - 1) * d.std(ddof=1) / math.sqrt(len(d)))
    return mean, mean - half, mean + half


def markdown_table(header: tuple[str, ...], rows: list[tuple]) -> str:
    """A Markdown pipe table (for ``IPython.display.Markdown``; the site parses it as MyST,
    ``nb_render_markdown_format: myst``) from a header and rows."""
    def cell(value) -> str:   # a bare "|" (as in "|mean|") would end the cell
        return str(value).replace("\\|", "|").replace("|", "\\|")

    lines = ["| " + " | ".join(cell(h) for h in header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(cell(c) for c in row) + " |" for row in rows]
    return "\n".join(lines)
