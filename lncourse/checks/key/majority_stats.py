"""The key to chapter 3's check on the statistics (:mod:`lncourse.checks.majority_stats`):
its reference and known mistakes. Teacher-only: left out of the published package."""

from __future__ import annotations

import math

import numpy as np

# the 2 x 2 design's cells, as the check's inputs name them
_DESIGN4 = ("layernorm", "no_projection", "layernorm_released_scale", "no_projection_released")


def _cells(cells: dict) -> tuple:
    return tuple(np.asarray(cells[k], dtype=np.float64) for k in _DESIGN4)


def _interval(diff: np.ndarray, level: float, q=None, ddof: int = 1, df_shift: int = -1):
    from scipy import stats as sps
    n = len(diff)
    quant = sps.t.ppf(0.5 + level / 2, n + df_shift) if q is None else q
    half = quant * diff.std(ddof=ddof) / math.sqrt(n)
    m = float(diff.mean())
    return m, m - half, m + half


def _normal_quantile(level: float) -> float:
    from scipy import stats as sps
    return float(sps.norm.ppf(0.5 + level / 2))


def _main_effect(cells: dict, level: float = 0.95) -> tuple[float, float, float]:
    a, b, c, e = _cells(cells)
    return _interval(((a - b) + (c - e)) / 2, level)


def _unpaired(cells: dict, level: float = 0.95):
    from scipy import stats as sps
    a, b, c, e = _cells(cells)
    n = len(a)
    m = float((((a - b) + (c - e)) / 2).mean())
    se = math.sqrt(sum(x.var(ddof=1) for x in (a, b, c, e)) / 4 / n)
    half = sps.t.ppf(0.5 + level / 2, n - 1) * se
    return m, m - half, m + half

_MAIN_EFFECT_MISTAKES = [
    ("pair by seed: form one difference per seed, ((a - b) + (c - e)) / 2, and take its "
     "standard deviation (you combined the four variants' spreads as if unpaired)",
     _unpaired),
    ("use Student's t quantile with n - 1 degrees of freedom, not the normal 1.96",
     lambda cells, level=0.95: _interval(((lambda a, b, c, e: ((a - b) + (c - e)) / 2)
                                          (*_cells(cells))), level, q=1.96)),
    ("the standard deviation of the per-seed differences divides by n - 1 (ddof=1)",
     lambda cells, level=0.95: _interval(((lambda a, b, c, e: ((a - b) + (c - e)) / 2)
                                          (*_cells(cells))), level, ddof=0)),
    ("two slips: use Student's t quantile with n - 1 degrees of freedom, not the "
     "normal quantile, and the standard deviation of the per-seed differences with "
     "ddof=1 (dividing by n - 1), not ddof=0",
     lambda cells, level=0.95: _interval(((lambda a, b, c, e: ((a - b) + (c - e)) / 2)
                                          (*_cells(cells))), level, ddof=0,
                                         q=_normal_quantile(level))),
    ("use Student's t quantile with n - 1 degrees of freedom, not the normal quantile",
     lambda cells, level=0.95: _interval(((lambda a, b, c, e: ((a - b) + (c - e)) / 2)
                                          (*_cells(cells))), level,
                                         q=_normal_quantile(level))),
    ("Student's t has n - 1 degrees of freedom, not n",
     lambda cells, level=0.95: _interval(((lambda a, b, c, e: ((a - b) + (c - e)) / 2)
                                          (*_cells(cells))), level, df_shift=0)),
    ("the effect is with minus without the projection (you have its sign reversed)",
     lambda cells, level=0.95: _interval(((lambda a, b, c, e: ((b - a) + (e - c)) / 2)
                                          (*_cells(cells))), level)),
    ("average the two scales' effects: ((a - b) + (c - e)) / 2, not their sum",
     lambda cells, level=0.95: _interval(((lambda a, b, c, e: (a - b) + (c - e))
                                          (*_cells(cells))), level)),
    ("the main effect averages over both scales; you used the paper's scale only (a - b)",
     lambda cells, level=0.95: _interval(((lambda a, b, c, e: a - b)(*_cells(cells))), level)),
    ("that is the scale's main effect ((a - c) + (b - e)) / 2; the projection's compares "
     "rows with and without the projection", lambda cells, level=0.95: _interval(
         ((lambda a, b, c, e: ((a - c) + (b - e)) / 2)(*_cells(cells))), level)),
    ("the interval's level is the argument `level`, not always 95%",
     lambda cells, level=0.95: _main_effect(cells, 0.95)),
]

MISTAKES = {"projection_main_effect": _MAIN_EFFECT_MISTAKES}

REFERENCES = {
    "projection_main_effect": _main_effect,
}
