"""LayerNorm in floating point (chapter 1, "Numerics"): what two slips in its formula
cost, and how the variance's two formulas lose digits in low precision.

* :func:`epsilon_errors`: LayerNorm computed with ε outside the square root,
  (x - mean) / (σ + ε), and with the unbiased variance (divide by d - 1), each against
  PyTorch's ``F.layer_norm`` (biased variance, ε inside the root), in float64;
* :func:`variance_errors`: the one-pass variance mean(x²) - mean(x)² and the two-pass
  mean((x - mean x)²), each computed in float32, float16 and bfloat16 (summing in that
  precision), against the exact variance of the rounded input, as the mean grows.

The lesson calls both with their defaults and its seed; ``tests/geometry/test_claims.py``
calls them with the same (the constants below), so the sentences the lesson writes around
their numbers are checked on the numbers it shows. Every input is drawn from a generator
of its own: the result depends on the seed only.
"""

from __future__ import annotations

import numpy as np
import torch
import torch.nn.functional as F
from torch import Tensor

__all__ = ["EPS", "EPSILON_CASES", "EPSILON_ROWS", "VARIANCE_MEANS", "VARIANCE_SHAPE",
           "VARIANCE_DTYPES", "PRINTED_MEAN", "variance_one_pass", "variance_two_pass",
           "epsilon_errors", "variance_errors", "mean_index"]

EPS = 1e-5                                          # PyTorch's default for nn.LayerNorm
EPSILON_CASES = ((4, 1.0), (64, 1.0), (64, 1e-3))   # (d, spread) of the ε table's rows
EPSILON_ROWS = 256                                  # vectors per row of the table
VARIANCE_MEANS = tuple(float(m) for m in np.logspace(-1, 3, 13))   # 0.1 to 1,000
VARIANCE_SHAPE = (512, 64)                          # vectors, d
VARIANCE_DTYPES = (torch.float32, torch.float16, torch.bfloat16)
PRINTED_MEAN = 100.0                                # the mean the lesson prints at


def variance_one_pass(z: Tensor) -> Tensor:
    """mean(z²) - mean(z)² over the last axis, in z's dtype: (..., d) -> (...)."""
    return (z * z).mean(-1) - z.mean(-1) ** 2


def variance_two_pass(z: Tensor) -> Tensor:
    """mean((z - mean z)²) over the last axis, in z's dtype: (..., d) -> (...)."""
    centred = z - z.mean(-1, keepdim=True)
    return (centred * centred).mean(-1)


def _check_seed(seed: int) -> None:
    if isinstance(seed, bool) or not isinstance(seed, (int, np.integer)) or seed < 0:
        raise ValueError(f"seed must be a non-negative int, got {seed!r}")


def epsilon_errors(seed: int = 0, cases=EPSILON_CASES, rows: int = EPSILON_ROWS,
                   eps: float = EPS) -> dict[tuple[int, float], tuple[float, float]]:
    """For each (d, spread) in ``cases``: the largest |error| of LayerNorm with ε outside
    the root, and of LayerNorm with the unbiased variance, against ``F.layer_norm``.

    Each case draws ``rows`` vectors of N(0, spread²) entries in R^d (float64), in the
    order of ``cases`` from one generator seeded with ``seed``. Returns
    ``{(d, spread): (outside, unbiased)}`` in the order of ``cases``.
    """
    _check_seed(seed)
    if not isinstance(rows, int) or rows < 1:
        raise ValueError(f"rows must be a positive int, got {rows!r}")
    if not eps > 0:
        raise ValueError(f"eps must be positive (the slip is where it goes), got {eps!r}")
    generator = torch.Generator().manual_seed(seed)
    out = {}
    for d, spread in cases:
        if not isinstance(d, int) or d < 2:
            raise ValueError(f"d must be an int of at least 2 (the unbiased variance "
                             f"divides by d - 1), got {d!r}")
        if not spread > 0:
            raise ValueError(f"spread must be positive, got {spread!r} (d = {d})")
        z = torch.randn(rows, d, dtype=torch.float64, generator=generator) * spread
        ref = F.layer_norm(z, (d,), eps=eps)
        centred = z - z.mean(-1, keepdim=True)
        outside = centred / (z.std(-1, unbiased=False, keepdim=True) + eps)
        unbiased = centred / torch.sqrt(z.var(-1, unbiased=True, keepdim=True) + eps)
        out[(d, float(spread))] = (float((outside - ref).abs().max()),
                                   float((unbiased - ref).abs().max()))
    return out


def _dtype_name(dtype: torch.dtype) -> str:
    return str(dtype).removeprefix("torch.")


def variance_errors(seed: int = 0, means=VARIANCE_MEANS, shape=VARIANCE_SHAPE,
                    dtypes=VARIANCE_DTYPES) -> tuple[np.ndarray, dict[str, np.ndarray]]:
    """The median relative error of each variance formula in each dtype, at each mean.

    ``shape`` = (n, d): n vectors in R^d drawn from N(0, 1) with ``seed``, then made of
    mean 0 and spread 1 exactly (float64); at each mean m, the vectors ``base + m`` are
    rounded to the dtype, and each formula's variance in that dtype is compared with the
    exact (float64) variance of the rounded vectors. Returns ``(means, errors)``:
    ``errors["one-pass, float16"]`` is an array over ``means``. Where the rounding
    leaves a vector constant (bfloat16 at mean 1,000) its exact variance is zero, its
    error NaN or infinite, and so may be the median.
    """
    _check_seed(seed)
    means = np.asarray(means, dtype=float)
    if means.ndim != 1 or means.size == 0 or not np.isfinite(means).all():
        raise ValueError(f"means must be a non-empty 1-d sequence of finite numbers, got "
                         f"{means!r}")
    n, d = shape
    if n < 1 or d < 2:
        raise ValueError(f"shape must be (n >= 1 vectors, d >= 2), got {shape!r}")
    base = torch.randn(n, d, dtype=torch.float64,
                       generator=torch.Generator().manual_seed(seed))
    base = (base - base.mean(-1, keepdim=True)) / base.std(-1, unbiased=False,
                                                           keepdim=True)
    errors = {}
    for dtype in dtypes:
        if not dtype.is_floating_point:
            raise ValueError(f"dtypes must be floating dtypes, got {dtype}")
        for name, formula in (("one-pass", variance_one_pass),
                              ("two-pass", variance_two_pass)):
            rel = []
            for m in means:
                z = (base + m).to(dtype)
                exact = variance_two_pass(z.double())      # of the rounded input
                approx = formula(z).double()
                rel.append(float(((approx - exact).abs() / exact).median()))
            errors[f"{name}, {_dtype_name(dtype)}"] = np.array(rel)
    return means, errors


def mean_index(means, mean: float = PRINTED_MEAN) -> int:
    """The index of the entry of ``means`` nearest ``mean``."""
    means = np.asarray(means, dtype=float)
    if means.ndim != 1 or means.size == 0:
        raise ValueError(f"means must be a non-empty 1-d sequence, got {means!r}")
    return int(np.argmin(np.abs(means - mean)))
