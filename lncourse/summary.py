"""Summaries every chapter reports: a paired t interval over seeds, its Bonferroni
correction for several comparisons at once, and a Markdown table for the page (the site
parses it as MyST)."""

from __future__ import annotations

import math

import numpy as np
from scipy import stats

__all__ = ["paired_interval", "corrected_interval", "markdown_table"]


def paired_interval(differences: np.ndarray, level: float = 0.95) -> tuple[float, float, float]:
    """Mean of per-seed differences and its t interval: (mean, low, high)."""
    d = np.asarray(differences, dtype=float)
    if d.ndim != 1 or len(d) < 2 or not np.isfinite(d).all():
        raise ValueError(f"need at least two finite paired differences, got {d}")
    mean = float(d.mean())
    half = float(stats.t.ppf(0.5 + level / 2, len(d) - 1) * d.std(ddof=1) / math.sqrt(len(d)))
    return mean, mean - half, mean + half


def corrected_interval(ci: tuple[float, float, float], n: int, k: int,
                       level: float = 0.95) -> tuple[float, float, float]:
    """The Bonferroni-corrected version of a paired t interval (mean, low, high) over n
    seeds, when k comparisons are made at once: each gets level 1 - (1 - level) / k."""
    if n < 2 or k < 1:
        raise ValueError(f"need n >= 2 seeds and k >= 1 comparisons, got n={n}, k={k}")
    mean, low, high = ci
    se = (high - low) / 2 / stats.t.ppf(0.5 + level / 2, n - 1)
    half = float(se * stats.t.ppf(1 - (1 - level) / (2 * k), n - 1))
    return float(mean), float(mean - half), float(mean + half)


def markdown_table(header: tuple[str, ...], rows: list[tuple]) -> str:
    """A Markdown pipe table (for ``IPython.display.Markdown``; the site parses it as MyST,
    ``nb_render_markdown_format: myst``) from a header and rows."""
    def cell(value) -> str:   # a bare "|" (as in "|mean|") would end the cell
        return str(value).replace("\\|", "|").replace("|", "\\|")

    lines = ["| " + " | ".join(cell(h) for h in header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(cell(c) for c in row) + " |" for row in rows]
    return "\n".join(lines)
