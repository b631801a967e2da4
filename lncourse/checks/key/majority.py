"""The key to chapter 3's checks (:mod:`lncourse.checks.majority`): references and known
mistakes. Teacher-only: left out of the published package."""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import Tensor


# ------------------------------------------------------------- the margin rule
def _clear_majority(counts: Tensor, min_margin: int) -> Tensor:
    top2 = counts.topk(2, dim=1).values
    return (top2[:, 0] - top2[:, 1] >= min_margin) & (top2[:, 1] > 0)

_MARGIN_MISTAKES = [
    ("a margin of exactly min_margin counts as clear: use >=, not >",
     lambda c, m: (lambda t: (t[:, 0] - t[:, 1] > m) & (t[:, 1] > 0))(c.topk(2, 1).values)),
    ("a sequence made of a single class has no second class: the released code drops "
     "it (len(part) == 1), so require the second count to be positive",
     lambda c, m: (lambda t: t[:, 0] - t[:, 1] >= m)(c.topk(2, 1).values)),
    ("compare the two largest counts, not the first two entries of the row",
     lambda c, m: (c[:, 0] - c[:, 1] >= m) & (c[:, 1] > 0)),
    ("compare the largest with the second largest count, not with the smallest",
     lambda c, m: (c.max(1).values - c.min(1).values >= m) & (c.topk(2, 1).values[:, 1] > 0)),
]


# ------------------------------------------------- LayerNorm without projection
def _no_projection(x: Tensor) -> Tensor:
    return math.sqrt(x.shape[-1]) * x / x.norm(dim=-1, keepdim=True)

_NO_PROJECTION_MISTAKES = [
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


# ----------------------------------------------------------------- the query angle
def _angle(queries: Tensor) -> Tensor:
    """acos(|q . 1| / (||q|| sqrt d)) in degrees, computed as atan2(across, along),
    which keeps its precision near 0 degrees. The usual answer through acos does not:
    acos(1 - delta) = sqrt(2 delta), so a cosine rounded by a few u is off by sqrt(8 u)
    radians there, the slack the check (``_angle_slack``) allows."""
    along = queries.sum(-1).abs() / math.sqrt(queries.shape[-1])
    across = (queries - queries.mean(-1, keepdim=True)).norm(dim=-1)
    return torch.rad2deg(torch.atan2(across, along))

_ANGLE_MISTAKES = [
    ("fold the angle into [0, 90]: a query pointing along -1 also gives every key the "
     "same score, so it counts as aligned (use |cos| or 90 - |angle - 90|)",
     lambda q: torch.rad2deg(torch.acos(
         F.cosine_similarity(q, torch.ones_like(q), dim=-1).clamp(-1, 1)))),
    ("the angle should be in degrees, not radians (torch.rad2deg)",
     lambda q: torch.acos(F.cosine_similarity(q, torch.ones_like(q), dim=-1)
                          .abs().clamp(max=1.0))),
    ("the cosine divides by both norms: ||1|| = sqrt(d), not 1",
     lambda q: torch.rad2deg(torch.acos((q.sum(-1).abs() / q.norm(dim=-1)).clamp(max=1.0)))),
    ("that is the angle to the first axis, not to the all-ones vector",
     lambda q: torch.rad2deg(torch.acos((q[..., 0].abs() / q.norm(dim=-1)).clamp(max=1.0)))),
]


# ------------------------------------------------------------ multiset attention
def _attend_counts(scores: Tensor, counts: Tensor, values: Tensor) -> Tensor:
    logits = scores.unsqueeze(0) + torch.log(counts.to(scores.dtype)).unsqueeze(1)
    return torch.softmax(logits, dim=-1) @ values

_ATTEND_MISTAKES = [
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

# uniform_query_weights has no reference: the check judges the property. With
# M = W_Q^T W_K and P the projection onto the hyperplane H of LayerNorm'd vectors
# (queries are h M, rows), h M is parallel to 1 for every h in H exactly when P M P = 0,
# and it is nonzero for almost every h in H exactly when P M is not zero (the h with
# h M = 0 then form a subspace of H). W_Q = 1 w^T, W_K = I, with w not parallel to 1,
# passes.
_UNIFORM_MISTAKES = [
    ("with W_Q = W_K = I the query is the token itself, which is orthogonal to 1: "
     "scores then depend on the key. Make W_Q map every vector onto the 1 direction",
     lambda d: (torch.eye(d), torch.eye(d))),
    ("1 1^T kills every LayerNorm'd vector (they are orthogonal to 1), so the query "
     "is 0; use 1 w^T with some w that is not parallel to 1",
     lambda d: (torch.ones(d, d), torch.eye(d))),
    ("all-zero weights give uniform attention only trivially (zero queries); make the "
     "query a nonzero multiple of 1 for almost every token",
     lambda d: (torch.zeros(d, d), torch.eye(d))),
    ("W_Q = w 1^T is the transpose: it sends every LayerNorm'd token to 0, since "
     "1 . h = 0; the query should be 1 (w . h), so W_Q = 1 w^T",
     lambda d: (torch.outer(torch.eye(d)[0], torch.ones(d)), torch.eye(d))),
]


# The known mistakes of every exercise this module checks, by the exercise's function
# name (tests/checks/test_exercises.py writes an answer for each).
MISTAKES = {
    "has_clear_majority": _MARGIN_MISTAKES,
    "uniform_query_weights": _UNIFORM_MISTAKES,
    "attend_counts": _ATTEND_MISTAKES,
    "norm_without_projection": _NO_PROJECTION_MISTAKES,
    "query_angle": _ANGLE_MISTAKES,
}

REFERENCES = {
    "has_clear_majority": _clear_majority,
    "norm_without_projection": _no_projection,
    "query_angle": _angle,
    "attend_counts": _attend_counts,
}
