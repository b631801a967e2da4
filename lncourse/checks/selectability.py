"""Checks for the exercises of chapter 2 (unselectable keys)."""

from __future__ import annotations

import math
from collections.abc import Callable

import numpy as np
import torch
from scipy.optimize import linprog
from torch import Tensor

from lncourse.layernorm import layer_norm
from lncourse.selectability.exact import selectability
from lncourse.checks._compare import Verdict, kind_problem
from lncourse.checks._core import case, generator, run_check

__all__ = ["check_hull_vertices_2d", "check_unselectable_lp", "check_ellipsoid_query",
           "check_braid_reflect", "check_causal_unselectable"]

_SOLVERS = ("lncourse.selectability.exact.selectability", "lncourse.selectability.exact.selectability_batch",
            "lncourse.selectability.experiments.selectability_lp_baseline")


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


def check_hull_vertices_2d(fn: Callable[[Tensor], Tensor], *, hidden: bool = False) -> None:
    """Vertices of a planar point set, including points on edges and collinear sets."""
    g = generator(2)
    grid = torch.tensor([[a, b] for a in range(3) for b in range(3)], dtype=torch.float64)
    cases = [
        case(grid),                                                      # 3 x 3 grid
        case(torch.randn(12, 2, generator=g, dtype=torch.float64)),
        case(torch.randn(40, 2, generator=g, dtype=torch.float64) * 3 + 5),
        case(torch.tensor([[0.0, 0.0], [1.0, 1.0], [3.0, 3.0], [2.0, 2.0]],
                          dtype=torch.float64)),                         # collinear
        case(torch.tensor([[0.0, 0.0], [4.0, 0.0], [0.0, 4.0], [1.0, 1.0], [2.0, 0.0]],
                          dtype=torch.float64)),                         # edge midpoint
    ]
    if hidden:
        angles = torch.rand(15, generator=g, dtype=torch.float64) * 2 * math.pi
        square = torch.tensor([[a, b] for a in range(5) for b in range(5)
                               if a in (0, 4) or b in (0, 4)], dtype=torch.float64)
        cases += [
            case(torch.stack([angles.cos(), angles.sin()], 1)),         # all on a circle
            case(square - 2.0),                                          # edges full of points
            case(torch.tensor([[0.0, 0.0], [1.0, 0.0], [0.0, 1.0]], dtype=torch.float64)),
            case(torch.tensor([[2.0, -1.0], [-3.0, 5.0]], dtype=torch.float64)),
            case(torch.randn(200, 2, generator=g, dtype=torch.float64)),
            case(torch.tensor([[0.0, 0.0], [0.0, 1.0], [0.0, 3.0], [0.0, 2.0]],
                              dtype=torch.float64)),                     # vertical line
        ]
    run_check(fn, "hull_vertices_2d", ["points"], cases, reference=_selectable,
              mistakes=_HULL_MISTAKES,
              forbidden={path: "this exercise asks you to find the hull yourself"
                         for path in ("scipy.spatial.ConvexHull", *_SOLVERS)})


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


def check_unselectable_lp(fn: Callable[[Tensor], Tensor], *, hidden: bool = False) -> None:
    """True where a key is a convex combination of the keys that differ from it (an LP)."""
    g = generator(3)
    # a point on an edge, shifted away from 0, where the mistakes above all differ
    edge = torch.tensor([[5.0, 5.0], [6.0, 5.0], [7.0, 5.0], [5.0, 6.0]], dtype=torch.float64)
    twins = torch.tensor([[0.0, 0.0], [2.0, 0.0], [0.0, 2.0], [2.0, 0.0], [0.5, 0.5]],
                         dtype=torch.float64)                  # keys 1 and 3 are twins
    cases = [
        case(edge),
        case(twins),
        case(torch.randn(4, 5, generator=g, dtype=torch.float64)),           # n <= d + 1
        case(torch.randn(15, 2, generator=g, dtype=torch.float64) + 6.0),    # far from 0
        case(torch.randn(25, 3, generator=g, dtype=torch.float64)),
        case(torch.tensor([[0.0, 0.0], [2.0, 0.0], [0.0, 2.0], [0.5, 0.5]], dtype=torch.float64)),
    ]
    if hidden:
        inner = torch.randn(12, 3, generator=g, dtype=torch.float64)
        cases += [
            case(torch.cat([inner, inner[:4]])),                 # four keys, each with a twin
            case(torch.tensor([[1.0, 1.0], [1.0, 1.0], [3.0, 2.0]], dtype=torch.float64)),
            case(torch.randn(30, 4, generator=g, dtype=torch.float64) * 2 - 1),
            case(torch.randn(6, 8, generator=g, dtype=torch.float64)),
        ]
    run_check(fn, "unselectable_lp", ["keys"], cases, reference=lambda k: ~_selectable(k),
              mistakes=_LP_MISTAKES,
              forbidden={path: "this exercise asks you to solve the LP yourself"
                         for path in _SOLVERS})


# --------------------------------------------------------- a query on an ellipsoid
def _ellipsoid_judge(q, args, kwargs, precision) -> Verdict:
    keys, gamma, beta, i = args
    problem = kind_problem(q, keys[i], precision)
    if problem:
        return False, math.inf, problem
    q = torch.as_tensor(q).detach().cpu().double()
    if q.shape != keys[i].shape:
        return False, math.inf, f"the query has shape {tuple(q.shape)}, expected {tuple(keys[i].shape)}"
    if not torch.isfinite(q).all() or q.norm() == 0:
        return False, math.inf, ("the query must be finite and nonzero (under q = 0 every "
                                 "key gets the same score)")
    scores = keys @ q
    # twins of key i (equal to rounding) are the same point and need not be beaten
    rivals = (keys - keys[i]).abs().amax(1) > 1e-12 * float(keys.abs().max())
    margin = float(scores[i] - scores[rivals].max())
    if margin > 1e-9 * float(q.norm() * keys.abs().max()):
        return True, margin, ""
    j = int(torch.nonzero(rivals)[scores[rivals].argmax()])
    return False, -margin, (f"under your query key {j} scores {float(scores[j]):.4g}, "
                            f"at least as much as key {i} ({float(scores[i]):.4g})")


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


def _ellipsoid_keys(n: int, d: int, g: torch.Generator, gamma: Tensor | None = None):
    x = layer_norm(torch.randn(n, d, generator=g, dtype=torch.float64))  # on the sphere
    if gamma is None:
        gamma = torch.rand(d, generator=g, dtype=torch.float64) * 2 + 0.2
    beta = torch.randn(d, generator=g, dtype=torch.float64) * 2
    return x * gamma + beta, gamma, beta


def check_ellipsoid_query(fn: Callable[[Tensor, Tensor, Tensor, int], Tensor], *,
                          hidden: bool = False) -> None:
    """Any query under which key i, on an ellipsoid, beats every key that differs from it."""
    g = generator(4)
    specs = [(10, 4, 0), (30, 8, 7), (5, 3, 4), (40, 3, 11)] + (
        [(200, 16, 123), (12, 3, 5), (50, 6, 0)] if hidden else [])
    cases = [case(*_ellipsoid_keys(n, d, g), i) for n, d, i in specs]
    if hidden:
        keys, gamma, beta = _ellipsoid_keys(8, 5, g, gamma=torch.tensor(
            [1.5, -0.7, 0.3, -2.0, 1.0], dtype=torch.float64))        # negative gains
        cases.append(case(keys, gamma, beta, 3))
        cases.append(case(torch.cat([keys, keys[3:4]]), gamma, beta, 3))   # a twin of key 3
    run_check(fn, "ellipsoid_query", ["keys", "gamma", "beta", "i"], cases,
              judge=_ellipsoid_judge, passed="key i beats every other key",
              mistakes=_ELLIPSOID_MISTAKES, forbidden={
                  path: "this exercise asks for a query from the proof, not from a solver"
                  for path in _SOLVERS})


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


def check_braid_reflect(fn: Callable[[Tensor, int, int], Tensor], *, hidden: bool = False) -> None:
    """The braid-reflect walk, step for step, on vertices and on interior keys."""
    g = generator(5)
    K1 = torch.randn(20, 3, generator=g, dtype=torch.float64) + torch.tensor(
        [2.0, 0, 0], dtype=torch.float64)
    K2 = torch.randn(40, 5, generator=g, dtype=torch.float64)
    inside1 = int(np.flatnonzero(~selectability(K1).selectable)[0])
    outside2 = int(np.flatnonzero(selectability(K2).selectable)[-1])
    cases = [case(K1, i, 30) for i in range(6)] + [
        case(K1, inside1, 7), case(K2, outside2, 50), case(K2, 3, 12)]
    if hidden:
        K3 = torch.randn(60, 4, generator=g, dtype=torch.float64) * 3
        cases += [case(K3, i, 25) for i in (0, 17, 59)] + [case(K1, 2, 0), case(K2, 9, 1)]
    run_check(fn, "braid_reflect", ["keys", "i", "steps"], cases, reference=_walk,
              mistakes=_WALK_MISTAKES, smooth=False)


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

_REAL_KEYS: dict = {}   # (head, T) -> keys, loaded once


def _head_keys(head: int, T: int) -> Tensor:
    """One head's keys (T, 2), layer 1 of the stored character model (full LayerNorm)."""
    if (head, T) not in _REAL_KEYS:
        from lncourse.results import load_result
        from lncourse.selectability.lm import load_model
        stored = load_result("selectability/lm_paper")   # real measured data
        model = load_model(stored, "full LayerNorm")
        ids = torch.tensor(stored["contexts"][:1])[:, :T]
        with torch.no_grad():
            _, _, cache = model(ids, return_cache=True)
        _REAL_KEYS[head, T] = cache["blocks.0.k"][0, head].double().clone()
    return _REAL_KEYS[head, T].clone()


def check_causal_unselectable(fn: Callable[[Tensor, list], float], *,
                              hidden: bool = False) -> None:
    """The share of (query, key) pairs of a causal head whose key cannot win, on random
    keys and on the keys of a trained model's head."""
    g, square = generator(6), torch.tensor([[0.0, 0.0], [1.0, 0.0], [1.0, 1.0], [0.0, 1.0],
                                            [0.5, 0.5], [0.2, 0.7], [2.0, 2.0]],
                                           dtype=torch.float64)
    cases = [
        case(square, [2, 4, 6]),
        case(torch.randn(30, 2, generator=g, dtype=torch.float64), list(range(3, 30, 3))),
        case(torch.randn(25, 3, generator=g, dtype=torch.float64) + 4.0, [5, 12, 24]),
        case(_head_keys(0, 96), list(range(8, 96, 8))),
    ]
    if hidden:
        cases += [
            case(_head_keys(2, 128), list(range(16, 128, 16))),
            case(torch.randn(40, 2, generator=g, dtype=torch.float64) * 0.01, [39]),
            case(square, [1]),
        ]
    run_check(fn, "causal_unselectable", ["keys", "positions"], cases,
              reference=lambda k, p: _causal(k, p), mistakes=_CAUSAL_MISTAKES,
              forbidden={"lncourse.selectability.experiments.prefix_unselectable_fraction":
                         "this exercise asks you to write the causal count yourself"})


# The known mistakes of every exercise this module checks, by the exercise's function
# name (tests/checks/test_exercises.py writes an answer for each).
MISTAKES = {
    "hull_vertices_2d": _HULL_MISTAKES,
    "unselectable_lp": _LP_MISTAKES,
    "ellipsoid_query": _ELLIPSOID_MISTAKES,
    "braid_reflect": _WALK_MISTAKES,
    "causal_unselectable": _CAUSAL_MISTAKES,
}
