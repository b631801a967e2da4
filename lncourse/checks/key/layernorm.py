"""The key to chapter 1's checks of the maps (:mod:`lncourse.checks.layernorm`):
references and known mistakes. Teacher-only: left out of the published package."""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F

from lncourse.layernorm import projection_matrix


# ----------------------------------------------------------------- LayerNorm from f, g, h
def _layer_norm(x, gamma, beta, eps):
    return F.layer_norm(x, x.shape[-1:], gamma, beta, eps)


def _ln_parts(x, eps, unbiased=False, eps_outside=False, centre=True, dim=-1):
    mu = x.mean(dim=dim, keepdim=True)
    var = x.var(dim=dim, keepdim=True, unbiased=unbiased)
    num = x - mu if centre else x
    return num / (var.sqrt() + eps) if eps_outside else num / torch.sqrt(var + eps)

_LN_MISTAKES = [
    ("you used the unbiased variance (dividing by d - 1); LayerNorm divides by d",
     lambda x, g, b, eps: _ln_parts(x, eps, unbiased=True) * g + b),
    ("epsilon is added outside the square root: LayerNorm divides by sqrt(var + eps), "
     "not by std + eps",
     lambda x, g, b, eps: _ln_parts(x, eps, eps_outside=True) * g + b),
    ("there is no centring: subtract the mean of x (the projection f) before dividing",
     lambda x, g, b, eps: _ln_parts(x, eps, centre=False) * g + b),
    ("there is no centring: subtract the mean of x (the projection f) before dividing",
     lambda x, g, b, eps: x / torch.sqrt((x * x).mean(-1, keepdim=True) + eps) * g + b),
    ("you normalised over the wrong axis: LayerNorm normalises each vector over its "
     "last axis (dim=-1), not over the batch",
     lambda x, g, b, eps: _ln_parts(x, eps, dim=0) * g + b),
    ("gamma and beta are swapped: the affine map is gamma * y + beta",
     lambda x, g, b, eps: _ln_parts(x, eps) * b + g),
    ("epsilon is ignored: add eps to the variance inside the square root",
     lambda x, g, b, eps: _ln_parts(x, 0.0) * g + b),
]


# -------------------------------------------------------------------- centring matrix P
# the reference: P = I - 1 1^T / d (the course's projection_matrix), in float64
def _ones(d):
    return torch.ones(d, d, dtype=torch.float64)

_P_MISTAKES = [
    ("you wrote I - 1 1^T: divide the all-ones matrix by d",
     lambda d: torch.eye(d, dtype=torch.float64) - _ones(d)),
    ("you built 1 1^T / d, the projection onto the all-ones direction; centring keeps "
     "the complement, I - 1 1^T / d",
     lambda d: _ones(d) / d),
    ("you divided by d - 1; the mean divides by d",
     lambda d: torch.eye(d, dtype=torch.float64) - _ones(d) / (d - 1)),
    ("only the diagonal is changed; every entry of 1 1^T / d is subtracted, off the "
     "diagonal too",
     lambda d: torch.eye(d, dtype=torch.float64) * (1 - 1 / d)),
]


# -------------------------------------------------------------------- the two points
def _plane(s, t, v):
    return math.sqrt(v.shape[-1]) * torch.sign(s)[:, None] * v

_PLANE_MISTAKES = [
    ("the sign of s is lost: points with s < 0 go to -sqrt(d) v",
     lambda s, t, v: math.sqrt(v.shape[-1]) * v.expand(len(s), -1)),
    ("the radius is missing: LayerNorm's output has norm sqrt(d), so the points are "
     "±sqrt(d) v, not ±v",
     lambda s, t, v: torch.sign(s)[:, None] * v),
    ("the t 1 component survives: the projection removes everything along 1",
     lambda s, t, v: math.sqrt(v.shape[-1]) * torch.sign(s)[:, None] * v + t[:, None]),
    ("the size of s survives: scaling divides by the norm, leaving only the sign",
     lambda s, t, v: math.sqrt(v.shape[-1]) * s[:, None] * v),
]


# ------------------------------------------------------------------------------ folding
def _fold(W, b, gamma, beta):
    P = projection_matrix(W.shape[1], dtype=W.dtype)
    return (W * gamma) @ P, W @ beta + b

_FOLD_MISTAKES = [
    ("the centring is missing: W' = W diag(gamma) P, with P = I - 1 1^T / d",
     lambda W, b, g, be: (W * g, W @ be + b)),
    ("P and diag(gamma) are in the wrong order: LayerNorm centres first and multiplies "
     "by gamma after, so W' = W diag(gamma) P",
     lambda W, b, g, be: (W @ projection_matrix(W.shape[1], dtype=W.dtype) * g, W @ be + b)),
    ("the bias forgets beta: b' = W beta + b",
     lambda W, b, g, be: (_fold(W, b, g, be)[0], b)),
    ("gamma is missing from the weights: W' = W diag(gamma) P",
     lambda W, b, g, be: (W @ projection_matrix(W.shape[1], dtype=W.dtype), W @ be + b)),
    ("the bias multiplies beta by gamma; beta is added after gamma, so b' = W beta + b",
     lambda W, b, g, be: (_fold(W, b, g, be)[0], W @ (g * be) + b)),
]


# ------------------------------------------------------------------------------ RMSNorm
def _rms_norm(x, gain, eps):
    """x / sqrt(mean(x^2) + eps) * gain over the last axis."""
    return x / torch.sqrt((x * x).mean(-1, keepdim=True) + eps) * gain

_RMS_MISTAKES = [
    ("you subtracted the mean: that is LayerNorm; RMSNorm skips the projection",
     lambda x, g, eps: _ln_parts(x, eps) * g),
    ("epsilon is added outside the square root: divide by sqrt(mean(x^2) + eps)",
     lambda x, g, eps: x / ((x * x).mean(-1, keepdim=True).sqrt() + eps) * g),
    ("you divided by the Euclidean norm ||x||: the root mean square is ||x|| / sqrt(d), "
     "so the output should have norm sqrt(d)",
     lambda x, g, eps: x / torch.sqrt((x * x).sum(-1, keepdim=True) + eps) * g),
    ("you divided by the standard deviation: RMSNorm uses the root mean square of x "
     "itself, without centring it",
     lambda x, g, eps: x / torch.sqrt(x.var(-1, keepdim=True, unbiased=False) + eps) * g),
    ("the gain is missing: multiply by gain at the end",
     lambda x, g, eps: x / torch.sqrt((x * x).mean(-1, keepdim=True) + eps)),
]


# The known mistakes of every exercise this module checks, by the exercise's function
# name (tests/checks/test_exercises.py writes an answer for each).
MISTAKES = {
    "layer_norm_fgh": _LN_MISTAKES,
    "centering_matrix": _P_MISTAKES,
    "layer_norm_on_plane": _PLANE_MISTAKES,
    "fold_into_linear": _FOLD_MISTAKES,
    "rms_norm_gain": _RMS_MISTAKES,
}

REFERENCES = {
    "layer_norm_fgh": _layer_norm,
    "centering_matrix": lambda d: projection_matrix(d, dtype=torch.float64),
    "layer_norm_on_plane": _plane,
    "fold_into_linear": _fold,
    "rms_norm_gain": _rms_norm,
}
