"""Positions without positional embeddings: the variance of causal attention (chapter 4).

Chi et al. (2023): in a randomly initialised pre-LN causal transformer without
positional embeddings, the first layer's attention output at position m averages about
m value vectors, so its variance shrinks like d^2 sigma^4 / m. This module measures that
variance (batched and chunked over samples, so long sequences fit in memory), gives the
paper's theory and our correction for the softmax not being exactly uniform, and trains
the position probe of the paper's Figure 2.

Dimension names: N samples, T (= L) positions, d ``d_model``, H heads, dh = d / H.
"""

from __future__ import annotations

import math

import numpy as np
import torch
import torch.nn.functional as F
from torch import Tensor, nn

from .device import default_device
from .progress import progress as progress_bar
from .transformer import GPT, TransformerConfig

__all__ = [
    "random_nope_model", "sample_inputs", "first_layer_weights",
    "first_layer", "attention_output_variance", "theory_variance", "logit_variance_theory",
    "softmax_energy", "corrected_variance", "loglog_slope", "layer_statistics",
    "lemma4_variance", "final_ln_variance", "probe_positions", "trained_lm_variance",
]


def _check_sizes(d_model: int, n_heads: int, seq_len: int, sigma: float) -> None:
    for name, value in (("d_model", d_model), ("n_heads", n_heads), ("seq_len", seq_len)):
        if not isinstance(value, (int, np.integer)) or value < 1:
            raise ValueError(f"{name} must be a positive integer, got {value!r}")
    if d_model < 2:
        raise ValueError("d_model must be at least 2 (LayerNorm needs two entries)")
    if d_model % n_heads:
        raise ValueError(f"d_model ({d_model}) must be divisible by n_heads ({n_heads})")
    if not (isinstance(sigma, (int, float)) and math.isfinite(sigma) and sigma > 0):
        raise ValueError(f"sigma must be a positive number, got {sigma!r}")


def random_nope_model(d_model: int = 768, n_heads: int = 12, n_layers: int = 1,
                      seq_len: int = 512, sigma: float = 0.02, causal: bool = True,
                      seed: int = 0, device: torch.device | str | None = None) -> GPT:
    """A frozen random pre-LN transformer without positional embeddings (weights N(0, σ²)).

    Read its intermediates with ``model.forward_embeddings(x, return_cache=True)``.
    """
    _check_sizes(d_model, n_heads, seq_len, sigma)
    cfg = TransformerConfig(vocab_size=2, d_model=d_model, n_heads=n_heads,
                            n_layers=n_layers, block_size=seq_len, pos_emb=False,
                            causal=causal, init_std=sigma)
    torch.manual_seed(seed)
    model = GPT(cfg).to(device or default_device()).eval()
    for p in model.parameters():
        p.requires_grad_(False)
    return model


def sample_inputs(n: int, seq_len: int, d_model: int, sigma: float,
                  generator: torch.Generator, device: torch.device | str = "cpu") -> Tensor:
    """Random input embeddings, every entry N(0, σ²): (n, T, d)."""
    x = torch.randn(n, seq_len, d_model, generator=generator)
    return (x * sigma).to(device)


def first_layer_weights(d_model: int = 768, sigma: float = 0.02, seed: int = 0,
                        device: torch.device | str = "cpu") -> dict[str, Tensor]:
    """W_Q, W_K, W_V, W_O (each (d, d), acting as x @ W), entries N(0, σ²), from a seed."""
    gen = torch.Generator().manual_seed(seed)
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
    """
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


class _Moments:
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
                     seed: int = 0, device: torch.device | str | None = None,
                     eps: float = 1e-5, progress: bool = False) -> dict[str, Tensor]:
    """Across-sample statistics of one random first layer (frozen weights, fresh inputs).

    Returns, on the CPU, ``attn_out_var`` (T, d): the variance of o_m per dimension;
    ``ln_final_var`` (T, d): the same after the final LayerNorm of x + o;
    ``resid_var`` (T, d); ``mean_weights`` (T, T): attention weights averaged over samples
    and heads; ``score_var`` (T,): the variance of the scaled logits l_mn / sqrt(dh) over
    samples, heads and n <= m; ``qkv_var`` (3,): the mean per-entry variance of q, k, v;
    and ``weights`` (the W_Q, W_K, W_V, W_O used). Chunked over samples.
    """
    _check_sizes(d_model, n_heads, seq_len, sigma)
    if not isinstance(n_samples, int) or n_samples < 2:
        raise ValueError(f"n_samples must be an integer >= 2, got {n_samples!r}")
    device = torch.device(device) if device is not None else default_device()
    weights = first_layer_weights(d_model, sigma, seed, device)
    gen = torch.Generator().manual_seed(seed + 1)
    T = seq_len
    o_m, ln_m, r_m = _Moments(), _Moments(), _Moments()
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
                              seed: int = 0, device: torch.device | str | None = None
                              ) -> Tensor:
    """Variance of the first layer's attention output o_m at each position: (T,).

    One random layer (weights N(0, σ²), fixed by ``seed``), ``n_samples`` random input
    sequences (entries N(0, σ²)); the variance is taken across samples for each dimension
    and then averaged over the d dimensions. Lemma 3 predicts d²σ⁴/m (causal).
    """
    stats = layer_statistics(d_model, n_heads, seq_len, sigma, n_samples, causal, seed,
                             device)
    return stats["attn_out_var"].mean(-1).float()


def theory_variance(d_model: int, sigma: float, seq_len: int, causal: bool = True) -> Tensor:
    """Lemma 3: d²σ⁴/m at positions m = 1..L (d²σ⁴/L everywhere if bidirectional). (T,)."""
    _check_sizes(d_model, 1, seq_len, sigma)
    m = torch.arange(1, seq_len + 1, dtype=torch.float64)
    if not causal:
        m = torch.full_like(m, float(seq_len))
    return (d_model ** 2 * sigma ** 4 / m).float()


def logit_variance_theory(d_model: int, n_heads: int, sigma: float) -> dict[str, float]:
    """Variance of a scaled logit l_mn / sqrt(dh): the paper's Lemma 2 and the direct count.

    q and k have per-entry variance dσ² (Lemma 1), so <q, k> over dh entries has variance
    dh (dσ²)² and the scaled logit (dσ²)² = d²σ⁴. The paper's Lemma 2 states d²σ⁴/H.
    """
    _check_sizes(d_model, n_heads, 1, sigma)
    return {"paper": d_model ** 2 * sigma ** 4 / n_heads, "direct": d_model ** 2 * sigma ** 4}


def softmax_energy(tau2: float, seq_len: int, n_draws: int = 4000, causal: bool = True,
                   seed: int = 0) -> Tensor:
    """m · E[Σ_n a_n²] at each m for a softmax of m i.i.d. N(0, τ²) logits: (T,).

    Uniform weights give exactly 1; Gaussian logits give more: m / (effective number of
    tokens attended). The limit for large m is exp(τ²). Monte Carlo over ``n_draws``.
    """
    if not (math.isfinite(tau2) and tau2 >= 0):
        raise ValueError(f"tau2 must be a non-negative number, got {tau2!r}")
    gen = torch.Generator().manual_seed(seed)
    s = torch.randn(n_draws, seq_len, generator=gen, dtype=torch.float64)
    s = s * math.sqrt(tau2)
    w = torch.exp(s - s.max())
    if causal:
        s1, s2 = w.cumsum(-1), (w * w).cumsum(-1)
        m = torch.arange(1, seq_len + 1, dtype=torch.float64)
        return (m * (s2 / s1 ** 2).mean(0)).float()
    e = (w * w).sum(-1) / w.sum(-1) ** 2
    return torch.full((seq_len,), float(seq_len * e.mean()))


def corrected_variance(d_model: int, sigma: float, seq_len: int, n_heads: int | None = None,
                       causal: bool = True, eps: float = 1e-5, tau2: float | None = None
                       ) -> Tensor:
    """Lemma 3 with the softmax's non-uniformity: d²σ⁴/m · m E[Σ a²] · σ²/(σ² + eps), (T,).

    τ² (the per-query variance of the scaled logits) defaults to d²σ⁴ (the direct count
    of :func:`logit_variance_theory`) times the LN gain squared. The last factor is the
    LayerNorm's epsilon, which
    makes the LN output slightly smaller than unit variance when σ² is small.
    """
    gain = sigma ** 2 / (sigma ** 2 + eps)
    if tau2 is None:  # q and k each carry the LN gain, so the logits carry it squared
        tau2 = logit_variance_theory(d_model, n_heads or 1, sigma)["direct"] * gain ** 2
    return theory_variance(d_model, sigma, seq_len, causal) * softmax_energy(
        tau2, seq_len, causal=causal) * gain


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


def final_ln_variance(stats: dict[str, Tensor]) -> dict[str, Tensor]:
    """Summaries of ``layer_statistics`` for the final LayerNorm: (T,) each.

    ``resid`` mean variance of x + o; ``ln_mean`` mean variance after the LN (about 1: the
    LN erases the overall shrinkage); ``ln_spread`` the standard deviation over dimensions
    of the per-dimension variance after the LN (it shrinks with m: the signal survives).
    """
    ln = stats["ln_final_var"]
    return {"resid": stats["resid_var"].mean(-1).float(), "ln_mean": ln.mean(-1).float(),
            "ln_spread": ln.std(-1).float()}


class _Probes(nn.Module):
    """One two-layer ReLU probe per layer, trained side by side: (K, N, d) -> (K, N, out)."""

    def __init__(self, n_probes: int, d_model: int, hidden: int, n_classes: int):
        super().__init__()
        self.W1 = nn.Parameter(torch.randn(n_probes, d_model, hidden) / math.sqrt(d_model))
        self.b1 = nn.Parameter(torch.zeros(n_probes, 1, hidden))
        self.W2 = nn.Parameter(torch.zeros(n_probes, hidden, n_classes))
        self.b2 = nn.Parameter(torch.full((n_probes, 1, n_classes), 0.5))

    def forward(self, h: Tensor) -> Tensor:
        return torch.relu(h @ self.W1 + self.b1) @ self.W2 + self.b2


def probe_positions(d_model: int = 768, n_heads: int = 12, n_layers: int = 12,
                    seq_len: int = 512, sigma: float = 0.02, causal: bool = True,
                    steps: int = 5000, batch_size: int = 32, lr: float = 1e-3,
                    hidden: int = 256, eval_batches: int = 4, seed: int = 0,
                    device: torch.device | str | None = None, progress: bool = True
                    ) -> dict[str, list]:
    """The position probe of Chi et al. (Figure 2) on a frozen random NoPE transformer.

    For each k = 0..n_layers the representation after k blocks (and the final LayerNorm,
    as the classifier would read it) feeds a two-layer ReLU probe that predicts the
    position m / T, trained with Adam on the absolute error (the quantity reported; the
    paper's appendix describes a classifier). Inputs are fresh random vectors every step,
    so nothing can be memorised. Returns ``layers`` and ``mae`` (mean absolute error
    of the predicted position on held-out batches) and ``baseline`` (always guess the
    middle: about T/4).
    """
    _check_sizes(d_model, n_heads, seq_len, sigma)
    if n_layers < 0 or steps < 1:
        raise ValueError("n_layers must be >= 0 and steps >= 1")
    device = torch.device(device) if device is not None else default_device()
    model = random_nope_model(d_model, n_heads, max(n_layers, 1), seq_len, sigma, causal,
                              seed, device)
    torch.manual_seed(seed + 7)
    probes = _Probes(n_layers + 1, d_model, hidden, 1).to(device)
    opt = torch.optim.Adam(probes.parameters(), lr=lr)
    gen = torch.Generator().manual_seed(seed + 1)
    target = torch.arange(seq_len, device=device)

    @torch.no_grad()
    def features(x: Tensor) -> Tensor:  # (K, N*T, d)
        h = [model.ln_final(x)]
        for block in model.blocks[:n_layers]:
            x = block(x)
            h.append(model.ln_final(x))
        return torch.stack(h).flatten(1, 2)

    for _ in progress_bar(range(steps), desc="probe", disable=not progress):
        h = features(sample_inputs(batch_size, seq_len, d_model, sigma, gen, device))
        pred = probes(h)[..., 0]  # (K, N*T), position / T
        loss = (pred - target.repeat(batch_size) / seq_len).abs().mean()
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
    errors = torch.zeros(n_layers + 1, dtype=torch.float64)
    with torch.no_grad():
        for _ in range(eval_batches):
            h = features(sample_inputs(batch_size, seq_len, d_model, sigma, gen, device))
            pred = (probes(h)[..., 0] * seq_len).round().clamp(0, seq_len - 1)  # (K, N*T)
            errors += (pred - target.repeat(batch_size)).abs().double().mean(-1).cpu()
    mae = (errors / eval_batches).tolist()
    middle = (seq_len - 1) / 2
    baseline = float((torch.arange(seq_len, dtype=torch.float64) - middle).abs().mean())
    return {"layers": list(range(n_layers + 1)), "mae": mae, "baseline": baseline}


@torch.no_grad()
def trained_lm_variance(model: GPT, ids: Tensor, *, n_windows: int, block_size: int,
                        layer: int = 0, seed: int = 0, batch_size: int = 64) -> Tensor:
    """Variance of layer ``layer``'s attention output in a language model: (T,).

    Windows of real text replace the random inputs; the variance is across windows, per
    dimension, averaged over dimensions (as in :func:`attention_output_variance`).
    """
    from .text import sample_batch
    if n_windows < 2:
        raise ValueError("n_windows must be at least 2")
    device = next(model.parameters()).device
    was_training = model.training
    model.eval()
    gen = torch.Generator().manual_seed(seed)
    mom = _Moments()
    done = 0
    while done < n_windows:
        n = min(batch_size, n_windows - done)
        x, _ = sample_batch(ids, n, block_size, gen, device)
        _, _, cache = model(x, return_cache=True)
        mom.add(cache[f"blocks.{layer}.attn_out"].cpu())
        done += n
    model.train(was_training)
    return mom.variance().mean(-1).float()
