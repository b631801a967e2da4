"""Check for chapter 3's exercise on the replication's statistics: the projection's main
effect in the 2 x 2 design, paired over seeds, with its t interval. Its reference and
known mistakes are the teacher's key (:mod:`lncourse.checks.key.majority_stats`)."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from lncourse.checks._core import Key, case, numpy_rng, run_check

__all__ = ["check_projection_main_effect"]


# --------------------------------------------------- the projection's main effect
_DESIGN4 = ("layernorm", "no_projection", "layernorm_released_scale", "no_projection_released")


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
              key=Key(__name__, hidden),
              slack=lambda u: 1e-9, outputs=("mean", "low", "high"), forbidden={
                  "lncourse.majority.stats.factorial_effects": "this exercise asks you to "
                  "compute the effect yourself, not to call the chapter's factorial_effects"})
