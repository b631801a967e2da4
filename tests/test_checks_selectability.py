"""Every chapter-2 check passes the reference and names plausible mistakes."""

import math

import numpy as np
import pytest
import torch
from scipy.optimize import linprog

from lncourse.checks import selectability as cs

from conftest import assert_check_passes


# --------------------------------------------------------------- reference solutions
def hull_vertices_2d(points):
    return cs._monotone_chain(points)


def unselectable_lp(keys):
    K = keys.double().numpy()
    out = torch.zeros(len(K), dtype=torch.bool)
    for i in range(len(K)):
        others = np.delete(K, i, axis=0)
        res = linprog(np.zeros(len(others)), A_eq=np.vstack([others.T, np.ones(len(others))]),
                      b_eq=np.append(K[i], 1.0), bounds=(0, None), method="highs")
        out[i] = res.status == 0
    return out


def ellipsoid_query(x, gamma, beta, i):
    return x[i] / gamma


def braid_reflect(keys, i, steps):
    q = keys[i].clone()
    for _ in range(steps):
        scores = keys @ q
        scores[i] = -math.inf
        j = int(torch.argmax(scores))
        if float(keys[i] @ q) > float(scores[j]):
            return q
        w = keys[j] - keys[i]
        q = q - 2 * (q @ w) / (w @ w) * w
    return q


REFERENCES = [
    (cs.check_hull_vertices_2d, hull_vertices_2d),
    (cs.check_unselectable_lp, unselectable_lp),
    (cs.check_ellipsoid_query, ellipsoid_query),
    (cs.check_braid_reflect, braid_reflect),
]


@pytest.mark.parametrize("check, solution", REFERENCES, ids=lambda f: getattr(f, "__name__", ""))
def test_reference_passes_and_prints_one_line(check, solution, capsys):
    assert_check_passes(check, solution, capsys)


def test_stub_propagates_not_implemented():
    def stub(points):
        raise NotImplementedError("write me")
    with pytest.raises(NotImplementedError):
        cs.check_hull_vertices_2d(stub)


# ------------------------------------------------------------------- wrong answers
def test_hull_mistakes():
    with pytest.raises(AssertionError, match="middle of an edge"):
        cs.check_hull_vertices_2d(lambda points: cs._monotone_chain(points, strict=False))
    with pytest.raises(AssertionError, match="interior points"):
        cs.check_hull_vertices_2d(lambda points: ~cs._monotone_chain(points))
    with pytest.raises(AssertionError, match="one half of the hull"):
        cs.check_hull_vertices_2d(lambda points: cs._monotone_chain(points, upper=False))
    with pytest.raises(AssertionError, match="every point"):
        cs.check_hull_vertices_2d(lambda points: torch.ones(len(points), dtype=torch.bool))
    with pytest.raises(AssertionError, match="should take parameters"):
        cs.check_hull_vertices_2d(lambda pts: cs._monotone_chain(pts))


def test_lp_mistakes():
    with pytest.raises(AssertionError, match=">= 0"):
        cs.check_unselectable_lp(lambda keys: cs._hull_lp(keys, nonnegative=False))
    with pytest.raises(AssertionError, match="its own candidates"):
        cs.check_unselectable_lp(lambda keys: cs._hull_lp(keys, include_self=True))
    with pytest.raises(AssertionError, match="cone"):
        cs.check_unselectable_lp(lambda keys: cs._hull_lp(keys, equality=False))
    with pytest.raises(AssertionError, match="returned the selectable"):
        cs.check_unselectable_lp(lambda keys: ~unselectable_lp(keys))
    with pytest.raises(AssertionError, match="boolean tensor"):
        cs.check_unselectable_lp(lambda keys: [True] * len(keys))


def test_ellipsoid_mistakes():
    with pytest.raises(AssertionError, match="own direction"):
        cs.check_ellipsoid_query(lambda x, gamma, beta, i: gamma * x[i] + beta)
    with pytest.raises(AssertionError, match="gamma is ignored"):
        cs.check_ellipsoid_query(lambda x, gamma, beta, i: x[i])
    with pytest.raises(AssertionError, match="multiplied by gamma"):
        cs.check_ellipsoid_query(lambda x, gamma, beta, i: gamma * x[i])
    with pytest.raises(AssertionError, match="beta adds"):
        cs.check_ellipsoid_query(lambda x, gamma, beta, i: x[i] / gamma + beta)


def test_braid_reflect_mistakes():
    with pytest.raises(AssertionError, match=r"\(k_j - k_i\) \. q = 0"):
        cs.check_braid_reflect(lambda keys, i, steps: cs._walk(keys, i, steps, relative=False))
    with pytest.raises(AssertionError, match="twice as far"):
        cs.check_braid_reflect(lambda keys, i, steps: cs._walk(keys, i, steps, factor=1.0))
    with pytest.raises(AssertionError, match="stop and return"):
        cs.check_braid_reflect(lambda keys, i, steps: cs._walk(keys, i, steps, stop=False))
    with pytest.raises(AssertionError, match="start from the key itself"):
        cs.check_braid_reflect(lambda keys, i, steps: cs._walk(
            keys, i, steps, start=lambda k, j: k[j] - k.mean(0)))


def test_in_place_modification_is_caught():
    def sloppy(keys, i, steps):
        keys[i] = keys[i] * 1.0 + 1.0
        return braid_reflect(keys, i, steps)
    with pytest.raises(AssertionError, match="in place"):
        cs.check_braid_reflect(sloppy)
