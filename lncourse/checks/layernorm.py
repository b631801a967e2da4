"""Checks for the exercises of chapter 1 (LayerNorm as projection and scaling)."""

from __future__ import annotations

import math
from collections.abc import Callable

import torch
import torch.nn.functional as F
from torch import Tensor

from lncourse.layernorm import projection_matrix
from lncourse.checks._core import case, generator, run_check

__all__ = ["check_layer_norm_fgh", "check_centering_matrix", "check_layer_norm_on_plane",
           "check_fold_into_linear", "check_rms_norm_gain", "check_layer_norm_jacobian",
           "check_layer_norm_backward"]

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
_NO_AUTOGRAD = "this exercise asks for the closed form, without autograd"
NO_AUTOGRAD = {path: _NO_AUTOGRAD for path in (
    "torch.autograd.grad", "torch.autograd.backward", "torch.Tensor.backward",
    "torch.autograd.functional.jacobian", "torch.autograd.functional.vjp",
    "torch.autograd.functional.jvp", "torch.autograd.functional.hessian",
    "torch.func.jacrev", "torch.func.jacfwd", "torch.func.vjp", "torch.func.jvp",
    "torch.func.grad", "torch.func.linearize", "torch.func.hessian", "torch.func.grad_and_value",
    "torch._functorch.eager_transforms.linearize", "torch._functorch.eager_transforms.jvp",
    "torch._functorch.eager_transforms.vjp", "torch._functorch.eager_transforms.jacrev",
    "torch._functorch.eager_transforms.jacfwd", "torch._functorch.eager_transforms.grad",
    "torch._functorch.eager_transforms.hessian", "torch.autograd.forward_ad.make_dual",
    "torch.autograd.forward_ad.dual_level", "torch.autograd.functional.vhp",
    "torch.autograd.functional.hvp", "torch.autograd.functional.jacobian",
    "torch.Tensor.requires_grad_",
    # the forward-mode machinery under jvp, linearize and make_dual
    "aten._new_zeros_with_same_feature_meta", "aten._make_dual")}


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
    sizes = (3, 5, 16, 2) + ((4, 7, 64, 100) if hidden else ())
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
              mistakes=_FOLD_MISTAKES)


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


# ------------------------------------------------------------------------- Jacobian
def _jacobian(x, gamma, eps):
    return torch.autograd.functional.jacobian(
        lambda z: F.layer_norm(z, z.shape[-1:], gamma, None, eps), x)


def _jac_parts(x, eps):
    d = x.shape[-1]
    centred = x - x.mean()
    s = torch.sqrt((centred * centred).mean() + eps)
    return d, s, centred / s, projection_matrix(d, dtype=x.dtype)


def _jac_no_eps(x, gamma, eps):
    d, s, z, P = _jac_parts(x, 0.0)
    return gamma[:, None] * (P - torch.outer(z, z) / d) / s


def _jac_gamma_columns(x, gamma, eps):
    d, s, z, P = _jac_parts(x, eps)
    return (P - torch.outer(z, z) / d) / s * gamma


def _jac_no_gamma(x, gamma, eps):
    d, s, z, P = _jac_parts(x, eps)
    return (P - torch.outer(z, z) / d) / s


def _jac_no_s(x, gamma, eps):
    d, s, z, P = _jac_parts(x, eps)
    return gamma[:, None] * (P - torch.outer(z, z) / d)


def _jac_no_outer(x, gamma, eps):
    d, s, z, P = _jac_parts(x, eps)
    return gamma[:, None] * P / s


def _jac_no_p(x, gamma, eps):
    d, s, z, P = _jac_parts(x, eps)
    return gamma[:, None] * (torch.eye(d, dtype=x.dtype) - torch.outer(z, z) / d) / s


def _jac_outer_not_divided(x, gamma, eps):
    d, s, z, P = _jac_parts(x, eps)
    return gamma[:, None] * (P - torch.outer(z, z)) / s


_JAC_MISTAKES = [
    ("epsilon is missing: with eps the scale is s = sqrt(var + eps), in 1 / s and in "
     "z = (x - mean) / s alike", _jac_no_eps),
    ("gamma multiplies the columns: LN(x) = gamma * (...) scales the outputs, so gamma "
     "multiplies the rows of J (gamma[:, None] * M)", _jac_gamma_columns),
    ("gamma is missing: LN(x) = gamma * (x - mean) / s + beta, so J = diag(gamma) (...)",
     _jac_no_gamma),
    ("the factor 1 / s is missing, with s = sqrt(var + eps)", _jac_no_s),
    ("the z z^T / d term is missing: s depends on x too, and its derivative adds "
     "- z z^T / (d s)", _jac_no_outer),
    ("P is missing: the derivative of the centring is P = I - 1 1^T / d", _jac_no_p),
    ("the z z^T term is not divided by d: the derivative of s is (x - mean) / (d s)",
     _jac_outer_not_divided),
]


def check_layer_norm_jacobian(fn: Callable[[Tensor, Tensor, float], Tensor], *,
                              hidden: bool = False) -> None:
    """Closed-form Jacobian of LayerNorm with gain gamma and eps at one vector, vs autograd."""
    g = generator(4)
    specs = [(3, 1.0, 0.0, 1e-5), (5, 2.0, 1.0, 0.1), (8, 0.5, -3.0, 1.0), (16, 1.0, 0.0, 1e-5)]
    if hidden:
        specs += [(2, 1.0, 0.0, 1e-5), (32, 1.0, 5.0, 0.01), (6, 0.01, 0.0, 1e-3)]
    cases = [case(torch.randn(d, generator=g, dtype=torch.float64) * spread + offset,
                  torch.randn(d, generator=g, dtype=torch.float64) + 1, eps)
             for d, spread, offset, eps in specs]
    if hidden:  # a constant vector: only eps keeps LayerNorm defined
        cases.append(case(torch.full((4,), 2.0, dtype=torch.float64),
                          torch.randn(4, generator=g, dtype=torch.float64), 0.5))
    run_check(fn, "layer_norm_jacobian", ["x", "gamma", "eps"], cases, reference=_jacobian,
              mistakes=_JAC_MISTAKES, forbidden=NO_AUTOGRAD)


# ------------------------------------------------------------------ the backward pass
def _backward(x, gamma, eps, grad_out):
    """The reference: autograd through F.layer_norm, in the inputs' precision."""
    x = x.detach().clone().requires_grad_(True)
    gamma = gamma.detach().clone().requires_grad_(True)
    beta = torch.zeros_like(gamma, requires_grad=True)
    with torch.enable_grad():
        y = F.layer_norm(x, x.shape[-1:], gamma, beta, eps)
        gx, gg, gb = torch.autograd.grad(y, (x, gamma, beta), grad_out)
    return gx, gg, gb


def _bw_parts(x, gamma, eps, grad_out, unbiased=False):
    centred = x - x.mean(-1, keepdim=True)
    var = x.var(-1, keepdim=True, unbiased=unbiased)
    s = torch.sqrt(var + eps)
    z = centred / s
    batch = tuple(range(x.dim() - 1))
    return z, s, grad_out * gamma, batch


def _bw(x, gamma, eps, grad_out, *, mean_term=True, z_term=True, use_gamma=True,
        unbiased=False, beta_mean=False, gamma_unsummed=False):
    z, s, gh, batch = _bw_parts(x, gamma, eps, grad_out, unbiased)
    if not use_gamma:
        gh = grad_out
    gx = gh
    if mean_term:
        gx = gx - gh.mean(-1, keepdim=True)
    if z_term:
        gx = gx - z * (gh * z).mean(-1, keepdim=True)
    gx = gx / s
    gg = grad_out * z if gamma_unsummed else (grad_out * z).sum(batch)
    gb = grad_out.mean(batch) if beta_mean else grad_out.sum(batch)
    return gx, gg, gb


_BW_MISTAKES = [
    ("grad_x lacks the mean term: the centring's derivative P removes the mean of "
     "grad_out * gamma from each row", lambda x, g, e, go: _bw(x, g, e, go, mean_term=False)),
    ("grad_x lacks the z term: s depends on x too, which subtracts "
     "z * mean(grad_out * gamma * z) from each row",
     lambda x, g, e, go: _bw(x, g, e, go, z_term=False)),
    ("gamma is missing from grad_x: the gradient reaching z is grad_out * gamma",
     lambda x, g, e, go: _bw(x, g, e, go, use_gamma=False)),
    ("you used the unbiased variance (dividing by d - 1); LayerNorm divides by d",
     lambda x, g, e, go: _bw(x, g, e, go, unbiased=True)),
    ("epsilon is missing: the scale is s = sqrt(var + eps), in 1 / s and in z alike",
     lambda x, g, e, go: _bw(x, g, 0.0, go)),
    ("grad_gamma is not summed over the batch: gamma is shared by every row, so its "
     "gradient is the sum of grad_out * z over every axis but the last",
     lambda x, g, e, go: _bw(x, g, e, go, gamma_unsummed=True)),
    ("grad_beta is a mean over the batch: beta is added to every row, so its gradient "
     "is the sum of grad_out over every axis but the last",
     lambda x, g, e, go: _bw(x, g, e, go, beta_mean=True)),
]


def check_layer_norm_backward(fn: Callable[[Tensor, Tensor, float, Tensor],
                                           tuple[Tensor, Tensor, Tensor]], *,
                              hidden: bool = False) -> None:
    """LayerNorm's backward pass (grad_x, grad_gamma, grad_beta) from grad_out, without
    autograd, against autograd through F.layer_norm."""
    g = generator(5)
    specs = [((4, 8), 1.0, 0.0, 1e-5), ((3, 5, 16), 2.0, 1.0, 0.1), ((6, 3), 0.5, -3.0, 1.0),
             ((2, 32), 1.0, 0.0, 1e-5)]
    if hidden:
        specs += [((1, 2), 1.0, 0.0, 1e-5), ((2, 2, 2, 24), 1.0, 50.0, 1e-3),
                  ((5, 7), 0.01, 0.0, 1e-2), ((64, 384), 3.0, 0.5, 1e-12)]
    cases = []
    for shape, spread, offset, eps in specs:
        x = torch.randn(shape, generator=g, dtype=torch.float64) * spread + offset
        gamma = torch.randn(shape[-1], generator=g, dtype=torch.float64) + 1
        grad_out = torch.randn(shape, generator=g, dtype=torch.float64)
        cases.append(case(x, gamma, eps, grad_out))
    if hidden:   # float32 inputs, as a model has them; constant rows, kept defined by eps
        cases.append(case(torch.randn(8, 12, generator=g) * 4 + 2,
                          torch.randn(12, generator=g) + 1, 1e-5, torch.randn(8, 12, generator=g)))
        cases.append(case(torch.full((3, 4), 2.0, dtype=torch.float64),
                          torch.randn(4, generator=g, dtype=torch.float64), 0.5,
                          torch.randn(3, 4, generator=g, dtype=torch.float64)))
    run_check(fn, "layer_norm_backward", ["x", "gamma", "eps", "grad_out"], cases,
              reference=_backward, mistakes=_BW_MISTAKES, forbidden=NO_AUTOGRAD)


# The known mistakes of every exercise this module checks, by the exercise's function
# name (tests/checks/test_exercises.py writes an answer for each).
MISTAKES = {
    "layer_norm_fgh": _LN_MISTAKES,
    "centering_matrix": _P_MISTAKES,
    "layer_norm_on_plane": _PLANE_MISTAKES,
    "fold_into_linear": _FOLD_MISTAKES,
    "rms_norm_gain": _RMS_MISTAKES,
    "layer_norm_jacobian": _JAC_MISTAKES,
    "layer_norm_backward": _BW_MISTAKES,
}
