"""Checks for the exercises of chapter 3 (majority)."""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import Tensor

from ._core import assert_signature, compare, run_check

__all__ = ["check_has_clear_majority", "check_norm_without_projection",
           "check_query_angle", "check_attend_counts", "check_uniform_query_weights"]


# ------------------------------------------------------------- the margin rule
def _clear_majority_ref(counts: Tensor, min_margin: int) -> Tensor:
    top2 = counts.topk(2, dim=1).values
    return (top2[:, 0] - top2[:, 1] >= min_margin) & (top2[:, 1] > 0)


def _counts_cases() -> list:
    g = torch.Generator().manual_seed(0)
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
    return [((random, 6), {}), ((edge, 6), {}), ((edge, 1), {})]


def check_has_clear_majority(fn) -> float:
    """``has_clear_majority(counts, min_margin)``: counts (N, C) -> bool (N,)."""
    assert_signature(fn, ["counts", "min_margin"])
    mistakes = [
        ("a margin of exactly min_margin counts as clear: use >=, not >",
         lambda c, m: (lambda t: (t[:, 0] - t[:, 1] > m) & (t[:, 1] > 0))(c.topk(2, 1).values)),
        ("a sequence made of a single class has no second class: the released code drops "
         "it (len(part) == 1), so require the second count to be positive",
         lambda c, m: (lambda t: t[:, 0] - t[:, 1] >= m)(c.topk(2, 1).values)),
        ("compare the two largest counts, not the first two entries of the row",
         lambda c, m: (c[:, 0] - c[:, 1] >= m) & (c[:, 1] > 0)),
        ("compare the largest with the second largest count, not with the smallest",
         lambda c, m: (c.max(1).values - c.min(1).values >= m)
         & (c.topk(2, 1).values[:, 1] > 0)),
    ]
    return run_check("has_clear_majority", fn, _counts_cases(), _clear_majority_ref, mistakes)


# ------------------------------------------------- LayerNorm without projection
def _no_projection_ref(x: Tensor) -> Tensor:
    return math.sqrt(x.shape[-1]) * x / x.norm(dim=-1, keepdim=True)


def check_norm_without_projection(fn) -> float:
    """``norm_without_projection(x)``: (..., d) -> (..., d), sqrt(d) x / ||x||."""
    assert_signature(fn, ["x"])
    g = torch.Generator().manual_seed(1)
    cases = [((torch.randn(10, 8, generator=g),), {}),
             ((torch.randn(3, 5, 3, generator=g) * 7 + 2,), {}),
             ((torch.ones(2, 4),), {}),          # constant rows: fine without projection
             ((torch.tensor([[3.0, 4.0]]),), {})]
    mistakes = [
        ("that is the released code's version, x / (||x|| sqrt(d)): the paper's has norm "
         "sqrt(d), multiply by sqrt(d) instead of dividing",
         lambda x: x / x.norm(dim=-1, keepdim=True) / math.sqrt(x.shape[-1])),
        ("you subtracted the mean: that is full LayerNorm; without projection the "
         "numerator is x itself",
         lambda x: F.layer_norm(x, x.shape[-1:], eps=1e-12)),
        ("the output should have norm sqrt(d), not 1: multiply x / ||x|| by sqrt(d)",
         lambda x: x / x.norm(dim=-1, keepdim=True)),
        ("normalise over the last axis (each vector on its own), not the whole tensor",
         lambda x: math.sqrt(x.shape[-1]) * x / x.norm()),
    ]
    return run_check("norm_without_projection", fn, cases, _no_projection_ref, mistakes)


# ----------------------------------------------------------------- the query angle
def _angle_ref(queries: Tensor) -> Tensor:
    q = queries.double()
    along = q.sum(-1).abs() / math.sqrt(q.shape[-1])
    across = (q - q.mean(-1, keepdim=True)).norm(dim=-1)
    return torch.rad2deg(torch.atan2(across, along)).to(queries.dtype)


def check_query_angle(fn) -> float:
    """``query_angle(queries)``: (..., d) -> (...), degrees in [0, 90]."""
    assert_signature(fn, ["queries"])
    g = torch.Generator().manual_seed(2)
    edge = torch.tensor([[1.0, 1.0, 1.0], [-2.0, -2.0, -2.0], [1.0, -1.0, 0.0],
                         [1.0, 0.0, 0.0], [-1.0, 0.0, 0.0]])
    cases = [((torch.randn(50, 8, generator=g),), {}), ((edge,), {}),
             ((torch.randn(4, 6, 3, generator=g) + 1.0,), {})]
    mistakes = [
        ("fold the angle into [0, 90]: a query pointing along -1 also gives every key the "
         "same score, so it counts as aligned (use |cos| or 90 - |angle - 90|)",
         lambda q: torch.rad2deg(torch.acos(
             F.cosine_similarity(q, torch.ones_like(q), dim=-1).clamp(-1, 1)))),
        ("the angle should be in degrees, not radians (torch.rad2deg)",
         lambda q: torch.acos(F.cosine_similarity(q, torch.ones_like(q), dim=-1)
                              .abs().clamp(max=1.0))),
        ("the cosine divides by both norms: ||1|| = sqrt(d), not 1",
         lambda q: torch.rad2deg(torch.acos((q.sum(-1).abs() / q.norm(dim=-1))
                                            .clamp(max=1.0)))),
        ("that is the angle to the first axis, not to the all-ones vector",
         lambda q: torch.rad2deg(torch.acos((q[..., 0].abs() / q.norm(dim=-1))
                                            .clamp(max=1.0)))),
    ]
    # acos loses precision near 0 degrees (0.02 degrees in float32): allow for it.
    return run_check("query_angle", fn, cases, _angle_ref, mistakes, atol=0.05, rtol=1e-4)


# ------------------------------------------------------------ multiset attention
def _attend_counts_ref(scores: Tensor, counts: Tensor, values: Tensor) -> Tensor:
    logits = scores.unsqueeze(0) + torch.log(counts.to(scores.dtype)).unsqueeze(1)
    return torch.softmax(logits, dim=-1) @ values


def check_attend_counts(fn) -> float:
    """``attend_counts(scores, counts, values)``: (C, C), (B, C), (C, d) -> (B, C, d)."""
    assert_signature(fn, ["scores", "counts", "values"])
    g = torch.Generator().manual_seed(3)
    C, d = 6, 4
    counts = torch.randint(0, 5, (12, C), generator=g)
    counts[:, 0] += 1                                   # no empty sequence
    counts[0] = torch.tensor([50, 0, 0, 0, 0, 0])       # a single class
    cases = [((torch.randn(C, C, generator=g), counts, torch.randn(C, d, generator=g)), {}),
             ((10 * torch.randn(C, C, generator=g), counts, torch.randn(C, d, generator=g)), {})]
    mistakes = [
        ("each class must be weighted by how often it occurs: softmax over S_ij + log c_bj "
         "(you attended to every class once, present or not)",
         lambda S, c, v: torch.softmax(S, -1).unsqueeze(0).expand(c.shape[0], -1, -1) @ v),
        ("classes absent from the sequence must get zero weight, and present ones weight "
         "proportional to their count (you attended once to each present class)",
         lambda S, c, v: torch.softmax(S.unsqueeze(0) + torch.log((c > 0).to(S.dtype))
                                       .unsqueeze(1), -1) @ v),
        ("multiplying the weights by the counts after the softmax needs renormalising: "
         "the weights of a query must sum to 1",
         lambda S, c, v: (torch.softmax(S, -1).unsqueeze(0) * c.unsqueeze(1).to(S.dtype)) @ v),
        ("add log c_bj to the scores, do not multiply the scores by the counts",
         lambda S, c, v: torch.softmax(S.unsqueeze(0) * c.unsqueeze(1).to(S.dtype), -1) @ v),
    ]
    return run_check("attend_counts", fn, cases, _attend_counts_ref, mistakes, atol=1e-5)


# ------------------------------------------------- queries parallel to 1, by hand
def _uniform_property(d: int, W_Q: Tensor, W_K: Tensor) -> tuple[float, float]:
    """(largest spread of scores over keys, smallest query norm) on LayerNorm'd keys."""
    g = torch.Generator().manual_seed(4)
    h = F.layer_norm(torch.randn(64, d, generator=g, dtype=torch.float64), (d,))
    q = h @ W_Q.double().T @ W_K.double() / math.sqrt(d)         # effective queries
    scores = q @ h.T                                              # (64 queries, 64 keys)
    spread = float((scores.amax(1) - scores.amin(1)).max())
    return spread, float(q.norm(dim=1).min())


class _Property(tuple):
    """The reference's output, marked: the learner is judged by a property, not equality."""


def _uniform_ref(d: int) -> tuple[Tensor, Tensor]:
    return _Property((torch.outer(torch.ones(d), torch.eye(d)[0]), torch.eye(d)))


def check_uniform_query_weights(fn) -> float:
    """``uniform_query_weights(d)`` -> (W_Q, W_K), each (d, d), queries parallel to 1."""
    assert_signature(fn, ["d"])

    def compare_fn(got, expected):
        if not isinstance(expected, _Property):  # a known mistake: is it exactly this one?
            return compare(got, expected, 1e-6, 1e-5)
        if not (isinstance(got, (tuple, list)) and len(got) == 2):
            return False, math.inf, "return a pair (W_Q, W_K)"
        W_Q, W_K = got
        d = expected[0].shape[0]
        for name, W in (("W_Q", W_Q), ("W_K", W_K)):
            if not isinstance(W, Tensor) or tuple(W.shape) != (d, d):
                return False, math.inf, f"{name} must be a ({d}, {d}) tensor"
        spread, qmin = _uniform_property(d, W_Q, W_K)
        if qmin < 1e-6:
            return False, math.inf, ("some query is zero: that also gives uniform attention, "
                                     "but trivially; make every query a nonzero multiple of 1")
        ok, diff, why = compare(torch.tensor(spread), torch.tensor(0.0), 1e-6, 0.0)
        return ok, diff, f"scores differ across keys by up to {spread:.3g}"

    cases = [((3,), {}), ((8,), {}), ((21,), {})]
    mistakes = [
        ("with W_Q = W_K = I the query is the token itself, which is orthogonal to 1: "
         "scores then depend on the key. Make W_Q map every vector onto the 1 direction",
         lambda d: (torch.eye(d), torch.eye(d))),
        ("1 1^T kills every LayerNorm'd vector (they are orthogonal to 1), so the query "
         "is 0; use 1 w^T with some w that is not parallel to 1",
         lambda d: (torch.ones(d, d), torch.eye(d))),
        ("all-zero weights give uniform attention only trivially (zero queries); make the "
         "query a nonzero multiple of 1",
         lambda d: (torch.zeros(d, d), torch.eye(d))),
    ]
    return run_check("uniform_query_weights", fn, cases, _uniform_ref, mistakes,
                     compare_fn=compare_fn)
