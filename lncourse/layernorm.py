"""Every normalisation of the course, in one module: LayerNorm as geometry (a projection,
a scaling and an affine map; chapter 1) and today's normalisations as small modules
(chapter 5), with the table of norms the course's transformer takes by name.

For x in R^d (the last axis of a tensor):

* ``project``: f(x) = x - mean(x) 1 = P x with P = I - 1 1^T / d, the orthogonal
  projection onto the hyperplane orthogonal to the all-ones vector 1;
* ``scale``: g(x) = sqrt(d) x / ||x||, onto the sphere of radius sqrt(d);
* the affine map h(x) = gamma * x + beta, which turns that sphere into an ellipsoid.

``layer_norm(x) = g(f(x))`` (no affine), ``rms_norm(x) = g(x)`` (no projection).
Shapes: every function maps ``(..., d) -> (..., d)``.

As modules: :class:`FactorizedLayerNorm` (LayerNorm with its projection or its scaling
switched off); :class:`RMSNorm`, the scaling without the projection (LLaMA, Mistral,
SmolLM); :func:`qk_norm_scores` and :class:`HeadRMSNorm`, QK-norm: an RMSNorm on each
head's queries and keys (ViT-22B, OLMo 2, Gemma 3), every key of a head on a sphere;
:class:`DyT`, γ·tanh(αx) + β elementwise, with neither projection nor scaling (Zhu et al.
2025); :func:`unit` and :class:`NGPTUpdate`, nGPT's hidden vectors on the unit sphere
moved toward each sublayer's normalised output by a learned step; :class:`PeriLN`, a norm
on a sublayer's input and another on its output. :func:`make_norm` builds one by its name
in :data:`NORMS`. Attention tensors are (B, H, T, dh).

Numerics: float16 and bfloat16 inputs are computed in float32 and the result is cast
back, and every row is divided by a power of two near its largest |entry| before
anything is squared. So no square overflows (300 in float16, 2e19 in float32) or
underflows (1e-30) into a norm of infinity or zero; and since dividing by a power of two
only shifts exponents, every other input gives exactly the unscaled formula's result.
"""

from __future__ import annotations

import dataclasses
import math

import torch
from torch import Tensor, nn

from lncourse.modes import scaled

__all__ = [
    "project", "scale", "projection_matrix", "abs_cos_ones", "layer_norm", "rms_norm",
    "FactorizedLayerNorm", "validate_vectors", "scaled_rows", "GeometryConfig",
    "NORMS", "NORM_ALIASES", "make_norm", "RMSNorm", "qk_norm_scores", "HeadRMSNorm", "DyT", "unit",
    "NGPTUpdate", "PeriLN",
]


def validate_vectors(x: Tensor, name: str = "x") -> None:
    """Raise a clear error unless ``x`` is a finite floating tensor with last axis >= 2."""
    if not isinstance(x, Tensor):
        raise TypeError(f"{name} must be a torch.Tensor, got {type(x).__name__}; "
                        f"convert with torch.as_tensor({name}, dtype=torch.float32)")
    if x.is_meta:
        raise ValueError(f"{name} is a 'meta' tensor: it has a shape but no values to "
                         "normalise. Create it on a real device ('cpu' or 'cuda').")
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


def check_eps(eps: float) -> None:
    if not (isinstance(eps, (int, float)) and eps >= 0.0 and math.isfinite(eps)):
        raise ValueError(f"eps must be a finite number >= 0, got {eps!r}")


def _compute_dtype(dtype: torch.dtype) -> torch.dtype:
    """float32 for the 16-bit floats (whose squares overflow at 256), else ``dtype``."""
    return torch.float32 if torch.finfo(dtype).bits < 32 else dtype


def scaled_rows(x: Tensor, eps: float = 0.0, centre: bool = True
                ) -> tuple[Tensor, Tensor, Tensor]:
    """Each row divided by a power of two near its largest |entry|: ``(u, c, m)``.

    u = x / m, exactly (dividing by a power of two only shifts exponents), with
    max |u| in [1, 2) (smaller only for rows near the bottom of the float range), so u * u
    can neither overflow nor underflow; c = u - mean(u) if
    ``centre``, else u. m: (..., 1); u, c: (..., d), in float32 for 16-bit inputs. The
    caller adds ``eps / m / m`` to a mean of squares of c (or u): m stays large enough for
    that to be finite. So x_c / sqrt(mean(x_c^2) + eps) = c / sqrt(mean(c^2) + eps / m^2),
    bit for bit the unscaled formula's result whenever that one does not overflow.
    No check is made here: :func:`layer_norm` and friends validate first.
    """
    x = x.to(_compute_dtype(x.dtype))
    info = torch.finfo(x.dtype)
    lowest = math.log2(info.tiny)          # m = 2^exponent stays a normal number ...
    if eps > 0:                            # ... and eps / m^2 stays below max / 16
        lowest = max(lowest, math.ceil(math.log2(eps / info.max) / 2) + 2)
    exponent = torch.floor(torch.log2(x.detach().abs().amax(dim=-1, keepdim=True)))
    m = torch.exp2(exponent.clamp(lowest, math.floor(math.log2(info.max))))  # (..., 1)
    u = x / m
    c = u - u.mean(dim=-1, keepdim=True) if centre else u
    return u, c, m


def raise_if_degenerate(c: Tensor, what: str) -> None:
    # c is a row divided by about its largest |entry|: a row is degenerate when its norm is at
    # the level of floating-point round-off, where normalising it would blow rounding
    # noise up to radius sqrt(d). (For scale, only the zero row: there ||c|| >= 1.)
    d = c.shape[-1]
    bad = (c * c).sum(dim=-1) <= (d * torch.finfo(c.dtype).eps) ** 2
    if bad.any():
        raise ValueError(
            f"{int(bad.sum())} row(s) have zero {what} (for example a constant row), and "
            "eps=0: dividing by it is undefined. Pass eps > 0 (torch uses 1e-5) or remove "
            "those rows.")


def project(x: Tensor) -> Tensor:
    """Centre ``x`` over its last axis: f(x) = x - mean(x), i.e. P x with P = I - 11^T/d."""
    validate_vectors(x)
    xc = x.to(_compute_dtype(x.dtype))
    return (xc - xc.mean(dim=-1, keepdim=True)).to(x.dtype)


def scale(x: Tensor, eps: float = 0.0) -> Tensor:
    """Put ``x`` on the sphere of radius sqrt(d): g(x) = sqrt(d) x / sqrt(||x||^2 + d eps).

    With ``eps = 0`` a zero row raises ``ValueError`` instead of returning NaN.
    """
    validate_vectors(x)
    check_eps(eps)
    d = x.shape[-1]
    u, _, m = scaled_rows(x, d * eps, centre=False)
    if eps == 0.0:
        raise_if_degenerate(u, "norm")
    sq_norm = (u * u).sum(dim=-1, keepdim=True)  # ||x||^2 / m^2
    return (math.sqrt(d) * u / torch.sqrt(sq_norm + d * eps / m / m)).to(x.dtype)


def projection_matrix(d: int, dtype: torch.dtype = torch.float32,
                      device: torch.device | str | None = None) -> Tensor:
    """P = I - 1 1^T / d, shape (d, d): the orthogonal projection onto 1's complement."""
    if not isinstance(d, int) or isinstance(d, bool) or d < 2:
        raise ValueError(f"d must be an integer >= 2, got {d!r}")
    if not dtype.is_floating_point:
        raise TypeError(f"dtype must be a floating dtype, got {dtype}: P has entries "
                        f"-1/{d}, which an integer dtype rounds to 0 (leaving the identity)")
    eye = torch.eye(d, dtype=dtype, device=device)
    return eye - torch.full((d, d), 1.0 / d, dtype=dtype, device=device)


def abs_cos_ones(h: Tensor) -> Tensor:
    """|cos(h_t, 1)| per token, the share of each vector along 1 that the projection
    removes (its square is the share of ‖h_t‖²): (..., d) -> (...)."""
    d = h.shape[-1]
    return (h.sum(-1) / (h.norm(dim=-1) * math.sqrt(d))).abs()


def layer_norm(x: Tensor, eps: float = 0.0) -> Tensor:
    """LayerNorm without affine: (x - mean) / sqrt(var + eps), biased variance.

    Equals ``torch.nn.functional.layer_norm(x, x.shape[-1:], eps=eps)``. With ``eps = 0``
    a constant row raises ``ValueError`` (its variance is zero).
    """
    validate_vectors(x)
    check_eps(eps)
    _, c, m = scaled_rows(x, eps, centre=True)
    if eps == 0.0:
        raise_if_degenerate(c, "variance")
    var = (c * c).mean(dim=-1, keepdim=True)  # biased (divide by d), over m^2
    return (c / torch.sqrt(var + eps / m / m)).to(x.dtype)


def rms_norm(x: Tensor, eps: float = 0.0) -> Tensor:
    """RMSNorm without gain: x / sqrt(mean(x^2) + eps), i.e. ``scale`` with no projection."""
    return scale(x, eps=eps)


class FactorizedLayerNorm(nn.Module):
    """LayerNorm with its projection and scaling switched on or off separately.

    ``projection=True, scaling=True`` is ``nn.LayerNorm``; ``projection=False`` is the
    paper's "LayerNorm without projection", sqrt(d) x / ||x|| (which is RMSNorm);
    ``scaling=False`` is "without scaling", x - mean(x); both off is the identity. The
    affine map gamma * y + beta follows when ``elementwise_affine``. (..., d) -> (..., d).
    Like ``nn.LayerNorm`` it runs in half precision (computing in float32 inside) and
    does not inspect values, except with ``eps = 0``, where a zero row raises.
    """

    def __init__(self, d: int, projection: bool = True, scaling: bool = True,
                 elementwise_affine: bool = True, eps: float = 1e-5):
        super().__init__()
        if not isinstance(d, int) or d < 2:
            raise ValueError(f"d must be an integer >= 2, got {d!r}")
        check_eps(eps)
        self.d, self.projection, self.scaling, self.eps = d, projection, scaling, eps
        if elementwise_affine:
            self.weight = nn.Parameter(torch.ones(d))
            self.bias = nn.Parameter(torch.zeros(d))
        else:
            self.register_parameter("weight", None)
            self.register_parameter("bias", None)

    def forward(self, x: Tensor) -> Tensor:
        """x: (..., d) -> (..., d), in x's dtype."""
        if not isinstance(x, Tensor) or x.dim() == 0 or x.shape[-1] != self.d:
            shape = tuple(x.shape) if isinstance(x, Tensor) else type(x).__name__
            raise ValueError(f"expected a tensor whose last axis has {self.d} entries, "
                             f"got {shape}")
        if self.weight is not None and x.device != self.weight.device:
            raise ValueError(f"the input is on {x.device} but this norm's parameters are "
                             f"on {self.weight.device}; move one with .to(...)")
        if self.scaling:
            _, y, m = scaled_rows(x, self.eps, centre=self.projection)
            if self.eps == 0.0 and not x.is_meta:
                raise_if_degenerate(y, "variance" if self.projection else "norm")
            # sqrt(d) y / sqrt(||y||^2 + d eps) = y / sqrt(mean(y^2) + eps)
            y = y * torch.rsqrt((y * y).mean(dim=-1, keepdim=True) + self.eps / m / m)
        elif self.projection:
            y = x.to(_compute_dtype(x.dtype))
            y = y - y.mean(dim=-1, keepdim=True)
        else:
            y = x
        if self.weight is not None:
            y = y * self.weight + self.bias
        return y.to(x.dtype)

    def extra_repr(self) -> str:
        return (f"{self.d}, projection={self.projection}, scaling={self.scaling}, "
                f"elementwise_affine={self.weight is not None}, eps={self.eps}")


@dataclasses.dataclass(frozen=True)
class GeometryConfig:
    """Sizes of chapter 1's demonstrations: points in its 3-D pictures and on its plane,
    and real sentences fed to MiniLM. Fast mode (:meth:`quick`) and full mode
    (:meth:`paper`) draw the same pictures from fewer points."""

    n_points: int = 2000
    n_sentences: int = 64

    @classmethod
    def paper(cls) -> "GeometryConfig":
        return cls()

    @classmethod
    def quick(cls) -> "GeometryConfig":
        return cls(n_points=300, n_sentences=8)

    def scaled(self, scale: float) -> "GeometryConfig":
        """Points and sentences multiplied by ``scale`` (at least 50 and 2), see
        :mod:`lncourse.modes`."""
        return dataclasses.replace(self, n_points=scaled(self.n_points, scale, 50),
                                   n_sentences=scaled(self.n_sentences, scale, 2))


# ------------------------------------------------------- the course's norms by name
NORMS = {
    "layernorm": (True, True),
    "no_scaling": (True, False),
    "no_projection": (False, True),
    "none": None,
    "dyt": "dyt",          # DyT: gamma * tanh(alpha x) + beta, elementwise (no P, no S)
}
# other names the configurations accept for a norm of NORMS
NORM_ALIASES = {"rmsnorm": "no_projection", "rms_norm": "no_projection"}


class DyT(nn.Module):
    """Dynamic tanh (Zhu et al. 2025): γ ⊙ tanh(α x) + β, elementwise, one learned α
    (``beta`` False: no β, as in the released LLaMA code)."""

    def __init__(self, d: int, alpha: float = 0.5, beta: bool = True):
        super().__init__()
        self.alpha = nn.Parameter(torch.tensor(float(alpha)))
        self.weight = nn.Parameter(torch.ones(d))
        self.bias = nn.Parameter(torch.zeros(d)) if beta else None

    def forward(self, x: Tensor) -> Tensor:
        y = self.weight * torch.tanh(self.alpha * x)
        return y if self.bias is None else y + self.bias


class HeadRMSNorm(nn.Module):
    """QK-norm: each head's dh channels of (..., d) scaled to RMS 1, times a learned gain
    shared by the heads (dh,): a head's keys then lie on an ellipse, all hull vertices."""

    def __init__(self, n_heads: int, dh: int, eps: float = 1e-6):
        super().__init__()
        self.n_heads, self.eps = n_heads, eps
        self.weight = nn.Parameter(torch.ones(dh))

    def forward(self, x: Tensor) -> Tensor:
        h = x.unflatten(-1, (self.n_heads, -1))
        h = h * torch.rsqrt(h.pow(2).mean(-1, keepdim=True) + self.eps) * self.weight
        return h.flatten(-2)


def make_norm(name: str, d: int, dyt_alpha: float = 0.5, dyt_beta: bool = True
              ) -> nn.Module:
    """The norm called ``name`` (a key of :data:`NORMS`) as a module, with affine γ, β."""
    flags = NORMS[name]
    if flags is None:
        return nn.Identity()
    if flags == "dyt":
        return DyT(d, dyt_alpha, dyt_beta)
    return FactorizedLayerNorm(d, projection=flags[0], scaling=flags[1])


# ------------------------------------------------------------- today's normalisations
class RMSNorm(nn.Module):
    """x / sqrt(mean(x²) + eps) · g: on the sphere of radius √d before the gain g."""

    def __init__(self, d: int, eps: float = 1e-6):
        super().__init__()
        self.weight, self.eps = nn.Parameter(torch.ones(d)), eps

    def forward(self, x: Tensor) -> Tensor:
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps) * self.weight


def qk_norm_scores(q: Tensor, k: Tensor, eps: float = 1e-6) -> Tensor:
    """Attention logits with QK-norm: RMSNorm (no gain) on each query and key over the
    head's dh channels, then q·k / √dh. q: (..., Tq, dh), k: (..., Tk, dh) -> (..., Tq, Tk).
    Every normalised key has norm √dh, so it lies on a sphere: each is a vertex of their
    convex hull, and selectable (chapter 2's Theorem 1)."""
    def rms(x: Tensor) -> Tensor:
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps)
    return rms(q) @ rms(k).transpose(-1, -2) / math.sqrt(q.shape[-1])


def unit(x: Tensor, eps: float = 1e-12) -> Tensor:
    """x / ||x||: onto the unit sphere (nGPT's only normalisation)."""
    return x / x.norm(dim=-1, keepdim=True).clamp_min(eps)


class NGPTUpdate(nn.Module):
    """nGPT's residual step: h <- unit(h + α ⊙ (unit(f(h)) - h)), with h on the unit
    sphere and α a learned per-channel step (Loshchilov et al. 2024)."""

    def __init__(self, d: int, alpha: float = 0.05):
        super().__init__()
        self.alpha = nn.Parameter(torch.full((d,), float(alpha)))

    def forward(self, h: Tensor, sublayer_out: Tensor) -> Tensor:
        return unit(h + self.alpha * (unit(sublayer_out) - h))


class PeriLN(nn.Module):
    """x + N_out(F(N_in(x))): Pre-LN's input norm and one more on the sublayer's output."""

    def __init__(self, sublayer: nn.Module, d: int, norm=RMSNorm):
        super().__init__()
        self.sublayer, self.norm_in, self.norm_out = sublayer, norm(d), norm(d)

    def forward(self, x: Tensor) -> Tensor:
        return x + self.norm_out(self.sublayer(self.norm_in(x)))
