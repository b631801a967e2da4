"""Checks for the exercises of chapter 1 (LayerNorm as projection and scaling); those on
LayerNorm's derivatives (the Jacobian, the backward pass) are in :mod:`.layernorm_grad`."""

from __future__ import annotations

import math
from collections.abc import Callable

import torch
import torch.nn.functional as F
from torch import Tensor

from lncourse.layernorm import projection_matrix
from lncourse.checks._core import case, drawn_ints, generator, run_check

__all__ = ["check_layer_norm_fgh", "check_centering_matrix", "check_layer_norm_on_plane",
           "check_fold_into_linear", "check_rms_norm_gain"]

_NO_LAYER_NORM = "this exercise asks you to write LayerNorm yourself, without calling one"
NO_LAYER_NORM = {path: _NO_LAYER_NORM for path in (
    "torch.nn.functional.layer_norm", "torch.layer_norm", "torch.native_layer_norm",
    "lncourse.layernorm.layer_norm", "lncourse.layernorm.FactorizedLayerNorm.forward",
    "torch.nn.functional.group_norm", "torch.group_norm", "torch.nn.LayerNorm.forward",
    "torch.nn.GroupNorm.forward",
    # the operators themselves, whatever the route (torch.ops.aten..., F.group_norm(x, 1))
    "aten.native_layer_norm", "aten.native_group_norm", "aten.layer_norm", "aten.group_norm")}
_NO_RMS_NORM = "this exercise asks you to write RMSNorm yourself, without calling one"
NO_RMS_NORM = {path: _NO_RMS_NORM for path in (
    "torch.nn.functional.rms_norm", "torch.rms_norm", "torch.nn.RMSNorm.forward",
    "aten.rms_norm", "aten._fused_rms_norm")}
_NO_PROJECTION = "this exercise asks you to build P yourself, not to call the course's helper"
NO_PROJECTION = {"lncourse.layernorm.projection_matrix": _NO_PROJECTION}

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


def _fgh_cases(hidden: bool) -> list:
    g = generator(0)
    specs = [((4, 8), 1e-5, 0.0, 1.0), ((6, 16), 0.1, 3.0, 1.0), ((2, 3, 5), 1e-5, -2.0, 4.0),
             ((5, 2), 1e-5, 0.0, 1.0), ((3, 8), 1e-3, 100.0, 0.01)]
    if hidden:
        specs += [((1, 2), 1e-5, 0.5, 1.0), ((2, 2, 3, 6), 1e-5, 0.0, 2.0),
                  ((64, 32), 1e-5, 0.0, 1.0), ((4, 8), 0.5, 10.0, 0.1),
                  ((3, 7), 1e-5, 1000.0, 1.0)]
    cases = []
    for shape, eps, offset, spread in specs:
        d = shape[-1]
        x = torch.randn(shape, generator=g) * spread + offset
        cases.append(case(x, torch.randn(d, generator=g) + 1.0, torch.randn(d, generator=g), eps))
    if hidden:
        constant = torch.full((2, 5), 3.0)                    # a constant row: LN gives beta
        cases.append(case(constant, -torch.rand(5, generator=g), torch.randn(5, generator=g), 1e-5))
        x = torch.randn(3, 4, generator=g, dtype=torch.float64)
        cases.append(case(x, torch.rand(4, generator=g, dtype=torch.float64),
                          torch.zeros(4, dtype=torch.float64), 1e-5))
    return cases


def check_layer_norm_fgh(fn: Callable[[Tensor, Tensor, Tensor, float], Tensor], *,
                         hidden: bool = False) -> None:
    """LayerNorm from f (centring), g (scaling) and h (affine), against F.layer_norm."""
    run_check(fn, "layer_norm_fgh", ["x", "gamma", "beta", "eps"], _fgh_cases(hidden),
              reference=_layer_norm, mistakes=_LN_MISTAKES, forbidden=NO_LAYER_NORM)


# -------------------------------------------------------------------- centring matrix P
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


def check_centering_matrix(fn: Callable[[int], Tensor], *, hidden: bool = False) -> None:
    """The d x d centring (projection) matrix P = I - 1 1^T / d, in float64."""
    # teacher-only sizes: two small, one large, drawn from the grader's key
    sizes = (3, 5, 16, 2) + ((*drawn_ints(10, 4, 40, 2), *drawn_ints(11, 41, 128))
                             if hidden else ())
    run_check(fn, "centering_matrix", ["d"], [case(d) for d in sizes],
              reference=lambda d: projection_matrix(d, dtype=torch.float64), forbidden=NO_PROJECTION,
              mistakes=_P_MISTAKES)


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


def _unit_orthogonal_to_ones(d: int, g: torch.Generator) -> Tensor:
    v = torch.randn(d, generator=g, dtype=torch.float64)
    v = v - v.mean()
    return v / v.norm()


def check_layer_norm_on_plane(fn: Callable[[Tensor, Tensor, Tensor], Tensor], *,
                              hidden: bool = False) -> None:
    """LayerNorm of s v + t 1 for a unit v orthogonal to 1, in closed form."""
    g = generator(1)
    sizes = [(3, 5), (8, 7), (16, 4)] + ([(2, 6), (64, 3), (5, 1)] if hidden else [])
    cases = []
    for d, n in sizes:
        s = torch.randn(n, generator=g, dtype=torch.float64) * 3
        s[0] = abs(s[0]) + 0.5
        if n > 1:
            s[1] = -abs(s[1]) - 0.5  # both signs present
        t = torch.randn(n, generator=g, dtype=torch.float64) * 5
        cases.append(case(s, t, _unit_orthogonal_to_ones(d, g)))
    if hidden:  # tiny s against a large t
        cases.append(case(torch.tensor([1e-3, -1e-3], dtype=torch.float64),
                          torch.tensor([50.0, -50.0], dtype=torch.float64),
                          _unit_orthogonal_to_ones(4, g)))
    run_check(fn, "layer_norm_on_plane", ["s", "t", "v"], cases, reference=_plane,
              mistakes=_PLANE_MISTAKES, forbidden=NO_LAYER_NORM)


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


def check_fold_into_linear(fn: Callable[[Tensor, Tensor, Tensor, Tensor],
                                        tuple[Tensor, Tensor]], *, hidden: bool = False) -> None:
    """Folded weight and bias of LayerNorm followed by y = W z + b."""
    g = generator(2)
    sizes = [(3, 4), (5, 6), (16, 16)] + ([(1, 2), (32, 64), (7, 3)] if hidden else [])
    cases = []
    for d_out, d in sizes:
        W = torch.randn(d_out, d, generator=g, dtype=torch.float64)
        b = torch.randn(d_out, generator=g, dtype=torch.float64)
        gamma = torch.randn(d, generator=g, dtype=torch.float64) + 1
        beta = torch.randn(d, generator=g, dtype=torch.float64)
        cases.append(case(W, b, gamma, beta))
    run_check(fn, "fold_into_linear", ["W", "b", "gamma", "beta"], cases, reference=_fold,
              mistakes=_FOLD_MISTAKES, outputs=("the folded W", "the folded b"))


# ------------------------------------------------------------------------------ RMSNorm
def _rms_norm(x, gain, eps):
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


def check_rms_norm_gain(fn: Callable[[Tensor, Tensor, float], Tensor], *,
                        hidden: bool = False) -> None:
    """RMSNorm: x / sqrt(mean(x^2) + eps) * gain."""
    g = generator(3)
    specs = [((4, 8), 1e-6, 0.0), ((3, 16), 1e-6, 2.0), ((2, 5, 4), 0.1, -1.0), ((6, 2), 1e-6, 0.5)]
    if hidden:
        specs += [((1, 2), 1e-6, 0.0), ((2, 2, 2, 9), 1e-6, 0.0), ((3, 8), 1e-6, 500.0)]
    cases = [case(torch.randn(shape, generator=g) + offset,
                  torch.randn(shape[-1], generator=g) + 1, eps) for shape, eps, offset in specs]
    if hidden:
        cases.append(case(torch.zeros(2, 3), torch.ones(3), 1e-6))           # zero rows
        cases.append(case(torch.randn(2, 6, generator=g, dtype=torch.float64),
                          torch.ones(6, dtype=torch.float64), 1e-6))
    run_check(fn, "rms_norm_gain", ["x", "gain", "eps"], cases, reference=_rms_norm,
              mistakes=_RMS_MISTAKES, forbidden=NO_RMS_NORM)


# The known mistakes of every exercise this module checks, by the exercise's function
# name (tests/checks/test_exercises.py writes an answer for each).
MISTAKES = {
    "layer_norm_fgh": _LN_MISTAKES,
    "centering_matrix": _P_MISTAKES,
    "layer_norm_on_plane": _PLANE_MISTAKES,
    "fold_into_linear": _FOLD_MISTAKES,
    "rms_norm_gain": _RMS_MISTAKES,
}
