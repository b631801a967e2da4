"""Chapter 2's checks judge the ellipsoid query by its property and treat twin keys as
the chapter does."""

import numpy as np
import pytest
import torch
from scipy.optimize import linprog

from answers import WRONG, unselectable_lp
from lncourse import checks


def test_any_winning_query_passes_the_ellipsoid_check():
    """Queries the proof does not give, found by a generic search, pass too: the check
    judges whether key i wins, not whether the query equals one formula."""
    def by_linear_program(keys, gamma, beta, i):
        # maximise the margin t of key i over the others: (k_j - k_i) . q + t <= 0, |q| <= 1
        K = keys.numpy()
        rivals = np.abs(K - K[i]).max(1) > 0
        A = np.hstack([K[rivals] - K[i], np.ones((int(rivals.sum()), 1))])
        res = linprog(np.r_[np.zeros(K.shape[1]), -1.0], A_ub=A, b_ub=np.zeros(len(A)),
                      bounds=[(-1, 1)] * K.shape[1] + [(0, None)], method="highs")
        return torch.from_numpy(res.x[:-1])
    checks.check_ellipsoid_query(by_linear_program, hidden=True)


def test_twin_keys_are_selectable_as_in_the_chapter():
    """selectability() calls a key with a twin selectable when the point is a vertex;
    the LP exercise must agree, and its check contains twins."""
    from lncourse.selectability.exact import selectability
    keys = torch.tensor([[0.0, 0.0], [2.0, 0.0], [0.0, 2.0], [2.0, 0.0]], dtype=torch.float64)
    assert selectability(keys).selectable.tolist() == [True, True, True, True]
    assert unselectable_lp(keys).tolist() == [False] * 4
    with pytest.raises(AssertionError, match="twin"):
        checks.check_unselectable_lp(WRONG["unselectable_lp"][0].fn)
