"""Checks for the exercises of chapter 4 (NoPE: positions in the variance of attention)."""

from __future__ import annotations

from collections.abc import Callable

import torch
from torch import Tensor

from lncourse.nope.variance import loglog_slope
from lncourse.checks._core import case, generator, run_check

__all__ = ["check_running_mean", "check_sample_covariance", "check_fit_loglog_slope",
           "check_masked_attention", "check_effective_tokens",
           "check_posterior_median", "check_cross_fitted_mae"]


# --- running mean: what uniform causal attention computes ---------------------------------
def _running_mean(v: Tensor) -> Tensor:
    m = torch.arange(1, v.shape[-2] + 1, dtype=v.dtype)
    return v.cumsum(-2) / m[:, None]


_FROM_ZERO = ("off by one: you divided row m by m - 1 (positions counted from 0); row m, "
              "counting from 1, is the mean of its m rows: divide by torch.arange(1, T + 1)")
_RUNNING_MEAN_MISTAKES = [
    ("you divided every position by T, the sequence length: position m averages only "
     "its m visible vectors", lambda v: v.cumsum(-2) / v.shape[-2]),
    ("you returned the running sum: divide position m by m", lambda v: v.cumsum(-2)),
    ("off by one: position m (counting from 1) sees m vectors, so divide by m, not m + 1",
     lambda v: v.cumsum(-2) / torch.arange(2, v.shape[-2] + 2, dtype=v.dtype)[:, None]),
    (_FROM_ZERO,
     lambda v: v.cumsum(-2) / torch.arange(v.shape[-2], dtype=v.dtype).clamp(min=1)[:, None]),
    (_FROM_ZERO, lambda v: v.cumsum(-2) / torch.arange(v.shape[-2], dtype=v.dtype)[:, None]),
    ("you averaged over the feature axis instead of the position axis",
     lambda v: v.cumsum(-1) / torch.arange(1, v.shape[-1] + 1, dtype=v.dtype)),
]


def check_running_mean(fn: Callable[[Tensor], Tensor], *, hidden: bool = False) -> None:
    """running_mean(v): (..., T, d) -> (..., T, d), the mean of v_1..v_m at position m."""
    g = generator(0)
    cases = [case(torch.randn(6, 4, generator=g, dtype=torch.float64)),
             case(torch.randn(3, 10, 5, generator=g, dtype=torch.float64)),
             case(torch.ones(1, 3, dtype=torch.float64))]
    if hidden:
        cases += [case(torch.randn(1, 7, generator=g, dtype=torch.float64)),      # T = 1
                  case(torch.randn(2, 3, 9, 2, generator=g, dtype=torch.float64)),
                  case(torch.randn(5, 5, generator=g) + 10.0)]                     # float32
    run_check(fn, "running_mean", ["v"], cases, reference=_running_mean,
              mistakes=_RUNNING_MEAN_MISTAKES)


# --- sample covariance: Lemma 1 numerically ---------------------------------------------
def _sample_covariance(samples: Tensor) -> Tensor:
    centred = samples - samples.mean(0, keepdim=True)
    return centred.T @ centred / (samples.shape[0] - 1)


_COVARIANCE_MISTAKES = [
    ("you divided by N instead of N - 1 (the biased estimate)",
     lambda s: (s - s.mean(0)).T @ (s - s.mean(0)) / s.shape[0]),
    ("you centred each row (subtracted the mean of each sample over its k coordinates); "
     "centre each column: subtract the mean over the N samples, samples.mean(dim=0)",
     lambda s: (s - s.mean(1, keepdim=True)).T @ (s - s.mean(1, keepdim=True))
     / (s.shape[0] - 1)),
    ("you did not subtract the mean of each coordinate before multiplying",
     lambda s: s.T @ s / (s.shape[0] - 1)),
    ("you took the covariance across coordinates (k x k expected from an (N, k) input: "
     "samples are rows)",
     lambda s: (s - s.mean(1, keepdim=True)) @ (s - s.mean(1, keepdim=True)).T
     / (s.shape[1] - 1)),
]


def check_sample_covariance(fn: Callable[[Tensor], Tensor], *, hidden: bool = False) -> None:
    """sample_covariance(samples): (N, k) -> (k, k), unbiased covariance across samples."""
    g = generator(1)
    cases = [case(torch.randn(50, 3, generator=g, dtype=torch.float64) + 2.0),
             case(torch.randn(7, 5, generator=g, dtype=torch.float64)),
             case(torch.tensor([[1.0, 2.0], [3.0, 5.0]], dtype=torch.float64))]
    if hidden:
        cases += [case(torch.randn(9, 1, generator=g, dtype=torch.float64)),      # k = 1
                  case(torch.randn(30, 4, generator=g, dtype=torch.float64) + 1e4),
                  case(torch.randn(20, 6, generator=g))]                           # float32
    run_check(fn, "sample_covariance", ["samples"], cases, reference=_sample_covariance,
              mistakes=_COVARIANCE_MISTAKES)


# --- the log-log slope of Lemma 3 ---------------------------------------------------------
def _slope(x: Tensor, y: Tensor) -> float:
    """Least-squares slope of y against x."""
    x = x - x.mean()
    return float((x * (y - y.mean())).sum() / (x * x).sum())


def _kept(variance: Tensor, m_min: int, first: int = 1) -> tuple[Tensor, Tensor]:
    m = torch.arange(first, first + variance.numel(), dtype=torch.float64)
    keep = m >= max(m_min, 1)
    return m[keep], variance.double()[keep]


_SLOPE_MISTAKES = [
    ("you fitted every position: keep only m >= m_min",
     lambda v, mm: loglog_slope(v, m_min=1)),
    ("positions count from 1: the first entry of variance is m = 1, not m = 0",
     lambda v, mm: _slope(*(t.log() for t in _kept(v, mm, first=0)))),
    ("regress log(variance) on log(m), not on m",
     lambda v, mm: (lambda m, y: _slope(m, y.log()))(*_kept(v, mm))),
    ("you fitted variance against m without logarithms",
     lambda v, mm: _slope(*_kept(v, mm))),
]


def check_fit_loglog_slope(fn: Callable[[Tensor, int], float], *, hidden: bool = False) -> None:
    """fit_loglog_slope(variance, m_min): least-squares slope of log v against log m."""
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
              reference=lambda v, mm: loglog_slope(v, m_min=mm), mistakes=_SLOPE_MISTAKES,
              forbidden={"lncourse.nope.variance.loglog_slope": "this exercise asks you to write the "
                         "fit yourself (nope.loglog_slope is the package's answer)"})


# --- causal and bidirectional masks ------------------------------------------------------
def _softmax_keeping(scores: Tensor, keep: Tensor, dim: int = -1) -> Tensor:
    return scores.masked_fill(~keep, float("-inf")).softmax(dim)


def _allowed(T: int, diagonal: int = 0) -> Tensor:
    return torch.ones(T, T, dtype=torch.bool).tril(diagonal)


def _masked_attention(scores: Tensor, causal: bool) -> Tensor:
    return _softmax_keeping(scores, _allowed(scores.shape[-1])) if causal else scores.softmax(-1)


def _strict_mask(scores: Tensor, causal: bool) -> Tensor:
    keep = _allowed(scores.shape[-1], -1)
    keep[0, 0] = True  # avoid an all -inf first row
    return _softmax_keeping(scores, keep) if causal else scores.softmax(-1)


_MASK_MISTAKES = [
    ("the mask hides the diagonal too: a token may attend to itself (m >= n)", _strict_mask),
    ("you hid the past instead of the future: keep the lower triangle, n <= m",
     lambda sc, c: _softmax_keeping(sc, _allowed(sc.shape[-1]).T) if c else sc.softmax(-1)),
    ("with causal=True no token may see later tokens: apply the mask",
     lambda sc, c: sc.softmax(-1)),
    ("with causal=False (bidirectional) every token sees all T tokens: no mask",
     lambda sc, c: _masked_attention(sc, True)),
    ("a 0/1 mask does not hide a key: a masked logit of 0 still gets weight exp(0) in "
     "the softmax; give the masked logits -inf (scores.masked_fill(~allowed, "
     "float('-inf'))) so that their weight is exactly 0",
     lambda sc, c: sc.masked_fill(~_allowed(sc.shape[-1]), 0.0).softmax(-1) if c
     else sc.softmax(-1)),
    ("a 0/1 mask does not hide a key: adding 0 or 1 to the logits leaves every key some "
     "weight; give the masked logits -inf (scores.masked_fill(~allowed, "
     "float('-inf'))) so that their weight is exactly 0",
     lambda sc, c: (sc + _allowed(sc.shape[-1]).to(sc.dtype)).softmax(-1) if c
     else sc.softmax(-1)),
    ("you zeroed the future's weights after the softmax, so a row no longer sums to 1: "
     "mask the logits with -inf before the softmax",
     lambda sc, c: sc.softmax(-1) * _allowed(sc.shape[-1]).to(sc.dtype) if c
     else sc.softmax(-1)),
    ("normalise over the keys (the last axis), not the queries",
     lambda sc, c: (_softmax_keeping(sc, _allowed(sc.shape[-1]), -2).nan_to_num(0.0) if c
                    else sc.softmax(-2))),
]


def check_masked_attention(fn: Callable[[Tensor, bool], Tensor], *, hidden: bool = False) -> None:
    """masked_attention(scores, causal): (..., T, T) scaled logits -> attention weights."""
    g = generator(3)
    s = torch.randn(2, 5, 5, generator=g, dtype=torch.float64)
    cases = [case(s, True), case(s, False), case(torch.zeros(4, 4, dtype=torch.float64), True)]
    if hidden:
        big = torch.randn(3, 2, 7, 7, generator=g, dtype=torch.float64) * 30
        cases += [case(big, True), case(big, False),
                  case(torch.randn(1, 1, generator=g, dtype=torch.float64), True),
                  case(torch.randn(6, 6, generator=g), True)]                       # float32
    run_check(fn, "masked_attention", ["scores", "causal"], cases,
              reference=_masked_attention, mistakes=_MASK_MISTAKES)


# --- effective number of attended tokens -------------------------------------------------
def _effective_tokens(weights: Tensor) -> Tensor:
    return 1.0 / weights.pow(2).sum(-1)


_EFFECTIVE_MISTAKES = [
    ("you returned Σ a_n², the energy; the effective number of tokens is its inverse",
     lambda a: a.pow(2).sum(-1)),
    ("you counted the non-zero weights; weight them: 1 / Σ a_n²",
     lambda a: (a > 0).sum(-1)),
    ("you counted the non-zero weights; weight them: 1 / Σ a_n²",
     lambda a: (a > 0).sum(-1).to(a.dtype)),
    ("1 / Σ a_n is always 1 for attention weights; square the weights first",
     lambda a: 1.0 / a.sum(-1)),
]


def check_effective_tokens(fn: Callable[[Tensor], Tensor], *, hidden: bool = False) -> None:
    """effective_tokens(weights): (..., T) attention rows -> (...) 1 / Σ_n a_n²."""
    g = generator(4)
    w = torch.randn(3, 6, generator=g, dtype=torch.float64).softmax(-1)
    causal = torch.tensor([[1.0, 0, 0], [0.5, 0.5, 0], [0.2, 0.3, 0.5]], dtype=torch.float64)
    cases = [case(w), case(causal), case(torch.full((2, 4), 0.25, dtype=torch.float64))]
    if hidden:
        cases += [case(torch.eye(5, dtype=torch.float64)),                       # one-hot rows
                  case(torch.randn(2, 3, 40, generator=g, dtype=torch.float64).mul(3).softmax(-1)),
                  case(torch.ones(4, 1, dtype=torch.float64)),
                  case(torch.randn(3, 9, generator=g).softmax(-1))]               # float32
    run_check(fn, "effective_tokens", ["weights"], cases, reference=_effective_tokens,
              mistakes=_EFFECTIVE_MISTAKES)


# --- reading a probe's posterior by its median ------------------------------------
def _posterior_median(post: Tensor) -> Tensor:
    return (post.cumsum(-1) < 0.5).sum(-1) + 1


def _pos(post: Tensor) -> Tensor:
    return torch.arange(1, post.shape[-1] + 1, dtype=post.dtype)


_MEDIAN_MISTAKES = [
    ("you returned the argmax, the most likely position; the median is the first "
     "position where the cumulative probability reaches 1/2",
     lambda p: p.argmax(-1) + 1),
    ("off by one: positions count from 1, so the first position is 1, not 0",
     lambda p: (p.cumsum(-1) < 0.5).sum(-1)),
    ("you returned the posterior's mean; the absolute error is smallest at its median",
     lambda p: (p * _pos(p)).sum(-1)),
    ("where the cumulative probability is exactly 1/2, that position is the median: "
     "look for the first position with cumulative probability >= 1/2, not > 1/2",
     lambda p: (p.cumsum(-1) <= 0.5).sum(-1) + 1),
    ("you accumulated over the wrong axis: the positions are the last axis",
     lambda p: (p.cumsum(0) < 0.5).sum(-1) + 1),
]


def check_posterior_median(fn: Callable[[Tensor], Tensor], *,
                           hidden: bool = False) -> None:
    """posterior_median(post): (..., L) probabilities -> (...) the 1-based median."""
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
    run_check(fn, "posterior_median", ["post"], cases,
              reference=_posterior_median, mistakes=_MEDIAN_MISTAKES, smooth=False)


# --- a probe's answers calibrated on other sequences: cross-fitting ----------------------
def _halves(S: int) -> tuple[tuple[slice, slice], tuple[slice, slice]]:
    return (slice(0, S // 2), slice(S // 2, S)), (slice(S // 2, S), slice(0, S // 2))


def _line(x: Tensor, y: Tensor) -> tuple[Tensor, Tensor]:
    """Least-squares line y ~ c + b x; flat at mean(y) where x does not vary."""
    xc = x - x.mean()
    var = (xc * xc).sum()
    b = (xc * (y - y.mean())).sum() / var if var > 0 else torch.zeros((), dtype=x.dtype)
    return y.mean() - b * x.mean(), b


def _truth(a: Tensor) -> Tensor:    # the true positions 1..L of every row of answers
    return torch.arange(1, a.shape[-1] + 1, dtype=torch.float64).expand(a.shape)


def _calibrated(answers: Tensor, *, fit_rows, score_rows, clip=True, reverse=False,
                by_columns=False) -> Tensor:
    """The absolute errors of the rows ``score_rows`` calibrated by the line fitted on
    ``fit_rows`` (the arguments make the known mistakes). A line is shift-equivariant, so
    counting positions from 0 instead (and clipping to 0..L-1) gives the same errors."""
    a, y, L = answers.double(), _truth(answers), answers.shape[-1]
    if by_columns:
        a, y = a.T, y.T
    x_fit, y_fit = a[fit_rows].reshape(-1), y[fit_rows].reshape(-1)
    if reverse:       # the answer regressed on the truth, then the line inverted
        c, b = _line(y_fit, x_fit)
        guess = (a[score_rows] - c) / b
    else:
        c, b = _line(x_fit, y_fit)
        guess = c + b * a[score_rows]
    if clip:
        guess = guess.clamp(1, L)
    return (guess - y[score_rows]).abs().reshape(-1)


def _cross_fitted_mae(answers: Tensor, **how) -> float:
    errors = [_calibrated(answers, fit_rows=f, score_rows=s, **how)
              for f, s in _halves(answers.shape[-2 if not how.get("by_columns") else -1])]
    return float(torch.cat(errors).mean())


_CALIBRATION_MISTAKES = [
    ("you fitted the line on the very sequences you scored (in-sample): fit on one half, "
     "score the other, then swap", lambda a: float(_calibrated(
         a, fit_rows=slice(None), score_rows=slice(None)).mean())),
    ("you scored only one half: swap the halves and average the errors of all S x L "
     "answers", lambda a: float(_calibrated(a, fit_rows=_halves(a.shape[0])[0][0],
                                               score_rows=_halves(a.shape[0])[0][1]).mean())),
    ("you regressed the answer on the true position and inverted that line: regress the "
     "true position on the answer (the line that predicts what you want)",
     lambda a: _cross_fitted_mae(a, reverse=True)),
    ("a calibrated guess outside 1..L: clip each guess to the positions that exist",
     lambda a: _cross_fitted_mae(a, clip=False)),
    ("you split the positions (columns) into halves: split the sequences (rows), so each "
     "line is fitted on every position", lambda a: _cross_fitted_mae(a, by_columns=True)),
    ("you returned the raw answers' error: calibrate them with the fitted line first",
     lambda a: float((a.double() - _truth(a)).abs().mean())),
]


def _stretched_answers(g: torch.Generator, S: int, L: int, gain: float, noise: float,
                       dtype=torch.float64) -> Tensor:
    """Answers that carry the position but are mis-scaled: L/2 + gain (m - L/2) + noise,
    rounded and clipped to 1..L as a probe's would be."""
    m, z = _truth(torch.empty(S, L)), torch.randn(S, L, generator=g, dtype=torch.float64)
    return (L / 2 + gain * (m - L / 2) + noise * z).round().clamp(1, L).to(dtype)


def check_cross_fitted_mae(fn: Callable[[Tensor], float], *, hidden: bool = False) -> None:
    """cross_fitted_mae(answers): a probe's answers (S, L) for positions 1..L of S
    sequences -> their MAE once calibrated by a line fitted on the other half."""
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
    run_check(fn, "cross_fitted_mae", ["answers"], cases, reference=_cross_fitted_mae,
              mistakes=_CALIBRATION_MISTAKES)


# The known mistakes of every exercise this module checks, by the exercise's function
# name (tests/checks/test_exercises.py writes an answer for each).
MISTAKES = {
    "running_mean": _RUNNING_MEAN_MISTAKES,
    "sample_covariance": _COVARIANCE_MISTAKES,
    "fit_loglog_slope": _SLOPE_MISTAKES,
    "masked_attention": _MASK_MISTAKES,
    "effective_tokens": _EFFECTIVE_MISTAKES,
    "posterior_median": _MEDIAN_MISTAKES,
    "cross_fitted_mae": _CALIBRATION_MISTAKES,
}
