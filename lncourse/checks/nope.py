"""Checks for the exercises of chapter 4 (NoPE: positions in the variance of attention).
Their references and known mistakes are the teacher's key (:mod:`lncourse.checks.key.nope`)."""

from __future__ import annotations

from collections.abc import Callable

import torch
from torch import Tensor

from lncourse.checks._core import Key, case, generator, run_check

__all__ = ["check_running_mean", "check_sample_covariance", "check_fit_loglog_slope",
           "check_masked_attention", "check_effective_tokens",
           "check_posterior_median", "check_cross_fitted_mae"]


def check_running_mean(fn: Callable[[Tensor], Tensor], *, hidden: bool = False) -> None:
    """``running_mean(v)``: (..., T, d) -> (..., T, d), the mean of v_1..v_m at
    position m."""
    g = generator(0)
    cases = [case(torch.randn(6, 4, generator=g, dtype=torch.float64)),
             case(torch.randn(3, 10, 5, generator=g, dtype=torch.float64)),
             case(torch.ones(1, 3, dtype=torch.float64))]
    if hidden:
        cases += [case(torch.randn(1, 7, generator=g, dtype=torch.float64)),      # T = 1
                  case(torch.randn(2, 3, 9, 2, generator=g, dtype=torch.float64)),
                  case(torch.randn(5, 5, generator=g) + 10.0)]                     # float32
    run_check(fn, "running_mean", ["v"], cases, key=Key(__name__, hidden))


def check_sample_covariance(fn: Callable[[Tensor], Tensor], *, hidden: bool = False) -> None:
    """``sample_covariance(samples)``: (N, k), one sample per row -> (k, k), their
    unbiased covariance matrix."""
    g = generator(1)
    cases = [case(torch.randn(50, 3, generator=g, dtype=torch.float64) + 2.0),
             case(torch.randn(7, 5, generator=g, dtype=torch.float64)),
             case(torch.tensor([[1.0, 2.0], [3.0, 5.0]], dtype=torch.float64))]
    if hidden:
        cases += [case(torch.randn(9, 1, generator=g, dtype=torch.float64)),      # k = 1
                  case(torch.randn(30, 4, generator=g, dtype=torch.float64) + 1e4),
                  case(torch.randn(20, 6, generator=g))]                           # float32
    run_check(fn, "sample_covariance", ["samples"], cases, key=Key(__name__, hidden))


def check_fit_loglog_slope(fn: Callable[[Tensor, int], float], *, hidden: bool = False) -> None:
    """``fit_loglog_slope(variance, m_min)``: a 1-D tensor (entry i is the variance at
    position m = i + 1) and an int -> a float, the least-squares slope of log(variance)
    against log m over positions m >= m_min."""
    m = torch.arange(1, 65, dtype=torch.float64)
    g = generator(2)
    noisy = 0.09 / m * torch.exp(0.05 * torch.randn(64, generator=g, dtype=torch.float64))
    bent = 1.0 / m + 0.05  # not a power law: the slope depends on m_min
    cases = [case(noisy, 10), case(bent, 10), case(bent, 2), case(m ** -0.5, 1)]
    if hidden:
        short = torch.rand(12, generator=g, dtype=torch.float64) + 0.5
        cases += [case(short, 11), case(m ** -2.0 * 7, 30), case(bent.float(), 5),
                  case(0.3 / m * torch.exp(0.2 * torch.randn(64, generator=g,
                                                                dtype=torch.float64)), 3)]
    run_check(fn, "fit_loglog_slope", ["variance", "m_min"], cases,
              key=Key(__name__, hidden), forbidden={
                  "lncourse.nope.variance.loglog_slope": "this exercise asks you to write the "
                  "fit yourself (nope.loglog_slope is the package's answer)"})


def check_masked_attention(fn: Callable[[Tensor, bool], Tensor], *, hidden: bool = False) -> None:
    """``masked_attention(scores, causal)``: scaled logits (..., T, T) and a bool ->
    the attention weights (..., T, T), causally masked when causal is true."""
    g = generator(3)
    s = torch.randn(2, 5, 5, generator=g, dtype=torch.float64)
    cases = [case(s, True), case(s, False), case(torch.zeros(4, 4, dtype=torch.float64), True)]
    if hidden:
        big = torch.randn(3, 2, 7, 7, generator=g, dtype=torch.float64) * 30
        cases += [case(big, True), case(big, False),
                  case(torch.randn(1, 1, generator=g, dtype=torch.float64), True),
                  case(torch.randn(6, 6, generator=g), True)]                       # float32
    run_check(fn, "masked_attention", ["scores", "causal"], cases, key=Key(__name__, hidden))


def check_effective_tokens(fn: Callable[[Tensor], Tensor], *, hidden: bool = False) -> None:
    """``effective_tokens(weights)``: attention rows (..., T), each summing to 1 ->
    (...), the effective number of attended tokens of each row."""
    g = generator(4)
    w = torch.randn(3, 6, generator=g, dtype=torch.float64).softmax(-1)
    causal = torch.tensor([[1.0, 0, 0], [0.5, 0.5, 0], [0.2, 0.3, 0.5]], dtype=torch.float64)
    cases = [case(w), case(causal), case(torch.full((2, 4), 0.25, dtype=torch.float64))]
    if hidden:
        cases += [case(torch.eye(5, dtype=torch.float64)),                       # one-hot rows
                  case(torch.randn(2, 3, 40, generator=g, dtype=torch.float64).mul(3).softmax(-1)),
                  case(torch.ones(4, 1, dtype=torch.float64)),
                  case(torch.randn(3, 9, generator=g).softmax(-1))]               # float32
    run_check(fn, "effective_tokens", ["weights"], cases, key=Key(__name__, hidden))


def check_posterior_median(fn: Callable[[Tensor], Tensor], *,
                           hidden: bool = False) -> None:
    """``posterior_median(post)``: probabilities (..., L) over positions 1..L -> (...),
    the median position."""
    g = generator(5)
    rows = torch.rand(4, 9, generator=g, dtype=torch.float64) ** 4
    peaked = torch.tensor([[0.1, 0.1, 0.1, 0.6, 0.1], [0.05, 0.05, 0.1, 0.1, 0.7]],
                          dtype=torch.float64)
    cases = [case(rows / rows.sum(-1, keepdim=True)), case(peaked),
             case(torch.full((3, 8), 1 / 8, dtype=torch.float64))]
    if hidden:
        tie = torch.tensor([[0.25, 0.25, 0.5], [0.5, 0.25, 0.25]], dtype=torch.float64)
        deep = torch.rand(2, 3, 64, generator=g, dtype=torch.float64) ** 8
        cases += [case(tie), case(deep / deep.sum(-1, keepdim=True)),
                  case(torch.eye(6, dtype=torch.float64)),
                  case(torch.tensor([[1.0]], dtype=torch.float64))]
    run_check(fn, "posterior_median", ["post"], cases, key=Key(__name__, hidden), smooth=False)


def _truth(a: Tensor) -> Tensor:    # the true positions 1..L of every row of answers
    return torch.arange(1, a.shape[-1] + 1, dtype=torch.float64).expand(a.shape)


def _stretched_answers(g: torch.Generator, S: int, L: int, gain: float, noise: float,
                       dtype=torch.float64) -> Tensor:
    """Answers that carry the position but are mis-scaled: L/2 + gain (m - L/2) + noise,
    rounded and clipped to 1..L as a probe's would be."""
    m, z = _truth(torch.empty(S, L)), torch.randn(S, L, generator=g, dtype=torch.float64)
    return (L / 2 + gain * (m - L / 2) + noise * z).round().clamp(1, L).to(dtype)


def check_cross_fitted_mae(fn: Callable[[Tensor], float], *, hidden: bool = False) -> None:
    """``cross_fitted_mae(answers)``: a probe's answers (S, L) for positions 1..L of S
    sequences -> a float, their MAE once calibrated by a line fitted on the other half."""
    g = generator(6)
    flat_half = torch.cat([torch.full((2, 10), 4.0, dtype=torch.float64),
                           _stretched_answers(g, 2, 10, 2.0, 1.5)])
    m = torch.arange(1, 9, dtype=torch.float64)
    # one half squeezed toward the middle (its line has slope 2), the other at the ends:
    # the first half's line sends the second's answers to -2.5 and 11.5, outside 1..8
    extrapolated = torch.stack([4.5 + 0.5 * (m - 4.5),
                                torch.tensor([1.0] * 4 + [8.0] * 4, dtype=torch.float64)])
    cases = [case(_stretched_answers(g, 4, 16, 3.0, 4.0)),
             case(_stretched_answers(g, 2, 12, 0.5, 2.0)),
             case(flat_half), case(extrapolated)]
    if hidden:
        cases += [case(_stretched_answers(g, 6, 32, 2.5, 9.0)),
                  case(_stretched_answers(g, 5, 9, 1.5, 1.0)),           # odd S
                  case(_stretched_answers(g, 4, 64, 3.0, 30.0).to(torch.int16)),
                  case(_stretched_answers(g, 8, 24, -1.0, 3.0, torch.float32))]
    run_check(fn, "cross_fitted_mae", ["answers"], cases, key=Key(__name__, hidden))
