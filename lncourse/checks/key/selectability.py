"""The key to chapter 2's checks (:mod:`lncourse.checks.selectability`): references and
known mistakes. Teacher-only: left out of the published package."""

from __future__ import annotations

import math

import numpy as np
import torch
from scipy.optimize import linprog
from torch import Tensor

from lncourse.selectability.exact import selectability


def _selectable(keys: Tensor) -> Tensor:
    return torch.from_numpy(selectability(keys.double()).selectable)


# ------------------------------------------------------------------ vertices in the plane
def _monotone_chain(points: Tensor, strict: bool = True, upper: bool = True) -> Tensor:
    pts = points.double()
    order = sorted(range(len(pts)), key=lambda j: (float(pts[j, 0]), float(pts[j, 1])))

    def cross(o, a, b):
        return float((pts[a, 0] - pts[o, 0]) * (pts[b, 1] - pts[o, 1])
                     - (pts[a, 1] - pts[o, 1]) * (pts[b, 0] - pts[o, 0]))

    def half(indices):
        stack = []
        for j in indices:
            while len(stack) >= 2 and (cross(stack[-2], stack[-1], j) <= 0 if strict
                                       else cross(stack[-2], stack[-1], j) < 0):
                stack.pop()
            stack.append(j)
        return stack

    vertices = set(half(order)) | (set(half(order[::-1])) if upper else set())
    out = torch.zeros(len(pts), dtype=torch.bool)
    out[sorted(vertices)] = True
    return out

_HULL_MISTAKES = [
    ("points in the middle of an edge are counted as vertices: pop from the stack when "
     "the cross product is <= 0, not only when it is < 0 (such points never win strictly)",
     lambda p: _monotone_chain(p, strict=False)),
    ("you returned the interior points; the vertices (the selectable keys) are wanted",
     lambda p: ~_selectable(p)),
    ("only one half of the hull is there: build the lower hull and the upper hull (the "
     "same loop over the points in reverse order)",
     lambda p: _monotone_chain(p, upper=False)),
    ("every point is marked as a vertex", lambda p: torch.ones(len(p), dtype=torch.bool)),
]


# -------------------------------------------------------------------- the LP that decides
def _hull_lp(keys: Tensor, equality: bool = True, include_self: bool = False,
             nonnegative: bool = True, twins_apart: bool = True) -> Tensor:
    K = keys.double().numpy()
    out = torch.zeros(len(K), dtype=torch.bool)
    for i in range(len(K)):
        drop = (np.abs(K - K[i]).max(1) == 0) if twins_apart else (np.arange(len(K)) == i)
        others = K if include_self else K[~drop]
        if len(others) == 0:
            continue
        rows = [others.T] + ([np.ones(len(others))] if equality else [])
        rhs = np.append(K[i], 1.0) if equality else K[i]
        res = linprog(np.zeros(len(others)), A_eq=np.vstack(rows), b_eq=rhs,
                      bounds=(0, None) if nonnegative else (None, None), method="highs")
        out[i] = res.status == 0
    return out

_LP_MISTAKES = [
    ("a key with a twin (an equal key) counts as unselectable: twins are the same point, "
     "so drop every key equal to k_i, not only row i, before solving",
     lambda k: _hull_lp(k, twins_apart=False)),
    ("the weights are not constrained to be >= 0: that tests the affine hull, which "
     "contains every key once there are more than d + 1 of them",
     lambda k: _hull_lp(k, nonnegative=False)),
    ("key i is among its own candidates: it always reproduces itself with weight 1; "
     "drop row i before solving",
     lambda k: _hull_lp(k, include_self=True)),
    ("the weights need not sum to 1: that tests the cone spanned by the other keys, not "
     "their convex hull; add the row of ones to A_eq and 1 to b_eq",
     lambda k: _hull_lp(k, equality=False)),
    ("you returned the selectable keys; True should mark keys inside the hull",
     _selectable),
]

_ELLIPSOID_MISTAKES = [
    ("q = k_i, the key's own direction, wins on a sphere, not on an ellipsoid: undo "
     "beta and gamma first", lambda k, g, b, i: k[i].clone()),
    ("k_i - beta is gamma * x_i, with x_i on the sphere; the chapter's query is "
     "x_i / gamma, so divide by gamma twice", lambda k, g, b, i: k[i] - b),
    ("(k_i - beta) / gamma is x_i, the point on the sphere; a key stretched by gamma "
     "needs the query x_i / gamma", lambda k, g, b, i: (k[i] - b) / g),
    ("subtract beta before dividing by gamma: k_i = gamma * x_i + beta",
     lambda k, g, b, i: k[i] / g ** 2),
]


# ---------------------------------------------------------------- the braid-reflect walk
def _walk(keys: Tensor, i: int, steps: int, start=None, relative: bool = True,
          factor: float = 2.0, stop: bool = True) -> Tensor:
    q = keys[i].clone() if start is None else start(keys, i)
    for _ in range(steps):
        scores = keys @ q
        scores[i] = -math.inf
        j = int(torch.argmax(scores))
        if stop and float(keys[i] @ q) > float(scores[j]):
            return q
        w = keys[j] - keys[i] if relative else keys[j]
        q = q - factor * (q @ w) / (w @ w) * w
    return q

_WALK_MISTAKES = [
    ("you reflected across k_j . q = 0; the tie hyperplane is (k_j - k_i) . q = 0, so "
     "use w = k_j - k_i", lambda k, i, s: _walk(k, i, s, relative=False)),
    ("you projected q onto the tie hyperplane (a step of 1 x (q.w)/(w.w) w); a "
     "reflection goes twice as far, to the other side",
     lambda k, i, s: _walk(k, i, s, factor=1.0)),
    ("the walk should stop and return q as soon as key i beats every other key",
     lambda k, i, s: _walk(k, i, s, stop=False)),
    ("start from the key itself, q = k_i",
     lambda k, i, s: _walk(k, i, s, start=lambda kk, ii: kk[ii] - kk.mean(0))),
]


# ------------------------------------------------- the keys one causal head chooses from
def _causal(keys: Tensor, positions, causal: bool = True, own: bool = True,
            per_position: bool = False, selectable: bool = False) -> float:
    """Share of pairs (t, s <= t) whose key s cannot win among keys 0..t (the mistakes)."""
    keys = keys.double()
    shares, unsel, total = [], 0, 0
    for t in positions:                   # the keys the head sees at query position t
        seen = keys[: t + 1] if own else keys[:t]
        pool = seen if causal else keys
        out = ~_selectable(pool)[: len(seen)]
        if selectable:
            out = ~out
        shares.append(float(out.double().mean()))
        unsel, total = unsel + int(out.sum()), total + len(seen)
    return float(np.mean(shares)) if per_position else unsel / total

_CAUSAL_MISTAKES = [
    ("key s was judged among all the keys of the context: a causal head at position t "
     "chooses among keys 0..t only, so judge keys[: t + 1]",
     lambda k, p: _causal(k, p, causal=False)),
    ("the query's own key is left out: at position t the head sees keys[: t + 1]",
     lambda k, p: _causal(k, p, own=False)),
    ("you averaged the share per query position; the share of all (t, s) pairs is wanted: "
     "sum the unselectable keys and the keys seen, then divide",
     lambda k, p: _causal(k, p, per_position=True)),
    ("you returned the share of selectable keys; the unselectable ones are wanted",
     lambda k, p: _causal(k, p, selectable=True)),
]


# The known mistakes of every exercise this module checks, by the exercise's function
# name (tests/checks/test_exercises.py writes an answer for each).
MISTAKES = {
    "hull_vertices_2d": _HULL_MISTAKES,
    "unselectable_lp": _LP_MISTAKES,
    "ellipsoid_query": _ELLIPSOID_MISTAKES,
    "braid_reflect": _WALK_MISTAKES,
    "causal_unselectable": _CAUSAL_MISTAKES,
}

REFERENCES = {
    "hull_vertices_2d": _selectable,
    "unselectable_lp": lambda k: ~_selectable(k),
    "braid_reflect": _walk,
    "causal_unselectable": lambda k, p: _causal(k, p),
}
