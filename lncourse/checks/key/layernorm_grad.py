"""The key to chapter 1's checks of the derivatives (:mod:`lncourse.checks.layernorm_grad`):
references and known mistakes. Teacher-only: left out of the published package."""

from __future__ import annotations

import torch
import torch.nn.functional as F

from lncourse.layernorm import projection_matrix


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


def _jac_eps_not_in_z(x, gamma, eps):
    d, s, z, P = _jac_parts(x, eps)
    z = (x - x.mean()) / (x - x.mean()).pow(2).mean().sqrt()     # s without eps
    return gamma[:, None] * (P - torch.outer(z, z) / d) / s


def _jac_eps_only_in_z(x, gamma, eps):
    d, s, z, P = _jac_parts(x, eps)
    return gamma[:, None] * (P - torch.outer(z, z) / d) / (x - x.mean()).pow(2).mean().sqrt()


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
    ("epsilon is missing from z: z = (x - mean) / s with the same s = sqrt(var + eps) "
     "as in the factor 1 / s", _jac_eps_not_in_z),
    ("epsilon is missing from the factor 1 / s: s = sqrt(var + eps) there as in z",
     _jac_eps_only_in_z),
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
    ("grad_gamma is summed over the first axis only: gamma is shared by every row, so sum "
     "grad_out * z over every axis but the last (for x of shape (3, 5, 16), axes 0 and "
     "1: .sum(dim=tuple(range(x.dim() - 1))))",
     lambda x, g, e, go: (lambda gx, gg, gb: (gx, (go * _bw_parts(x, g, e, go)[0]).sum(0),
                                              gb))(*_bw(x, g, e, go))),
    ("grad_gamma and grad_beta are summed over the first axis only: gamma and beta are "
     "shared by every row, so sum over every axis but the last (for x of shape "
     "(3, 5, 16), axes 0 and 1: .sum(dim=tuple(range(x.dim() - 1))))",
     lambda x, g, e, go: (lambda gx, gg, gb: (gx, (go * _bw_parts(x, g, e, go)[0]).sum(0),
                                              go.sum(0)))(*_bw(x, g, e, go))),
    ("grad_beta is a mean over the batch: beta is added to every row, so its gradient "
     "is the sum of grad_out over every axis but the last",
     lambda x, g, e, go: _bw(x, g, e, go, beta_mean=True)),
]


# The known mistakes of every exercise this module checks, by the exercise's function
# name (tests/checks/test_exercises.py writes an answer for each).
MISTAKES = {
    "layer_norm_jacobian": _JAC_MISTAKES,
    "layer_norm_backward": _BW_MISTAKES,
}

REFERENCES = {
    "layer_norm_jacobian": _jacobian,
    "layer_norm_backward": _backward,
}
