"""LayerNorm as geometry: a projection, a scaling and an affine map (chapter 1).

For x in R^d (the last axis of a tensor):

* ``project``: f(x) = x - mean(x) 1 = P x with P = I - 1 1^T / d, the orthogonal
  projection onto the hyperplane orthogonal to the all-ones vector 1;
* ``scale``: g(x) = sqrt(d) x / ||x||, onto the sphere of radius sqrt(d);
* the affine map h(x) = gamma * x + beta, which turns that sphere into an ellipsoid.

``layer_norm(x) = g(f(x))`` (no affine), ``rms_norm(x) = g(x)`` (no projection).
Shapes: every function maps ``(..., d) -> (..., d)``.
"""

from __future__ import annotations

import math

import torch
from torch import Tensor, nn

__all__ = [
    "project", "scale", "projection_matrix", "layer_norm", "rms_norm",
    "FactorizedLayerNorm", "validate_vectors",
]


def validate_vectors(x: Tensor, name: str = "x") -> None:
    """Raise a clear error unless ``x`` is a finite floating tensor with last axis >= 2."""
    if not isinstance(x, Tensor):
        raise TypeError(f"{name} must be a torch.Tensor, got {type(x).__name__}; "
                        f"convert with torch.as_tensor({name}, dtype=torch.float32)")
    if not x.is_floating_point():
        raise TypeError(f"{name} has dtype {x.dtype}; LayerNorm needs a floating dtype "
                        f"(use {name}.float())")
    if x.dim() == 0 or x.shape[-1] < 2:
        raise ValueError(f"{name} has shape {tuple(x.shape)}; the last axis is the one "
                         "normalised and needs at least 2 entries (with d = 1, centring "
                         "leaves only zeros)")
    if not torch.isfinite(x).all():
        raise ValueError(f"{name} contains NaN or infinite values; LayerNorm of such a "
                         "vector is undefined. Find where they came from upstream.")


def _check_eps(eps: float) -> None:
    if not (eps >= 0.0 and math.isfinite(eps)):
        raise ValueError(f"eps must be a finite number >= 0, got {eps}")


def _raise_if_degenerate(x: Tensor, sq_norm: Tensor, what: str) -> None:
    # A row is degenerate when its norm is at the level of floating-point round-off of
    # its entries: normalising it would blow rounding noise up to radius sqrt(d).
    d = x.shape[-1]
    tiny = (d * torch.finfo(x.dtype).eps * x.abs().amax(dim=-1)) ** 2
    bad = sq_norm <= tiny
    if bad.any():
        n_bad = int(bad.sum())
        raise ValueError(
            f"{n_bad} row(s) have zero {what} (for example a constant row), and eps=0: "
            "dividing by it is undefined. Pass eps > 0 (torch uses 1e-5) or remove "
            "those rows.")


def project(x: Tensor) -> Tensor:
    """Centre ``x`` over its last axis: f(x) = x - mean(x), i.e. P x with P = I - 11^T/d."""
    validate_vectors(x)
    return x - x.mean(dim=-1, keepdim=True)


def scale(x: Tensor, eps: float = 0.0) -> Tensor:
    """Put ``x`` on the sphere of radius sqrt(d): g(x) = sqrt(d) x / sqrt(||x||^2 + d eps).

    With ``eps = 0`` a zero row raises ``ValueError`` instead of returning NaN.
    """
    validate_vectors(x)
    _check_eps(eps)
    d = x.shape[-1]
    sq_norm = (x * x).sum(dim=-1, keepdim=True)
    if eps == 0.0:
        _raise_if_degenerate(x, sq_norm.squeeze(-1), "norm")
    return math.sqrt(d) * x / torch.sqrt(sq_norm + d * eps)


def projection_matrix(d: int, dtype: torch.dtype = torch.float32,
                      device: torch.device | str | None = None) -> Tensor:
    """P = I - 1 1^T / d, shape (d, d): the orthogonal projection onto 1's complement."""
    if not isinstance(d, int) or d < 2:
        raise ValueError(f"d must be an integer >= 2, got {d!r}")
    eye = torch.eye(d, dtype=dtype, device=device)
    return eye - torch.full((d, d), 1.0 / d, dtype=dtype, device=device)


def layer_norm(x: Tensor, eps: float = 0.0) -> Tensor:
    """LayerNorm without affine: (x - mean) / sqrt(var + eps), biased variance.

    Equals ``torch.nn.functional.layer_norm(x, x.shape[-1:], eps=eps)``. With ``eps = 0``
    a constant row raises ``ValueError`` (its variance is zero).
    """
    validate_vectors(x)
    _check_eps(eps)
    centred = x - x.mean(dim=-1, keepdim=True)
    var = (centred * centred).mean(dim=-1, keepdim=True)  # biased: divide by d
    if eps == 0.0:
        _raise_if_degenerate(x, var.squeeze(-1) * x.shape[-1], "variance")
    return centred / torch.sqrt(var + eps)


def rms_norm(x: Tensor, eps: float = 0.0) -> Tensor:
    """RMSNorm without gain: x / sqrt(mean(x^2) + eps), i.e. ``scale`` with no projection."""
    return scale(x, eps=eps)


class FactorizedLayerNorm(nn.Module):
    """LayerNorm with its projection and scaling switched on or off separately.

    ``projection=True, scaling=True`` is ``nn.LayerNorm``; ``projection=False`` is the
    paper's "LayerNorm without projection", sqrt(d) x / ||x|| (which is RMSNorm);
    ``scaling=False`` is "without scaling", x - mean(x); both off is the identity. The
    affine map gamma * y + beta follows when ``elementwise_affine``. (..., d) -> (..., d).
    """

    def __init__(self, d: int, projection: bool = True, scaling: bool = True,
                 elementwise_affine: bool = True, eps: float = 1e-5):
        super().__init__()
        if not isinstance(d, int) or d < 2:
            raise ValueError(f"d must be an integer >= 2, got {d!r}")
        _check_eps(eps)
        self.d, self.projection, self.scaling, self.eps = d, projection, scaling, eps
        if elementwise_affine:
            self.weight = nn.Parameter(torch.ones(d))
            self.bias = nn.Parameter(torch.zeros(d))
        else:
            self.register_parameter("weight", None)
            self.register_parameter("bias", None)

    def forward(self, x: Tensor) -> Tensor:
        if x.shape[-1] != self.d:
            raise ValueError(f"expected last axis {self.d}, got shape {tuple(x.shape)}")
        if self.projection:
            x = x - x.mean(dim=-1, keepdim=True)
        if self.scaling:
            # sqrt(d) x / sqrt(||x||^2 + d eps) = x / sqrt(mean(x^2) + eps)
            x = x * torch.rsqrt((x * x).mean(dim=-1, keepdim=True) + self.eps)
        if self.weight is not None:
            x = x * self.weight + self.bias
        return x

    def extra_repr(self) -> str:
        return (f"{self.d}, projection={self.projection}, scaling={self.scaling}, "
                f"elementwise_affine={self.weight is not None}, eps={self.eps}")
