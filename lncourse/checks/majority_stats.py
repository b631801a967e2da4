"""Check for chapter 3's exercise on the replication's statistics: the projection's main
effect in the 2 x 2 design, paired over seeds, with its t interval."""

from __future__ import annotations

import math
from collections.abc import Callable

import numpy as np

from lncourse.checks._core import case, numpy_rng, run_check

__all__ = ["check_projection_main_effect"]


# --------------------------------------------------- the projection's main effect
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


def _stored_cells(metric: str) -> dict:
    """The stored paper-settings run's per-seed values of ``metric`` (10 seeds)."""
    from lncourse.majority import stats as ST
    from lncourse.results import load_result
    per = ST.per_seed(load_result("majority/paper_snapshots"), metric, variants=_DESIGN4)
    return {k: np.asarray(per[k], dtype=np.float64) for k in _DESIGN4}


def check_projection_main_effect(fn: Callable[..., tuple], *, hidden: bool = False) -> None:
    """``projection_main_effect(cells, level=0.95)``: the four cells of the 2 x 2 design
    (variant -> per-seed values) -> (mean, low, high) of the projection's main effect.
    Run on random cells and on the stored paper-settings run (issue 36: a main effect
    from the chapter's real runs)."""
    public = np.random.default_rng(3)
    secret = numpy_rng(30)   # the teacher-only cells: drawn from the grader's key

    def rand(n, scale=1.0, rng=public):
        base = rng.normal(size=n)       # a seed effect common to the four variants
        return {k: base + rng.normal(size=n) * scale + i for i, k in enumerate(_DESIGN4)}
    cases = [case(rand(10)), case(rand(5, 0.1)), case(rand(8), level=0.9),
             case(_stored_cells("mean_acc_to_5000")),
             case(_stored_cells("steps_to_80"))]
    if hidden:
        cases += [case(rand(4, 3.0, secret), level=0.9), case(rand(12, rng=secret), 0.99),
                  case(_stored_cells("acc_at_1000"), level=0.9)]
    run_check(fn, "projection_main_effect", ["cells", "level"], cases,
              reference=_main_effect, mistakes=_MAIN_EFFECT_MISTAKES,
              slack=lambda u: 1e-9, outputs=("mean", "low", "high"), forbidden={
                  "lncourse.majority.stats.factorial_effects": "this exercise asks you to "
                  "compute the effect yourself, not to call the chapter's factorial_effects"})


MISTAKES = {"projection_main_effect": _MAIN_EFFECT_MISTAKES}
