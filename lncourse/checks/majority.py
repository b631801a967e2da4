"""Checks for the exercises of chapter 3 (majority); the one on the replication's statistics
(the projection's main effect) is in :mod:`.majority_stats`. Their references and known
mistakes are the teacher's key (:mod:`lncourse.checks.key.majority`)."""

from __future__ import annotations

import math
from collections.abc import Callable

import torch
from torch import Tensor

from lncourse.checks._compare import Verdict, kind_problem
from lncourse.checks._core import Key, case, drawn_ints, generator, run_check


# the chapter's other check (its exercise on the statistics) lives apart, with its data;
# the lesson finds it here, as checks.check_projection_main_effect
from lncourse.checks.majority_stats import check_projection_main_effect  # noqa: E402,F401

__all__ = ["check_has_clear_majority", "check_norm_without_projection",
           "check_query_angle", "check_attend_counts", "check_uniform_query_weights"]


def check_has_clear_majority(fn: Callable[[Tensor, int], Tensor], *, hidden: bool = False) -> None:
    """``has_clear_majority(counts, min_margin)``: counts (N, C) -> bool (N,)."""
    g = generator(0)
    random = torch.randint(0, 6, (64, 20), generator=g)
    boost = torch.randint(0, 14, (64,), generator=g)      # about half get a clear winner
    random[torch.arange(64), torch.randint(0, 20, (64,), generator=g)] += boost
    edge = torch.tensor([
        [8, 2, 0, 0],    # margin exactly 6 -> kept
        [7, 2, 0, 0],    # margin 5 -> dropped
        [10, 0, 0, 0],   # one class only: the release drops it
        [3, 9, 3, 0],    # the largest is not first
        [5, 5, 0, 0],    # a tie
        [0, 1, 13, 7],   # margin 6 again, unordered
    ])
    cases = [case(random, 6), case(edge, 6), case(edge, 1)]
    if hidden:
        cases += [case(edge, 0), case(torch.tensor([[4, 9]]), 5),
                  case(torch.randint(0, 30, (500, 7), generator=g), 10)]
    run_check(fn, "has_clear_majority", ["counts", "min_margin"], cases,
              key=Key(__name__, hidden))


def check_norm_without_projection(fn: Callable[[Tensor], Tensor], *, hidden: bool = False) -> None:
    """``norm_without_projection(x)``: (..., d) -> (..., d), the paper's LayerNorm
    without projection, over the last axis."""
    g = generator(1)
    cases = [case(torch.randn(10, 8, generator=g)),
             case(torch.randn(3, 5, 3, generator=g) * 7 + 2),
             case(torch.ones(2, 4)),                  # constant rows: fine without projection
             case(torch.tensor([[3.0, 4.0]]))]
    if hidden:
        cases += [case(torch.randn(2, 2, 2, 6, generator=g) * 1e3),
                  case(torch.randn(4, 9, generator=g) * 1e-3),
                  case(torch.randn(5, 21, generator=g, dtype=torch.float64))]
    run_check(fn, "norm_without_projection", ["x"], cases,
              key=Key(__name__, hidden), forbidden={
                  "lncourse.majority.task.norm1": "this exercise asks you to write it yourself, "
                  "not to call the chapter's norm1"})


def _angle_slack(u: float) -> float:
    # the slack an answer of unit roundoff u gets near 0 degrees: sqrt(8 u) radians
    # (0.06 degrees in float32), more than the inputs' rounding moves the angle; the
    # key's reference (lncourse.checks.key.majority) says why
    return math.degrees(math.sqrt(8 * u))


def check_query_angle(fn: Callable[[Tensor], Tensor], *, hidden: bool = False) -> None:
    """``query_angle(queries)``: (..., d) -> (...), the angle in degrees between each
    query and 1, folded into [0, 90]."""
    g = generator(2)
    edge = torch.tensor([[1.0, 1.0, 1.0], [-2.0, -2.0, -2.0], [1.0, -1.0, 0.0],
                         [1.0, 0.0, 0.0], [-1.0, 0.0, 0.0]])
    cases = [case(torch.randn(50, 8, generator=g)), case(edge),
             case(torch.randn(4, 6, 3, generator=g) + 1.0)]
    if hidden:
        cases += [case(torch.tensor([[3.0, 3.0], [1.0, -1.0], [0.0, 5.0]])),
                  case(torch.randn(2, 3, 4, 16, generator=g) - 2.0),
                  case(torch.randn(20, 5, generator=g, dtype=torch.float64))]
    run_check(fn, "query_angle", ["queries"], cases,
              key=Key(__name__, hidden), slack=_angle_slack, forbidden={
                  "lncourse.majority.task.query_angles": "this exercise asks you to write it "
                  "yourself, not to call the chapter's query_angles"})


def check_attend_counts(fn: Callable[[Tensor, Tensor, Tensor], Tensor], *,
                        hidden: bool = False) -> None:
    """``attend_counts(scores, counts, values)``: scores (C, C), counts (B, C), values
    (C, d) -> (B, C, d), the attention output of a token of each class in each sequence,
    attending over all positions of its sequence."""
    g = generator(3)
    C, d = 6, 4
    counts = torch.randint(0, 5, (12, C), generator=g)
    counts[:, 0] += 1                                   # no empty sequence
    counts[0] = torch.tensor([50, 0, 0, 0, 0, 0])       # a single class
    cases = [case(torch.randn(C, C, generator=g), counts, torch.randn(C, d, generator=g)),
             case(10 * torch.randn(C, C, generator=g), counts, torch.randn(C, d, generator=g))]
    if hidden:
        sparse = torch.zeros(3, 20, dtype=torch.long)
        sparse[0, 4], sparse[1, :2], sparse[2, 7:] = 50, 25, 4
        cases += [case(torch.randn(20, 20, generator=g), sparse, torch.randn(20, 8, generator=g)),
                  case(torch.randn(2, 2, generator=g), torch.tensor([[1, 49]]),
                       torch.randn(2, 1, generator=g)),
                  case(torch.randn(C, C, generator=g, dtype=torch.float64), counts,
                       torch.randn(C, 3, generator=g, dtype=torch.float64))]
    run_check(fn, "attend_counts", ["scores", "counts", "values"], cases,
              key=Key(__name__, hidden))


# ------------------------------------------------- queries parallel to 1, by hand
def _uniform_judge(got, args, kwargs, precision) -> Verdict:
    """The exercise's two conditions on a pair (W_Q, W_K) of (d, d) matrices: the
    effective query of every LayerNorm'd token is a multiple of 1, and a nonzero one for
    almost every token. Why the test below decides them is in the teacher's key
    (lncourse.checks.key.majority)."""
    (d,) = args
    if not (isinstance(got, (tuple, list)) and len(got) == 2):
        what = "None: did you forget `return`?" if got is None else type(got).__name__
        return False, math.inf, f"return a pair (W_Q, W_K), got {what}"
    for name, W in zip(("W_Q", "W_K"), got):
        problem = kind_problem(W, torch.zeros(d, d, dtype=precision), precision)
        if problem:
            return False, math.inf, f"{name}: {problem}"
        if tuple(torch.as_tensor(W).shape) != (d, d):
            return False, math.inf, f"{name} must have shape ({d}, {d}), got {tuple(W.shape)}"
    W_Q, W_K = (torch.as_tensor(W).detach().cpu().double() for W in got)
    if not (torch.isfinite(W_Q).all() and torch.isfinite(W_K).all()):
        return False, math.inf, "the weights contain NaN or inf"
    M = W_Q.T @ W_K
    if not torch.isfinite(M).all():
        return False, math.inf, ("W_Q^T W_K overflows (entries too large for the dtype): "
                                 "scale the weights down")
    P = torch.eye(d, dtype=torch.float64) - 1.0 / d
    u = max(torch.finfo(torch.as_tensor(w).dtype).eps for w in got)
    scale = float(W_Q.norm() * W_K.norm()) or 1.0
    across, alive = float((P @ M @ P).norm()), float((P @ M).norm())
    if alive <= 1e3 * d * u * scale:
        return False, math.inf, ("every LayerNorm'd token gets the zero query (h W_Q^T W_K = 0 "
                                 "for every h orthogonal to 1): uniform, but trivially")
    if across > 64 * d * u * scale:
        return False, across / alive, ("the queries are not all parallel to 1: some keys "
                                       "then score higher than others")
    return True, across / alive, ""


def check_uniform_query_weights(fn: Callable[[int], tuple[Tensor, Tensor]], *,
                                hidden: bool = False) -> None:
    """``uniform_query_weights(d)``: an int -> (W_Q, W_K), two (d, d) matrices under
    which every LayerNorm'd token's effective query is a multiple of 1, and almost
    never 0."""
    # teacher-only sizes: d = 2, and two drawn from the grader's key
    sizes = (3, 8, 21) + ((2, *drawn_ints(12, 4, 40), *drawn_ints(13, 41, 96))
                          if hidden else ())
    run_check(fn, "uniform_query_weights", ["d"], [case(d) for d in sizes],
              key=Key(__name__, hidden),
              judge=_uniform_judge, passed="queries are nonzero multiples of 1",
              dtype=torch.float32)
