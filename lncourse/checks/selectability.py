"""Checks for the exercises of chapter 2 (unselectable keys)."""

from __future__ import annotations

import math
from collections.abc import Callable

import numpy as np
import torch
from scipy.optimize import linprog
from torch import Tensor

from ..selectability import selectability
from ._core import assert_signature, run_check

__all__ = ["check_hull_vertices_2d", "check_unselectable_lp", "check_ellipsoid_query",
           "check_braid_reflect"]


def _gen(seed: int) -> torch.Generator:
    return torch.Generator().manual_seed(seed)


# ------------------------------------------------------------------ vertices in the plane
def _vertices_ref(points: Tensor) -> Tensor:
    return torch.from_numpy(selectability(points.double()).selectable)


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
     lambda p: ~_vertices_ref(p)),
    ("only one half of the hull is there: build the lower hull and the upper hull (the "
     "same loop over the points in reverse order)",
     lambda p: _monotone_chain(p, upper=False)),
    ("every point is marked as a vertex", lambda p: torch.ones(len(p), dtype=torch.bool)),
]


def check_hull_vertices_2d(fn: Callable[[Tensor], Tensor]) -> None:
    """Vertices of a planar point set, including points on edges and collinear sets."""
    assert_signature(fn, ["points"])
    g = _gen(2)
    grid = torch.tensor([[a, b] for a in range(3) for b in range(3)], dtype=torch.float64)
    cases = [
        ((grid,), {}),                                                   # 3 x 3 grid
        ((torch.randn(12, 2, generator=g, dtype=torch.float64),), {}),
        ((torch.randn(40, 2, generator=g, dtype=torch.float64) * 3 + 5,), {}),
        ((torch.tensor([[0.0, 0.0], [1.0, 1.0], [3.0, 3.0], [2.0, 2.0]],
                       dtype=torch.float64),), {}),                      # collinear
        ((torch.tensor([[0.0, 0.0], [4.0, 0.0], [0.0, 4.0], [1.0, 1.0], [2.0, 0.0]],
                       dtype=torch.float64),), {}),                      # edge midpoint
    ]
    return run_check("hull_vertices_2d", fn, cases, _vertices_ref, _HULL_MISTAKES)


# -------------------------------------------------------------------- the LP that decides
def _hull_lp(keys: Tensor, equality: bool = True, include_self: bool = False,
             nonnegative: bool = True) -> Tensor:
    K = keys.double().numpy()
    out = torch.zeros(len(K), dtype=torch.bool)
    for i in range(len(K)):
        others = K if include_self else np.delete(K, i, axis=0)
        rows = [others.T] + ([np.ones(len(others))] if equality else [])
        rhs = np.append(K[i], 1.0) if equality else K[i]
        res = linprog(np.zeros(len(others)), A_eq=np.vstack(rows), b_eq=rhs,
                      bounds=(0, None) if nonnegative else (None, None), method="highs")
        out[i] = res.status == 0
    return out


def _unselectable_ref(keys: Tensor) -> Tensor:
    return torch.from_numpy(~selectability(keys.double()).selectable)


_LP_MISTAKES = [
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
     lambda k: ~_unselectable_ref(k)),
]


def check_unselectable_lp(fn: Callable[[Tensor], Tensor]) -> None:
    """True where a key is a convex combination of the others, from a HiGHS LP."""
    assert_signature(fn, ["keys"])
    g = _gen(3)
    simplex = torch.randn(4, 5, generator=g, dtype=torch.float64)       # n <= d + 1
    # first case: a point on an edge, shifted away from 0, where the four mistakes above
    # all give different answers (and differ from the right one)
    edge = torch.tensor([[5.0, 5.0], [6.0, 5.0], [7.0, 5.0], [5.0, 6.0]], dtype=torch.float64)
    cases = [
        ((edge,), {}),
        ((simplex,), {}),
        ((torch.randn(15, 2, generator=g, dtype=torch.float64) + 6.0,), {}),  # far from 0
        ((torch.randn(25, 3, generator=g, dtype=torch.float64),), {}),
        ((torch.tensor([[0.0, 0.0], [2.0, 0.0], [0.0, 2.0], [0.5, 0.5]],
                       dtype=torch.float64),), {}),
    ]
    compare = _bool_compare
    return run_check("unselectable_lp", fn, cases, _unselectable_ref, _LP_MISTAKES,
                     compare_fn=compare)


def _bool_compare(got, expected):
    if not isinstance(got, (Tensor, np.ndarray)):
        return False, math.inf, f"expected a boolean tensor, got {type(got).__name__}"
    got = torch.as_tensor(np.asarray(got)).bool()
    if got.shape != expected.shape:
        return False, math.inf, f"shape {tuple(got.shape)}, expected {tuple(expected.shape)}"
    wrong = int((got != expected).sum())
    return wrong == 0, float(wrong), f"{wrong} keys classified differently"


# --------------------------------------------------------- a query on an ellipsoid
_ELLIPSOID_MISTAKES = [
    ("you used the key's own direction gamma * x_i + beta; that works on a sphere, not "
     "on an ellipsoid: divide x_i by gamma instead",
     lambda x, g, b, i: g * x[i] + b),
    ("gamma is ignored: q = x_i wins on the sphere, but the keys were stretched by gamma",
     lambda x, g, b, i: x[i].clone()),
    ("you multiplied by gamma; the proof divides: q = x_i / gamma makes q . (gamma * x_j) "
     "equal x_i . x_j",
     lambda x, g, b, i: g * x[i]),
    ("beta adds the same amount q . beta to every score and changes no winner: leave it "
     "out of the query",
     lambda x, g, b, i: x[i] / g - b),
    ("beta adds the same amount q . beta to every score and changes no winner: leave it "
     "out of the query",
     lambda x, g, b, i: x[i] / g + b),
]


def check_ellipsoid_query(fn: Callable[[Tensor, Tensor, Tensor, int], Tensor]) -> None:
    """The query x_i / gamma under which gamma * x_i + beta is the top-scoring key."""
    assert_signature(fn, ["x", "gamma", "beta", "i"])
    g = _gen(4)
    cases = []
    for n, d, i in [(10, 4, 0), (30, 8, 7), (5, 3, 4)]:
        z = torch.randn(n, d, generator=g, dtype=torch.float64)
        z = z - z.mean(-1, keepdim=True)
        x = math.sqrt(d) * z / z.norm(dim=-1, keepdim=True)              # LayerNorm output
        gamma = torch.rand(d, generator=g, dtype=torch.float64) * 2 + 0.2
        beta = torch.randn(d, generator=g, dtype=torch.float64)
        cases.append(((x, gamma, beta, i), {}))
    return run_check("ellipsoid_query", fn, cases, lambda x, g_, b, i: x[i] / g_,
                     _ELLIPSOID_MISTAKES, atol=1e-8, rtol=1e-6)


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


def check_braid_reflect(fn: Callable[[Tensor, int, int], Tensor]) -> None:
    """The braid-reflect walk, step for step, on vertices and on interior keys."""
    assert_signature(fn, ["keys", "i", "steps"])
    g = _gen(5)
    K1 = torch.randn(20, 3, generator=g, dtype=torch.float64) + torch.tensor([2.0, 0, 0],
                                                                           dtype=torch.float64)
    K2 = torch.randn(40, 5, generator=g, dtype=torch.float64)
    inside1 = int(np.flatnonzero(~selectability(K1).selectable)[0])
    outside2 = int(np.flatnonzero(selectability(K2).selectable)[-1])
    cases = [((K1, i, 30), {}) for i in range(6)] + [
        ((K1, inside1, 7), {}), ((K2, outside2, 50), {}), ((K2, 3, 12), {})]
    return run_check("braid_reflect", fn, cases, _walk, _WALK_MISTAKES, atol=1e-8, rtol=1e-6)
