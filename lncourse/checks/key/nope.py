"""The key to chapter 4's checks (:mod:`lncourse.checks.nope`): references and known
mistakes. Teacher-only: left out of the published package."""

from __future__ import annotations

import torch
from torch import Tensor

from lncourse.nope.variance import loglog_slope


def _truth(a: Tensor) -> Tensor:    # the true positions 1..L of every row of answers
    return torch.arange(1, a.shape[-1] + 1, dtype=torch.float64).expand(a.shape)


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


# --- a probe's answers calibrated on other sequences: cross-fitting ----------------------
def _halves(S: int) -> tuple[tuple[slice, slice], tuple[slice, slice]]:
    return (slice(0, S // 2), slice(S // 2, S)), (slice(S // 2, S), slice(0, S // 2))


def _line(x: Tensor, y: Tensor) -> tuple[Tensor, Tensor]:
    """Least-squares line y ~ c + b x; flat at mean(y) where x does not vary."""
    xc = x - x.mean()
    var = (xc * xc).sum()
    b = (xc * (y - y.mean())).sum() / var if var > 0 else torch.zeros((), dtype=x.dtype)
    return y.mean() - b * x.mean(), b


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

REFERENCES = {
    "running_mean": _running_mean,
    "sample_covariance": _sample_covariance,
    "fit_loglog_slope": lambda v, mm: loglog_slope(v, m_min=mm),
    "masked_attention": _masked_attention,
    "effective_tokens": _effective_tokens,
    "posterior_median": _posterior_median,
    "cross_fitted_mae": _cross_fitted_mae,
}
