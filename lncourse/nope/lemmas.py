"""The lemmas of Chi et al. (2023) as formulas, and our correction (chapter 4).

Lemma 2 (logit variance), Lemma 3 (d^2 sigma^4 / m), the softmax's departure from uniform
weights (``softmax_energy``, about exp(tau^2) for many keys), LayerNorm's epsilon gain and
Lemma 4 (the per-dimension variance after the final LayerNorm), with the statistic that
shows Lemma 4's signal above the sampling noise. Measurements are in
:mod:`lncourse.nope.variance`. Shapes: T positions (m = 1..T), d ``d_model``.
"""

from __future__ import annotations

import math
import numbers

import numpy as np
import torch
from torch import Tensor

from lncourse.nope.variance import check_sizes
from lncourse.paper import Reported
from lncourse.rng import check_seed

__all__ = [
    "PAPER_LEMMA2", "PAPER_FIG2", "eps_gain", "theory_variance", "logit_variance_theory",
    "softmax_energy", "logits_energy", "corrected_variance", "lemma4_variance",
    "lemma4_amplitude", "lemma4_predicted_amplitude", "amplitude_noise", "log_bins",
]

PAPER_LEMMA2 = Reported("Chi et al. (2023), Lemma 2",
                        {"scaled logit variance": 768 ** 2 * 0.02 ** 4 / 12},
                        note="d^2 sigma^4 / H at d = 768, H = 12, sigma = 0.02 (0.0079)")
PAPER_FIG2 = Reported("Chi et al. (2023), Figure 2 and appendix B",
                      {"seq_len": 512, "baseline_mae": 128, "seeds": 5, "n_layers": 12,
                       "steps": 5000, "batch_size": 32, "lr": 1e-3},
                      note="probe of a frozen random 12-layer TLM; the middle-guess MAE is "
                           "L/4 = 128")


def _check_eps(eps: float) -> None:
    if isinstance(eps, bool) or not isinstance(eps, numbers.Real) or not math.isfinite(eps) \
            or eps < 0:
        raise ValueError(f"eps must be a finite number >= 0 (LayerNorm adds it to a "
                         f"variance), got {eps!r}")


def eps_gain(sigma: float, eps: float = 1e-5) -> float:
    """σ²/(σ² + ε): the mean square of LayerNorm's output for inputs of variance σ²."""
    check_sizes(2, 1, 1, sigma)
    _check_eps(eps)
    return sigma ** 2 / (sigma ** 2 + eps)


def theory_variance(d_model: int, sigma: float, seq_len: int, causal: bool = True) -> Tensor:
    """Lemma 3: d²σ⁴/m at positions m = 1..L (d²σ⁴/L everywhere if bidirectional). (T,)."""
    check_sizes(d_model, 1, seq_len, sigma)
    m = torch.arange(1, seq_len + 1, dtype=torch.float64)
    if not causal:
        m = torch.full_like(m, float(seq_len))
    return (d_model ** 2 * sigma ** 4 / m).float()


def logit_variance_theory(d_model: int, n_heads: int, sigma: float) -> dict[str, float]:
    """Variance of a scaled logit l_mn / sqrt(dh): the paper's Lemma 2 and the direct count.

    q and k have per-entry variance dσ² (Lemma 1), so <q, k> over dh entries has variance
    dh (dσ²)² and the scaled logit (dσ²)² = d²σ⁴. The paper's Lemma 2 states d²σ⁴/H.
    """
    check_sizes(d_model, n_heads, 1, sigma)
    return {"paper": d_model ** 2 * sigma ** 4 / n_heads, "direct": d_model ** 2 * sigma ** 4}


def softmax_energy(tau2: float, seq_len: int, n_draws: int = 4000, causal: bool = True,
                   seed: int = 0) -> Tensor:
    """m · E[Σ_n a_n²] at each m for a softmax of m i.i.d. N(0, τ²) logits: (T,).

    Uniform weights give exactly 1; Gaussian logits give more: m / (effective number of
    tokens attended). The limit for large m is exp(τ²). Monte Carlo over ``n_draws``.
    """
    if isinstance(tau2, bool) or not isinstance(tau2, numbers.Real) \
            or not math.isfinite(tau2) or tau2 < 0:
        raise ValueError(f"tau2 must be a non-negative number, got {tau2!r}")
    check_sizes(2, 1, seq_len, 1.0)
    gen = torch.Generator().manual_seed(check_seed(seed))
    s = torch.randn(n_draws, seq_len, generator=gen, dtype=torch.float64)
    return logits_energy(s * math.sqrt(tau2), causal)


def logits_energy(s: Tensor, causal: bool = True) -> Tensor:
    """m · E[Σ_n a_n²] at each m for softmaxes of drawn logits ``s`` (n_draws, T), one row
    per draw (causal: position m's softmax over the row's first m logits): (T,)."""
    if s.dim() != 2:
        raise ValueError(f"logits must have shape (n_draws, T), got {tuple(s.shape)}")
    s = s.double()
    n_draws, seq_len = s.shape
    if causal:
        # each prefix n <= m has its own softmax: subtract the running maximum of the row
        # (the largest logit of that prefix), so that no exponential overflows
        run_max = s.cummax(dim=-1).values                       # (n_draws, T)
        m = torch.arange(1, seq_len + 1, dtype=torch.float64)
        s1 = torch.zeros_like(s)
        s2 = torch.zeros_like(s)
        acc1 = torch.zeros(n_draws, dtype=torch.float64)
        acc2 = torch.zeros(n_draws, dtype=torch.float64)
        prev = run_max[:, 0]
        for t in range(seq_len):                                  # rescaled running sums
            shift = torch.exp(prev - run_max[:, t])
            w = torch.exp(s[:, t] - run_max[:, t])
            acc1 = acc1 * shift + w
            acc2 = acc2 * shift * shift + w * w
            s1[:, t], s2[:, t], prev = acc1, acc2, run_max[:, t]
        return (m * (s2 / s1 ** 2).mean(0)).float()
    w = torch.exp(s - s.max(dim=-1, keepdim=True).values)       # per-row maximum
    e = (w * w).sum(-1) / w.sum(-1) ** 2
    return torch.full((seq_len,), float(seq_len * e.mean()))


def corrected_variance(d_model: int, sigma: float, seq_len: int, n_heads: int | None = None,
                       causal: bool = True, eps: float = 1e-5, tau2: float | None = None
                       ) -> Tensor:
    """Lemma 3 with the softmax's non-uniformity: d²σ⁴/m · m E[Σ a²] · σ²/(σ² + eps), (T,).

    τ² (the per-query variance of the scaled logits) defaults to d²σ⁴ (the direct count
    of :func:`logit_variance_theory`) times the LN gain squared. The last factor is the
    LayerNorm's epsilon, which makes the LN output slightly smaller than unit variance
    when σ² is small.
    """
    gain = eps_gain(sigma, eps)
    if tau2 is None:  # q and k each carry the LN gain, so the logits carry it squared
        tau2 = logit_variance_theory(d_model, n_heads or 1, sigma)["direct"] * gain ** 2
    return theory_variance(d_model, sigma, seq_len, causal) * softmax_energy(
        tau2, seq_len, causal=causal) * gain


def lemma4_variance(weights: dict[str, Tensor], sigma: float, seq_len: int,
                    softmax_factor: Tensor | None = None) -> Tensor:
    """Lemma 4: per-dimension variance of LN(x + o) at each position, (T, d).

    (mσ² + c_j) / (mσ² + Σ_j c_j / d) with c_j = Σ_i ((W_V W_O)_{ij})² in the x @ W
    convention (the paper's Σ_i (W_o,j: W_v,:i)²). With ``softmax_factor`` (T,) the o
    variance c_j/m is multiplied by it (our correction).
    """
    WVO = weights["W_V"].double() @ weights["W_O"].double()  # (d, d)
    c = WVO.pow(2).sum(0)  # (d,)
    m = torch.arange(1, seq_len + 1, dtype=torch.float64)[:, None]
    f = 1.0 if softmax_factor is None else softmax_factor.double()[:, None]
    num = sigma ** 2 + f * c / m
    return (num / num.mean(-1, keepdim=True)).float()


def _profile(weights: dict[str, Tensor]) -> Tensor:
    """u_j = (c_j - mean c) / mean c: Lemma 4's pattern over the d dimensions, (d,)."""
    WVO = weights["W_V"].double() @ weights["W_O"].double()
    c = WVO.pow(2).sum(0)
    return c / c.mean() - 1


def lemma4_amplitude(ln_final_var: Tensor, weights: dict[str, Tensor]) -> Tensor:
    """How strongly the measured per-dimension variance after the final LayerNorm follows
    Lemma 4's pattern u_j, at each position: (T,).

    A_m = Σ_j (v_mj - mean_j v_mj) u_j / Σ_j u_j², with v (T, d) measured. Sampling noise
    is independent of u, so summing over d dimensions averages it down (see
    :func:`amplitude_noise`), where the spread over dimensions does not.
    """
    u = _profile(weights)
    v = ln_final_var.double()
    return ((v - v.mean(-1, keepdim=True)) @ u / (u @ u)).float()


def lemma4_predicted_amplitude(weights: dict[str, Tensor], sigma: float, seq_len: int,
                               softmax_factor: Tensor | None = None) -> Tensor:
    """Lemma 4's A_m = f_m c̄/m / (σ² + f_m c̄/m) (f: our correction, 1 without): (T,).

    About 1 at m = 1, where o dominates x + o, falling as x's share mσ² grows.
    """
    return lemma4_amplitude(lemma4_variance(weights, sigma, seq_len, softmax_factor), weights)


def amplitude_noise(weights: dict[str, Tensor], n_samples: int) -> float:
    """Standard deviation of the measured A_m from sampling alone: sqrt(2/(N-1)) / |u|.

    Each per-dimension variance estimated from N Gaussian samples has relative noise
    sqrt(2/(N-1)); projecting d independent noises onto u divides it by |u|.
    """
    if isinstance(n_samples, bool) or not isinstance(n_samples, int) or n_samples < 2:
        raise ValueError(f"n_samples must be an integer >= 2, got {n_samples!r}")
    u = _profile(weights)
    return math.sqrt(2 / (n_samples - 1)) / float(u.norm())


def log_bins(values: Tensor | np.ndarray, base: int = 2) -> dict[str, np.ndarray]:
    """Average a (T,) curve over positions 1, 2-3, 4-7, ... (powers of ``base``); a last
    bin holding less than half as many positions as the one before joins it.

    Returns ``m`` (geometric centre of each bin), ``mean``, ``count`` (positions per bin).
    """
    v = np.asarray(values, dtype=float).ravel()
    edges = [1]
    while edges[-1] <= len(v):
        edges.append(edges[-1] * base)
    edges[-1] = len(v) + 1
    if len(edges) > 2 and edges[-1] - edges[-2] < (edges[-2] - edges[-3]) / 2:
        del edges[-2]
    m, mean, count = [], [], []
    for lo, hi in zip(edges[:-1], edges[1:]):
        m.append(math.sqrt(lo * (hi - 1)))
        mean.append(v[lo - 1:hi - 1].mean())
        count.append(hi - lo)
    return {"m": np.array(m), "mean": np.array(mean), "count": np.array(count)}
