"""Checks for the exercises of chapter 1 (LayerNorm as projection and scaling)."""

from __future__ import annotations

import math
from collections.abc import Callable

import torch
import torch.nn.functional as F
from torch import Tensor

from ..layernorm import projection_matrix
from ._core import assert_signature, run_check

__all__ = ["check_layer_norm_fgh", "check_centering_matrix", "check_layer_norm_on_plane",
           "check_fold_into_linear", "check_rms_norm", "check_layer_norm_jacobian"]


def _gen(seed: int) -> torch.Generator:
    return torch.Generator().manual_seed(seed)


# ----------------------------------------------------------------- LayerNorm from f, g, h
def _ln_ref(x, gamma, beta, eps):
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


def check_layer_norm_fgh(fn: Callable[[Tensor, Tensor, Tensor, float], Tensor]) -> None:
    """LayerNorm from f (centring), g (scaling) and h (affine) against F.layer_norm."""
    assert_signature(fn, ["x", "gamma", "beta", "eps"])
    g = _gen(0)
    cases = []
    for shape, eps, offset, spread in [((4, 8), 1e-5, 0.0, 1.0), ((6, 16), 0.1, 3.0, 1.0),
                                       ((2, 3, 5), 1e-5, -2.0, 4.0), ((5, 2), 1e-5, 0.0, 1.0),
                                       ((3, 8), 1e-3, 100.0, 0.01)]:
        d = shape[-1]
        x = torch.randn(shape, generator=g) * spread + offset
        gamma = torch.randn(d, generator=g) + 1.0
        beta = torch.randn(d, generator=g)
        cases.append(((x, gamma, beta, eps), {}))
    return run_check("layer_norm_fgh", fn, cases, _ln_ref, _LN_MISTAKES, atol=1e-4, rtol=1e-4)


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


def check_centering_matrix(fn: Callable[[int], Tensor]) -> None:
    """The d x d centring (projection) matrix P = I - 1 1^T / d."""
    assert_signature(fn, ["d"])
    cases = [((d,), {}) for d in (3, 5, 16, 2)]
    return run_check("centering_matrix", fn, cases,
                     lambda d: projection_matrix(d, dtype=torch.float64), _P_MISTAKES,
                     atol=1e-6, rtol=1e-6)


# -------------------------------------------------------------------- the two points
def _plane_ref(s, t, v):
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


def check_layer_norm_on_plane(fn: Callable[[Tensor, Tensor, Tensor], Tensor]) -> None:
    """LayerNorm of s v + t 1 for a unit v orthogonal to 1, in closed form."""
    assert_signature(fn, ["s", "t", "v"])
    g = _gen(1)
    cases = []
    for d, n in [(3, 5), (8, 7), (16, 4)]:
        s = torch.randn(n, generator=g, dtype=torch.float64) * 3
        s[0], s[1] = abs(s[0]) + 0.5, -abs(s[1]) - 0.5  # both signs present
        t = torch.randn(n, generator=g, dtype=torch.float64) * 5
        cases.append(((s, t, _unit_orthogonal_to_ones(d, g)), {}))
    return run_check("layer_norm_on_plane", fn, cases, _plane_ref, _PLANE_MISTAKES,
                     atol=1e-6, rtol=1e-6)


# ------------------------------------------------------------------------------ folding
def _fold_ref(W, b, gamma, beta):
    P = projection_matrix(W.shape[1], dtype=W.dtype)
    return (W * gamma) @ P, W @ beta + b


_FOLD_MISTAKES = [
    ("the centring is missing: W' = W diag(gamma) P, with P = I - 1 1^T / d",
     lambda W, b, g, be: (W * g, W @ be + b)),
    ("P and diag(gamma) are in the wrong order: LayerNorm centres first and multiplies "
     "by gamma after, so W' = W diag(gamma) P",
     lambda W, b, g, be: (W @ projection_matrix(W.shape[1], dtype=W.dtype) * g, W @ be + b)),
    ("the bias forgets beta: b' = W beta + b",
     lambda W, b, g, be: _fold_ref(W, b, g, be)[0:1] + (b,)),
    ("gamma is missing from the weights: W' = W diag(gamma) P",
     lambda W, b, g, be: (W @ projection_matrix(W.shape[1], dtype=W.dtype), W @ be + b)),
    ("the bias multiplies beta by gamma; beta is added after gamma, so b' = W beta + b",
     lambda W, b, g, be: (_fold_ref(W, b, g, be)[0], W @ (g * be) + b)),
]


def check_fold_into_linear(fn: Callable[[Tensor, Tensor, Tensor, Tensor],
                                        tuple[Tensor, Tensor]]) -> None:
    """Folded weight and bias of LayerNorm followed by y = W z + b."""
    assert_signature(fn, ["W", "b", "gamma", "beta"])
    g = _gen(2)
    cases = []
    for d_out, d in [(3, 4), (5, 8), (16, 16)]:
        W = torch.randn(d_out, d, generator=g, dtype=torch.float64)
        b = torch.randn(d_out, generator=g, dtype=torch.float64)
        gamma = torch.randn(d, generator=g, dtype=torch.float64) + 1
        beta = torch.randn(d, generator=g, dtype=torch.float64)
        cases.append(((W, b, gamma, beta), {}))
    return run_check("fold_into_linear", fn, cases, _fold_ref, _FOLD_MISTAKES,
                     atol=1e-8, rtol=1e-8)


# ------------------------------------------------------------------------------ RMSNorm
def _rms_ref(x, gain, eps):
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


def check_rms_norm(fn: Callable[[Tensor, Tensor, float], Tensor]) -> None:
    """RMSNorm: x / sqrt(mean(x^2) + eps) * gain."""
    assert_signature(fn, ["x", "gain", "eps"])
    g = _gen(3)
    cases = []
    for shape, eps, offset in [((4, 8), 1e-6, 0.0), ((3, 16), 1e-6, 2.0),
                               ((2, 5, 4), 0.1, -1.0), ((6, 2), 1e-6, 0.5)]:
        x = torch.randn(shape, generator=g) + offset
        gain = torch.randn(shape[-1], generator=g) + 1
        cases.append(((x, gain, eps), {}))
    return run_check("rms_norm", fn, cases, _rms_ref, _RMS_MISTAKES, atol=1e-5, rtol=1e-4)


# ------------------------------------------------------------------------- Jacobian
def _jac_ref(x):
    return torch.autograd.functional.jacobian(
        lambda z: F.layer_norm(z, z.shape[-1:], eps=0.0), x)


def _jac_parts(x):
    d = x.shape[-1]
    sigma = x.var(unbiased=False).sqrt()
    y = (x - x.mean()) / sigma
    return d, sigma, y, projection_matrix(d, dtype=x.dtype)


def _jac_no_sigma(x):
    d, sigma, y, P = _jac_parts(x)
    return P - torch.outer(y, y) / d


def _jac_no_outer(x):
    d, sigma, y, P = _jac_parts(x)
    return P / sigma


def _jac_no_p(x):
    d, sigma, y, P = _jac_parts(x)
    return (torch.eye(d, dtype=x.dtype) - torch.outer(y, y) / d) / sigma


def _jac_outer_not_normalised(x):
    d, sigma, y, P = _jac_parts(x)
    return (P - torch.outer(y, y)) / sigma


_JAC_MISTAKES = [
    ("the factor 1 / sigma is missing: J = (P - y y^T / d) / sigma",
     _jac_no_sigma),
    ("the y y^T / d term is missing: scaling also removes the input's own direction, "
     "so J = (P - y y^T / d) / sigma",
     _jac_no_outer),
    ("P is missing: the derivative of the centring is P = I - 1 1^T / d, so "
     "J = (P - y y^T / d) / sigma",
     _jac_no_p),
    ("the y y^T term is not divided by d: ||y||^2 = d, so the projection onto y is "
     "y y^T / d",
     _jac_outer_not_normalised),
]


def check_layer_norm_jacobian(fn: Callable[[Tensor], Tensor]) -> None:
    """Closed-form Jacobian of LayerNorm (no affine, eps = 0) at one vector, vs autograd."""
    assert_signature(fn, ["x"])
    g = _gen(4)
    cases = [((torch.randn(d, generator=g, dtype=torch.float64) * s + o,), {})
             for d, s, o in [(3, 1.0, 0.0), (5, 2.0, 1.0), (8, 0.5, -3.0), (16, 1.0, 0.0)]]
    return run_check("layer_norm_jacobian", fn, cases, _jac_ref, _JAC_MISTAKES,
                     atol=1e-8, rtol=1e-7)
