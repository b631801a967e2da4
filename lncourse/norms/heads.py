"""Per-head selectability under today's norms, on random keys of a head with dh = 2.

Chapter 2 shows that a key is selectable (some query scores it strictly above every other
key) exactly when it is a vertex of the keys' convex hull, and that keys on a sphere are
all vertices. In a head of width dh = 2 the hull is a polygon, so
:func:`unselectable_fraction_2d` counts exactly (a monotone chain whose orientation tests
are decided exactly, in floats when an error bound allows and in rationals otherwise;
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


# Shewchuk's error bound for the sign of a 2-D orientation computed in double precision:
# when |det| exceeds it, the floating-point sign is the exact one. The bound assumes no
# underflow, so products smaller than _TINY (and overflows: inf, NaN) go the exact way.
_ORIENT_BOUND = (3.0 + 16.0 * 2.0 ** -53) * 2.0 ** -53
_TINY = 2.0 ** -900


def _orient(o: tuple, a: tuple, b: tuple) -> int:
    """The exact sign of the cross product (a - o) x (b - o) for points with float
    coordinates: computed in floats, and again in rationals only when the floats cannot
    decide (an adaptive predicate, Shewchuk 1997). Returns -1, 0 or 1."""
    left = (a[0] - o[0]) * (b[1] - o[1])
    right = (a[1] - o[1]) * (b[0] - o[0])
    det, size = left - right, abs(left) + abs(right)
    if size > _TINY and abs(det) > _ORIENT_BOUND * size:
        return 1 if det > 0 else -1
    from fractions import Fraction

    o, a, b = ([Fraction(c) for c in p] for p in (o, a, b))
    exact = (a[0] - o[0]) * (b[1] - o[1]) - (a[1] - o[1]) * (b[0] - o[0])
    return (exact > 0) - (exact < 0)


def _strict_hull(points: list[tuple]) -> list[int]:
    """Indices of the strict vertices of the convex hull of distinct 2-D points with float
    coordinates (Andrew's monotone chain; points on an edge are not vertices). Exact: every
    orientation test is decided exactly (:func:`_orient`)."""
    order = sorted(range(len(points)), key=lambda i: points[i])

    def half(idx):
        chain: list[int] = []
        for i in idx:
            while len(chain) >= 2 and _orient(points[chain[-2]], points[chain[-1]],
                                              points[i]) <= 0:
                chain.pop()
            chain.append(i)
        return chain[:-1]
    return half(order) + half(order[::-1])


def unselectable_fraction_2d(keys: Tensor) -> float:
    """The fraction of the n keys (n, 2) that are not strict vertices of their convex hull,
    computed exactly on the keys' floating-point values (as float64).
    Duplicated keys count as unselectable (no query puts one strictly above its twin)."""
    k = keys.detach().double().cpu().numpy()
    if k.ndim != 2 or k.shape[1] != 2 or k.shape[0] < 3:
        raise ValueError(f"keys must have shape (n >= 3, 2), got {tuple(k.shape)}")
    if not np.isfinite(k).all():
        raise ValueError("keys hold NaN or infinity")
    pts = [(float(x) + 0.0, float(y) + 0.0) for x, y in k]     # + 0.0: -0.0 becomes 0.0
    counts: dict[tuple, int] = {}
    for p in pts:
        counts[p] = counts.get(p, 0) + 1
    distinct = list(counts)
    hull = ([distinct[i] for i in _strict_hull(distinct)] if len(distinct) >= 3
            else distinct)
    # a duplicated vertex is not selectable either: neither twin wins strictly
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
