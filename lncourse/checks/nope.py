"""Checks for the exercises of chapter 4 (NoPE: positions in the variance of attention)."""

from __future__ import annotations

import torch
from torch import Tensor

from ._core import assert_signature, run_check

__all__ = ["check_running_mean", "check_sample_covariance", "check_fit_loglog_slope",
           "check_masked_attention", "check_effective_tokens"]


def _gen(seed: int) -> torch.Generator:
    return torch.Generator().manual_seed(seed)


# --- running mean: what uniform causal attention computes ---------------------------------

def _running_mean(v: Tensor) -> Tensor:
    m = torch.arange(1, v.shape[-2] + 1, dtype=v.dtype, device=v.device)
    return v.cumsum(-2) / m[:, None]


def check_running_mean(fn) -> None:
    """running_mean(v): (..., T, d) -> (..., T, d), the mean of v_1..v_m at position m."""
    assert_signature(fn, ["v"])
    g = _gen(0)
    cases = [((torch.randn(6, 4, generator=g, dtype=torch.float64),), {}),
             ((torch.randn(3, 10, 5, generator=g, dtype=torch.float64),), {}),
             ((torch.ones(1, 3, dtype=torch.float64),), {})]
    mistakes = [
        ("you divided every position by T, the sequence length: position m averages only "
         "its m visible vectors", lambda v: v.cumsum(-2) / v.shape[-2]),
        ("you returned the running sum: divide position m by m",
         lambda v: v.cumsum(-2)),
        ("off by one: position m (counting from 1) sees m vectors, so divide by m, not m + 1",
         lambda v: v.cumsum(-2) / torch.arange(2, v.shape[-2] + 2, dtype=v.dtype)[:, None]),
        ("you averaged over the feature axis instead of the position axis",
         lambda v: v.cumsum(-1) / torch.arange(1, v.shape[-1] + 1, dtype=v.dtype)),
    ]
    run_check("running_mean", fn, cases, _running_mean, mistakes)


# --- sample covariance: Lemma 1 numerically ---------------------------------------------

def _sample_covariance(samples: Tensor) -> Tensor:
    centred = samples - samples.mean(0, keepdim=True)
    return centred.T @ centred / (samples.shape[0] - 1)


def check_sample_covariance(fn) -> None:
    """sample_covariance(samples): (N, k) -> (k, k), unbiased covariance across samples."""
    assert_signature(fn, ["samples"])
    g = _gen(1)
    cases = [((torch.randn(50, 3, generator=g, dtype=torch.float64) + 2.0,), {}),
             ((torch.randn(7, 5, generator=g, dtype=torch.float64),), {}),
             ((torch.tensor([[1.0, 2.0], [3.0, 5.0]], dtype=torch.float64),), {})]
    mistakes = [
        ("you divided by N instead of N - 1 (the biased estimate)",
         lambda s: (s - s.mean(0)).T @ (s - s.mean(0)) / s.shape[0]),
        ("you did not subtract the mean of each coordinate before multiplying",
         lambda s: s.T @ s / (s.shape[0] - 1)),
        ("you took the covariance across coordinates (k x k expected from an (N, k) input: "
         "samples are rows)",
         lambda s: (s - s.mean(1, keepdim=True)) @ (s - s.mean(1, keepdim=True)).T
         / (s.shape[1] - 1)),
    ]
    run_check("sample_covariance", fn, cases, _sample_covariance, mistakes)


# --- the log-log slope of Lemma 3 ---------------------------------------------------------

def _slope(variance: Tensor, m_min: int) -> float:
    m = torch.arange(1, variance.numel() + 1, dtype=torch.float64)
    keep = m >= m_min
    x, y = m[keep].log(), variance.double()[keep].log()
    x = x - x.mean()
    return float((x * (y - y.mean())).sum() / (x * x).sum())


def _slope_zero_based(variance: Tensor, m_min: int) -> float:
    m = torch.arange(0, variance.numel(), dtype=torch.float64)
    keep = m >= max(m_min, 1)
    x, y = m[keep].log(), variance.double()[keep].log()
    x = x - x.mean()
    return float((x * (y - y.mean())).sum() / (x * x).sum())


def _slope_linear_m(variance: Tensor, m_min: int) -> float:
    m = torch.arange(1, variance.numel() + 1, dtype=torch.float64)
    keep = m >= m_min
    x, y = m[keep], variance.double()[keep].log()
    x = x - x.mean()
    return float((x * (y - y.mean())).sum() / (x * x).sum())


def check_fit_loglog_slope(fn) -> None:
    """fit_loglog_slope(variance, m_min): least-squares slope of log v against log m."""
    assert_signature(fn, ["variance", "m_min"])
    m = torch.arange(1, 65, dtype=torch.float64)
    g = _gen(2)
    noisy = 0.09 / m * torch.exp(0.05 * torch.randn(64, generator=g, dtype=torch.float64))
    bent = 1.0 / m + 0.05  # not a power law: the slope depends on m_min
    cases = [((noisy, 10), {}), ((bent, 10), {}), ((bent, 2), {}), ((m ** -0.5, 1), {})]
    mistakes = [
        ("you fitted every position: keep only m >= m_min", lambda v, mm: _slope(v, 1)),
        ("positions count from 1: the first entry of variance is m = 1, not m = 0",
         _slope_zero_based),
        ("regress log(variance) on log(m), not on m", _slope_linear_m),
        ("you fitted variance against m without logarithms",
         lambda v, mm: float(torch.linalg.lstsq(
             torch.stack([torch.arange(mm, v.numel() + 1, dtype=torch.float64),
                          torch.ones(v.numel() - mm + 1, dtype=torch.float64)], 1),
             v.double()[mm - 1:, None]).solution[0, 0])),
    ]
    run_check("fit_loglog_slope", fn, cases, _slope, mistakes, atol=1e-6)


# --- causal and bidirectional masks ------------------------------------------------------

def _apply_mask(scores: Tensor, causal: bool, keep_fn) -> Tensor:
    """Scores with -inf where ``keep_fn(ones(T, T))`` is False (only when causal)."""
    if not causal:
        return scores
    T = scores.shape[-1]
    keep = keep_fn(torch.ones(T, T, dtype=torch.bool))
    return scores.masked_fill(~keep, float("-inf"))


def _masked_attention(scores: Tensor, causal: bool) -> Tensor:
    return _apply_mask(scores, causal, torch.tril).softmax(-1)


def _strict_below_diagonal(ones: Tensor) -> Tensor:
    keep = ones.tril(-1)
    keep[0, 0] = True  # avoid an all -inf first row
    return keep


def _strict_mask(scores: Tensor, causal: bool) -> Tensor:
    return _apply_mask(scores, causal, _strict_below_diagonal).softmax(-1)


def _future_mask(scores: Tensor, causal: bool) -> Tensor:
    return _apply_mask(scores, causal, torch.triu).softmax(-1)


def _query_softmax(scores: Tensor, causal: bool) -> Tensor:
    return _apply_mask(scores, causal, torch.tril).softmax(-2).nan_to_num(0.0)


def check_masked_attention(fn) -> None:
    """masked_attention(scores, causal): (..., T, T) scaled logits -> attention weights."""
    assert_signature(fn, ["scores", "causal"])
    g = _gen(3)
    s = torch.randn(2, 5, 5, generator=g, dtype=torch.float64)
    cases = [((s, True), {}), ((s, False), {}),
             ((torch.zeros(4, 4, dtype=torch.float64), True), {})]
    mistakes = [
        ("the mask hides the diagonal too: a token may attend to itself (m >= n)",
         _strict_mask),
        ("you hid the past instead of the future: keep the lower triangle, n <= m",
         _future_mask),
        ("with causal=True no token may see later tokens: apply the mask",
         lambda sc, c: sc.softmax(-1)),
        ("with causal=False (bidirectional) every token sees all T tokens: no mask",
         lambda sc, c: _masked_attention(sc, True)),
        ("normalise over the keys (the last axis), not the queries",
         _query_softmax),
    ]
    run_check("masked_attention", fn, cases, _masked_attention, mistakes)


# --- effective number of attended tokens -------------------------------------------------

def _effective_tokens(weights: Tensor) -> Tensor:
    return 1.0 / weights.pow(2).sum(-1)


def check_effective_tokens(fn) -> None:
    """effective_tokens(weights): (..., T) attention rows -> (...) 1 / Σ_n a_n²."""
    assert_signature(fn, ["weights"])
    g = _gen(4)
    w = torch.randn(3, 6, generator=g, dtype=torch.float64).softmax(-1)
    causal = torch.tensor([[1.0, 0, 0], [0.5, 0.5, 0], [0.2, 0.3, 0.5]], dtype=torch.float64)
    cases = [((w,), {}), ((causal,), {}), ((torch.full((2, 4), 0.25, dtype=torch.float64),), {})]
    mistakes = [
        ("you returned Σ a_n², the energy; the effective number of tokens is its inverse",
         lambda a: a.pow(2).sum(-1)),
        ("you counted the non-zero weights; weight them: 1 / Σ a_n²",
         lambda a: (a > 0).sum(-1).to(a.dtype)),
        ("1 / Σ a_n is always 1 for attention weights; square the weights first",
         lambda a: 1.0 / a.sum(-1)),
    ]
    run_check("effective_tokens", fn, cases, _effective_tokens, mistakes)

