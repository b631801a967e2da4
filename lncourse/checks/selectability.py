"""Checks for the exercises of chapter 2 (unselectable keys). Their references and known
mistakes are the teacher's key (:mod:`lncourse.checks.key.selectability`)."""

from __future__ import annotations

import math
from collections.abc import Callable

import numpy as np
import torch
from torch import Tensor

from lncourse.layernorm import layer_norm
from lncourse.selectability.exact import selectability
from lncourse.checks._compare import Verdict, kind_problem
from lncourse.checks._core import Key, case, generator, run_check

__all__ = ["check_hull_vertices_2d", "check_unselectable_lp", "check_ellipsoid_query",
           "check_braid_reflect", "check_causal_unselectable"]

_SOLVERS = ("lncourse.selectability.exact.selectability", "lncourse.selectability.exact.selectability_batch",
            "lncourse.selectability.experiments.selectability_lp_baseline")


def check_hull_vertices_2d(fn: Callable[[Tensor], Tensor], *, hidden: bool = False) -> None:
    """``hull_vertices_2d(points)``: (n, 2) -> bool (n,), True exactly at the vertices
    of the points' convex hull; run on points on edges and on collinear sets too."""
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
    run_check(fn, "hull_vertices_2d", ["points"], cases, key=Key(__name__, hidden),
              forbidden={path: "this exercise asks you to find the hull yourself"
                         for path in ("scipy.spatial.ConvexHull", *_SOLVERS)})


def check_unselectable_lp(fn: Callable[[Tensor], Tensor], *, hidden: bool = False) -> None:
    """``unselectable_lp(keys)``: float64 (n, d) -> bool (n,), True where a key is a
    convex combination of the keys that differ from it, decided by an LP."""
    g = generator(3)
    # a point on an edge, shifted away from 0, where the known mistakes all differ
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
    run_check(fn, "unselectable_lp", ["keys"], cases, key=Key(__name__, hidden),
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


def _ellipsoid_keys(n: int, d: int, g: torch.Generator, gamma: Tensor | None = None):
    x = layer_norm(torch.randn(n, d, generator=g, dtype=torch.float64))  # on the sphere
    if gamma is None:
        gamma = torch.rand(d, generator=g, dtype=torch.float64) * 2 + 0.2
    beta = torch.randn(d, generator=g, dtype=torch.float64) * 2
    return x * gamma + beta, gamma, beta


def check_ellipsoid_query(fn: Callable[[Tensor, Tensor, Tensor, int], Tensor], *,
                          hidden: bool = False) -> None:
    """``ellipsoid_query(keys, gamma, beta, i)``: the keys (n, d) of LayerNorm'd vectors,
    LayerNorm's gamma and beta (d,), an index i -> a query (d,) under which key i beats
    every key that differs from it. Any such query passes."""
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
              key=Key(__name__, hidden),
              judge=_ellipsoid_judge, passed="key i beats every other key",
              forbidden={
                  path: "this exercise asks for a query from the proof, not from a solver"
                  for path in _SOLVERS})


def check_braid_reflect(fn: Callable[[Tensor, int, int], Tensor], *, hidden: bool = False) -> None:
    """``braid_reflect(keys, i, steps)``: float64 keys (n, d), an index, a number of
    steps -> the query (d,) where the braid-reflect walk stops, judged step for step, on
    vertices and on interior keys."""
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
    run_check(fn, "braid_reflect", ["keys", "i", "steps"], cases,
              key=Key(__name__, hidden), smooth=False)

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
    """``causal_unselectable(keys, positions)``: one head's keys (T, d_h) and a list of
    query positions -> a float, the share of (query, key) pairs of a causal head whose
    key is unselectable, on random keys and on the keys of a trained model's head."""
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
              key=Key(__name__, hidden),
              forbidden={"lncourse.selectability.experiments.prefix_unselectable_fraction":
                         "this exercise asks you to write the causal count yourself"})
