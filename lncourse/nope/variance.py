"""Positions without positional embeddings: measuring the variance of causal attention
(chapter 4).

Chi et al. (2023): in a randomly initialised pre-LN causal transformer without
positional embeddings, the first layer's attention output at position m averages about
m value vectors, so its variance shrinks like d^2 sigma^4 / m. This module builds that
random layer and measures it across many random input sequences (batched and chunked
over samples, so long sequences fit in memory). The lemmas' formulas are in
:mod:`lncourse.nope.lemmas`, the position probe in :mod:`lncourse.evidence.nope.probe`, the
trained NoPE language model in :mod:`lncourse.nope.lm`.

Dimension names (the package's): N samples (sequences), T positions (the paper's L),
d ``d_model``, H heads, dh = d / H. Positions m count from 1.
"""

from __future__ import annotations

import dataclasses
import math
import numbers
from dataclasses import dataclass

import numpy as np
import torch
import torch.nn.functional as F
from torch import Tensor, nn

from lncourse.modes import scaled
from lncourse.progress import progress as progress_bar
from lncourse.rng import check_seed, generator, seeded
from lncourse.transformer import GPT, TransformerConfig

__all__ = [
    "VarianceConfig", "random_nope_model", "sample_inputs", "first_layer_weights",
    "weights_from_block", "first_layer", "layer_statistics", "attention_output_variance",
    "loglog_slope", "final_ln_variance",
]


def check_sizes(d_model: int, n_heads: int, seq_len: int, sigma: float) -> None:
    """Raise ``ValueError`` naming the first size that cannot describe a NoPE layer."""
    for name, value in (("d_model", d_model), ("n_heads", n_heads), ("seq_len", seq_len)):
        if isinstance(value, bool) or not isinstance(value, numbers.Integral) or value < 1:
            raise ValueError(f"{name} must be a positive integer, got {value!r}")
    if d_model < 2:
        raise ValueError("d_model must be at least 2 (LayerNorm needs two entries)")
    if d_model % n_heads:
        raise ValueError(f"d_model ({d_model}) must be divisible by n_heads ({n_heads})")
    if isinstance(sigma, bool) or not isinstance(sigma, numbers.Real) \
            or not math.isfinite(sigma) or sigma <= 0:
        raise ValueError(f"sigma must be a positive number, got {sigma!r}")


def _check_eps(eps: float) -> None:
    if isinstance(eps, bool) or not isinstance(eps, numbers.Real) or not math.isfinite(eps) \
            or eps < 0:
        raise ValueError(f"eps must be a finite number >= 0 (LayerNorm adds it to a "
                         f"variance), got {eps!r}")


@dataclass(frozen=True)
class VarianceConfig:
    """The random first layer of Chi et al. and how many samples measure it."""

    d_model: int = 768
    n_heads: int = 12
    seq_len: int = 512          # the paper's L
    n_samples: int = 500        # random input sequences (the variance is across them)
    sigma: float = 0.02         # weights and inputs ~ N(0, sigma^2), GPT initialisation
    seed: int = 0

    def __post_init__(self):
        check_sizes(self.d_model, self.n_heads, self.seq_len, self.sigma)
        if isinstance(self.n_samples, bool) or not isinstance(self.n_samples, int) \
                or self.n_samples < 2:
            raise ValueError(f"n_samples must be an integer >= 2, got {self.n_samples!r}")
        check_seed(self.seed, offset=1)

    @classmethod
    def paper(cls) -> "VarianceConfig":
        """The paper's sizes: d = 768, H = 12, L = 512, 500 samples."""
        return cls()

    @classmethod
    def quick(cls) -> "VarianceConfig":
        """The paper's d, H and sigma (so its logits and variances), shorter sequences and
        fewer samples: L = 128, 150 samples."""
        return cls(seq_len=128, n_samples=150)

    def scaled(self, scale: float) -> "VarianceConfig":
        """As many samples times ``scale`` (at least 4), see :mod:`lncourse.modes`."""
        return dataclasses.replace(self, n_samples=scaled(self.n_samples, scale, 4))


def random_nope_model(d_model: int = 768, n_heads: int = 12, n_layers: int = 1,
                      seq_len: int = 512, sigma: float = 0.02, causal: bool = True,
                      seed: int = 0, device: torch.device | str = "cpu") -> GPT:
    """A frozen random pre-LN transformer without positional embeddings (weights N(0, σ²)).

    Read its intermediates with ``model.forward_embeddings(x, return_cache=True)``. The
    weights come from ``seed`` alone (the caller's random state is left alone).
    """
    check_sizes(d_model, n_heads, seq_len, sigma)
    cfg = TransformerConfig(vocab_size=2, d_model=d_model, n_heads=n_heads,
                            n_layers=n_layers, block_size=seq_len, pos_emb=False,
                            causal=causal, init_std=sigma)
    with seeded(seed):
        model = GPT(cfg)
    model = model.to(device).eval()
    for p in model.parameters():
        p.requires_grad_(False)
    return model


def sample_inputs(n: int, seq_len: int, d_model: int, sigma: float,
                  generator: torch.Generator, device: torch.device | str = "cpu") -> Tensor:
    """Random input embeddings, every entry N(0, σ²): (N, T, d)."""
    x = torch.randn(n, seq_len, d_model, generator=generator)
    return (x * sigma).to(device)


def first_layer_weights(d_model: int = 768, sigma: float = 0.02, seed: int = 0,
                        device: torch.device | str = "cpu") -> dict[str, Tensor]:
    """W_Q, W_K, W_V, W_O (each (d, d), acting as x @ W), entries N(0, σ²), from a seed."""
    gen = generator(seed)
    return {name: (torch.randn(d_model, d_model, generator=gen) * sigma).to(device)
            for name in ("W_Q", "W_K", "W_V", "W_O")}


def weights_from_block(block: nn.Module) -> dict[str, Tensor]:
    """The first-layer weights of a ``transformer.Block`` in the x @ W convention."""
    a = block.attn
    return {name: getattr(a, name).weight.detach().T for name in ("W_Q", "W_K", "W_V", "W_O")}


def first_layer(x: Tensor, weights: dict[str, Tensor], n_heads: int, causal: bool = True,
                eps: float = 1e-5) -> dict[str, Tensor]:
    """One pre-LN attention layer without biases (γ = 1, β = 0), every intermediate.

    x: (N, T, d). Returns ``ln1`` (N,T,d), ``q``, ``k``, ``v`` (N,H,T,dh), ``attn_scores``
    (N,H,T,T, divided by sqrt(dh), masked with -inf), ``attn_weights``, ``z`` (N,H,T,dh),
    ``attn_out`` = o (N,T,d), ``resid`` = x + o and ``ln_final`` = LN(x + o).
    Written out here so that every step of the chapter's derivation is visible; a test
    checks it against the same layer inside ``lncourse.transformer.GPT``.
    """
    _check_eps(eps)
    if x.dim() != 3:
        raise ValueError(f"x must have shape (N, T, d), got {tuple(x.shape)}")
    N, T, d = x.shape
    if d % n_heads:
        raise ValueError(f"d ({d}) must be divisible by n_heads ({n_heads})")
    dh = d // n_heads
    ln1 = F.layer_norm(x, (d,), eps=eps)
    q, k, v = (
        (ln1 @ weights[n]).view(N, T, n_heads, dh).transpose(1, 2) for n in ("W_Q", "W_K", "W_V")
    )  # (N, H, T, dh)
    scores = q @ k.transpose(-2, -1) / math.sqrt(dh)  # (N, H, T, T)
    if causal:
        mask = torch.ones(T, T, dtype=torch.bool, device=x.device).tril()
        scores = scores.masked_fill(~mask, float("-inf"))
    attn = scores.softmax(dim=-1)
    z = attn @ v  # (N, H, T, dh)
    o = z.transpose(1, 2).reshape(N, T, d) @ weights["W_O"]
    resid = x + o
    return {"ln1": ln1, "q": q, "k": k, "v": v, "attn_scores": scores,
            "attn_weights": attn, "z": z, "attn_out": o, "resid": resid,
            "ln_final": F.layer_norm(resid, (d,), eps=eps)}


class Moments:
    """Running sums in float64 for the variance across samples (per position, per dim)."""

    def __init__(self):
        self.n, self.s1, self.s2 = 0, None, None

    def add(self, values: Tensor) -> None:  # values: (n, ...)
        v = values.double()
        s1, s2 = v.sum(0), (v * v).sum(0)
        self.s1 = s1 if self.s1 is None else self.s1 + s1
        self.s2 = s2 if self.s2 is None else self.s2 + s2
        self.n += values.shape[0]

    def variance(self) -> Tensor:
        """Unbiased variance across samples, same shape as one sample."""
        if self.n < 2:
            raise ValueError("the variance across samples needs at least 2 samples")
        mean = self.s1 / self.n
        return ((self.s2 - self.n * mean * mean) / (self.n - 1)).clamp_min(0.0)


def _chunks(n_samples: int, seq_len: int, d_model: int, n_heads: int,
            budget: float = 2e8) -> list[int]:
    """Split n_samples so that the attention (chunk, H, T, T) and activations fit ``budget``."""
    per_sample = n_heads * seq_len * seq_len * 3 + seq_len * d_model * 12
    size = max(1, min(n_samples, int(budget // per_sample)))
    return [min(size, n_samples - i) for i in range(0, n_samples, size)]


@torch.no_grad()
def layer_statistics(d_model: int = 768, n_heads: int = 12, seq_len: int = 512,
                     sigma: float = 0.02, n_samples: int = 500, causal: bool = True,
                     seed: int = 0, device: torch.device | str = "cpu",
                     eps: float = 1e-5, progress: bool = False) -> dict[str, Tensor]:
    """Across-sample statistics of one random first layer (frozen weights, fresh inputs).

    Returns, on the CPU, ``attn_out_var`` (T, d): the variance of o_m per dimension;
    ``ln_final_var`` (T, d): the same after the final LayerNorm of x + o;
    ``resid_var`` (T, d); ``mean_weights`` (T, T): attention weights averaged over samples
    and heads; ``score_var`` (T,): the variance of the scaled logits l_mn / sqrt(dh) over
    samples, heads and n <= m; ``qkv_var`` (3,): the mean per-entry variance of q, k, v;
    and ``weights`` (the W_Q, W_K, W_V, W_O used). Chunked over samples; runs on
    ``device`` (the caller's choice).
    """
    check_sizes(d_model, n_heads, seq_len, sigma)
    _check_eps(eps)
    if isinstance(n_samples, bool) or not isinstance(n_samples, int) or n_samples < 2:
        raise ValueError(f"n_samples must be an integer >= 2, got {n_samples!r}")
    check_seed(seed, offset=1)
    device = torch.device(device)
    weights = first_layer_weights(d_model, sigma, seed, device)
    gen = generator(seed + 1)
    T = seq_len
    o_m, ln_m, r_m = Moments(), Moments(), Moments()
    attn_sum = torch.zeros(T, T, dtype=torch.float64)
    score_sum = torch.zeros(T, dtype=torch.float64)
    score_sq = torch.zeros(T, dtype=torch.float64)
    qkv_sq = torch.zeros(3, dtype=torch.float64)
    # number of keys each query sees
    if causal:
        count = torch.arange(1, T + 1, dtype=torch.float64)
    else:
        count = torch.full((T,), float(T), dtype=torch.float64)
    chunks = _chunks(n_samples, seq_len, d_model, n_heads)
    for n in progress_bar(chunks, desc="samples", disable=not progress):
        x = sample_inputs(n, T, d_model, sigma, gen, device)
        c = first_layer(x, weights, n_heads, causal, eps)
        o_m.add(c["attn_out"].cpu())
        ln_m.add(c["ln_final"].cpu())
        r_m.add(c["resid"].cpu())
        attn_sum += c["attn_weights"].double().sum((0, 1)).cpu()
        s = c["attn_scores"].double()
        s = torch.where(torch.isfinite(s), s, torch.zeros_like(s))
        score_sum += s.sum((0, 1, 3)).cpu()
        score_sq += (s * s).sum((0, 1, 3)).cpu()
        qkv_sq += torch.stack([c[k].double().pow(2).mean() * n for k in ("q", "k", "v")]).cpu()
    total = n_samples * n_heads * count
    score_mean = score_sum / total
    return {"attn_out_var": o_m.variance(), "ln_final_var": ln_m.variance(),
            "resid_var": r_m.variance(), "mean_weights": attn_sum / (n_samples * n_heads),
            "score_var": score_sq / total - score_mean ** 2, "qkv_var": qkv_sq / n_samples,
            "weights": {k: w.cpu() for k, w in weights.items()}}


def attention_output_variance(d_model: int = 768, n_heads: int = 12, seq_len: int = 512,
                              sigma: float = 0.02, n_samples: int = 500, causal: bool = True,
                              seed: int = 0, device: torch.device | str = "cpu") -> Tensor:
    """Variance of the first layer's attention output o_m at each position: (T,).

    One random layer (weights N(0, σ²), fixed by ``seed``), ``n_samples`` random input
    sequences (entries N(0, σ²)); the variance is taken across samples for each dimension
    and then averaged over the d dimensions. Lemma 3 predicts d²σ⁴/m (causal).
    """
    stats = layer_statistics(d_model, n_heads, seq_len, sigma, n_samples, causal, seed,
                             device)
    return stats["attn_out_var"].mean(-1).float()


def loglog_slope(variance: Tensor | np.ndarray, m_min: int = 10, m_max: int | None = None
                 ) -> float:
    """Least-squares slope of log(variance) against log(m) over m_min <= m <= m_max."""
    v = torch.as_tensor(variance, dtype=torch.float64).flatten()
    m = torch.arange(1, v.numel() + 1, dtype=torch.float64)
    keep = (m >= m_min) & (m <= (m_max or v.numel()))
    if keep.sum() < 2:
        raise ValueError(f"need at least two positions in [{m_min}, {m_max or v.numel()}]")
    if (v[keep] <= 0).any() or not torch.isfinite(v[keep]).all():
        raise ValueError("variances must be positive and finite to fit a log-log slope")
    lx, ly = m[keep].log(), v[keep].log()
    lx = lx - lx.mean()
    return float((lx * (ly - ly.mean())).sum() / (lx * lx).sum())


def final_ln_variance(stats: dict[str, Tensor]) -> dict[str, Tensor]:
    """Summaries of ``layer_statistics`` for the final LayerNorm: (T,) each.

    ``resid`` mean variance of x + o; ``ln_mean`` mean variance after the LN (about 1: the
    LN erases the overall shrinkage); ``ln_spread`` the standard deviation over dimensions
    of the per-dimension variance after the LN (Lemma 4's signal plus sampling noise).
    """
    ln = stats["ln_final_var"]
    return {"resid": stats["resid_var"].mean(-1).float(), "ln_mean": ln.mean(-1).float(),
            "ln_spread": ln.std(-1).float()}
