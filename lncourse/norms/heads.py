"""Per-head selectability under today's norms, on random keys of a head with dh = 2.

Chapter 2 shows that a key is selectable (some query scores it strictly above every other
key) exactly when it is a vertex of the keys' convex hull, and that keys on a sphere are
all vertices. In a head of width dh = 2 the hull is a polygon, so
:func:`unselectable_fraction_2d` counts exactly (a monotone chain in rational arithmetic;
Qhull's tolerances drop keys that lie very close together on a circle) the keys that are
not vertices. :func:`head_keys` maps the same raw keys as each normalisation would: none,
QK-norm (RMSNorm over the head's channels: a circle), DyT (tanh, elementwise: a box).
This tests two cells of the chapter's prediction table on random keys, not trained ones.
"""

from __future__ import annotations

import math

import numpy as np
import torch
from torch import Tensor

__all__ = ["unselectable_fraction_2d", "head_keys", "NORMS", "selectability_by_norm",
           "mean_interval"]

NORMS = ("none", "qk_norm", "dyt")


def _strict_hull(points: list[tuple]) -> list[int]:
    """Indices of the strict vertices of the convex hull of distinct 2-D points (Andrew's
    monotone chain; points on an edge are not vertices). Exact for rational coordinates."""
    order = sorted(range(len(points)), key=lambda i: points[i])

    def cross(o, a, b):
        return (a[0] - o[0]) * (b[1] - o[1]) - (a[1] - o[1]) * (b[0] - o[0])

    def half(idx):
        chain: list[int] = []
        for i in idx:
            while len(chain) >= 2 and cross(points[chain[-2]], points[chain[-1]], points[i]) <= 0:
                chain.pop()
            chain.append(i)
        return chain[:-1]
    return half(order) + half(order[::-1])


def unselectable_fraction_2d(keys: Tensor) -> float:
    """The fraction of the n keys (n, 2) that are not strict vertices of their convex hull,
    computed exactly (in rational arithmetic on the keys' floating-point values).
    Duplicated keys count as unselectable (no query puts one strictly above its twin)."""
    from fractions import Fraction

    k = keys.detach().double().cpu().numpy()
    if k.ndim != 2 or k.shape[1] != 2 or k.shape[0] < 3:
        raise ValueError(f"keys must have shape (n >= 3, 2), got {tuple(k.shape)}")
    if not np.isfinite(k).all():
        raise ValueError("keys hold NaN or infinity")
    pts = [(Fraction(float(x)), Fraction(float(y))) for x, y in k]
    seen: dict[tuple, int] = {}
    twins = 0
    for i, p in enumerate(pts):
        if p in seen:
            twins += 1
        seen.setdefault(p, i)
    distinct = list(seen)
    vertices = len(_strict_hull(distinct)) if len(distinct) >= 3 else len(distinct)
    if twins:   # a duplicated vertex is not selectable either: neither twin wins strictly
        counts = {}
        for p in pts:
            counts[p] = counts.get(p, 0) + 1
        hull = {distinct[i] for i in _strict_hull(distinct)} if len(distinct) >= 3 else set(distinct)
        vertices = sum(1 for p in hull if counts[p] == 1)
    return 1.0 - vertices / k.shape[0]


def head_keys(raw: Tensor, norm: str, alpha: float = 1.0, eps: float = 1e-6) -> Tensor:
    """The keys a head compares after ``norm``: (n, dh) -> (n, dh)."""
    if norm == "none":
        return raw
    if norm == "qk_norm":
        return raw * torch.rsqrt(raw.pow(2).mean(-1, keepdim=True) + eps)
    if norm == "dyt":
        return torch.tanh(alpha * raw)
    raise ValueError(f"norm must be one of {NORMS}, got {norm!r}")


def selectability_by_norm(n_keys: int, n_seeds: int, alphas=(0.5, 2.0), scale: float = 1.0,
                          seed: int = 0) -> dict[str, list[float]]:
    """Unselectable fraction per seed for Gaussian raw keys N(0, scale² I) in 2-D, under
    each norm: none, QK-norm with eps 1e-6 (``qk_norm``: a key much shorter than √eps
    lands inside the circle) and with eps 0 (``qk_norm_eps0``: exactly on it, up to
    rounding), DyT at each alpha (``dyt_a<alpha>``)."""
    out: dict[str, list[float]] = {}
    for s in range(n_seeds):
        g = torch.Generator().manual_seed(seed + s)
        raw = torch.randn(n_keys, 2, generator=g, dtype=torch.float64) * scale
        variants = [("none", head_keys(raw, "none")), ("qk_norm", head_keys(raw, "qk_norm")),
                    ("qk_norm_eps0", head_keys(raw, "qk_norm", eps=0.0))]
        variants += [(f"dyt_a{a:g}", head_keys(raw, "dyt", a)) for a in alphas]
        for name, keys in variants:
            out.setdefault(name, []).append(unselectable_fraction_2d(keys))
    return out


def mean_interval(values: list[float], level: float = 0.95) -> tuple[float, float, float]:
    """Mean and a t interval across seeds."""
    from scipy import stats

    a = np.asarray(values, dtype=np.float64)
    half = float(stats.t.ppf(0.5 + level / 2, len(a) - 1) * a.std(ddof=1) / math.sqrt(len(a)))
    return float(a.mean()), float(a.mean() - half), float(a.mean() + half)
