"""What a normalisation meets in a real model: statistics of the vectors a norm reads.

Every function takes the vectors one norm reads in one passage, ``h`` of shape (T, d)
(T tokens, d channels), and returns one number per passage or per token. Chapter 5
averages them over passages, with confidence intervals across passages.

- the angle to the all-ones direction 1, against the chance level of an isotropic vector
  (Gupta et al. claim that trained models already keep h ⟂ 1, which would make the
  projection P redundant; an isotropic vector is already nearly ⟂ 1 in high dimension);
- the same angle to random directions, which says whether 1 is special at all;
- the per-token scale rms(h_t) that the scaling S divides by, and how spread it is;
- the massive activation: a few channels of one token far above everything else;
- whether the norm's map from one channel's input to its output, across tokens, bends
  like tanh (the S-shape that motivates DyT) or stays a straight line, with every token
  and without token 0 (whose massive activation alone can bend it).
"""

from __future__ import annotations

import math

import torch
from torch import Tensor

from lncourse.layernorm import abs_cos_ones   # the core's (chapter 1 measures it too)

__all__ = ["abs_cos_ones", "chance_abs_cos", "abs_cos_random", "token_rms", "rms_spread",
           "massive_ratio", "saturation", "passage_stats", "STATS"]


def chance_abs_cos(d: int) -> float:
    """E|cos(u, 1)| for a direction u uniform on the sphere in d dimensions, exactly:
    Γ(d/2) / (√π Γ((d+1)/2)); about √(2/(πd)) for large d."""
    if not isinstance(d, int) or d < 1:
        raise ValueError(f"d must be a positive integer, got {d!r}")
    return math.exp(math.lgamma(d / 2) - math.lgamma((d + 1) / 2)) / math.sqrt(math.pi)


def abs_cos_random(h: Tensor, n_directions: int = 64, seed: int = 0) -> Tensor:
    """|cos(h_t, u)| averaged over ``n_directions`` random unit directions u: (T, d) -> (T,).

    The directions depend only on (d, seed), so every passage and layer meets the same ones.
    """
    g = torch.Generator().manual_seed(seed)
    u = torch.randn(h.shape[-1], n_directions, generator=g, dtype=torch.float64)
    u = (u / u.norm(dim=0)).to(h.dtype)
    return ((h @ u).abs() / h.norm(dim=-1, keepdim=True)).mean(-1)


def token_rms(h: Tensor) -> Tensor:
    """The scale RMSNorm divides each token by, sqrt(mean_c h_tc²): (T, d) -> (T,)."""
    return h.pow(2).mean(-1).sqrt()


def rms_spread(h: Tensor) -> float:
    """How unequal the tokens' scales are: std / mean of rms(h_t) over tokens 1..T-1
    (token 0 is left out: it holds the massive activation)."""
    r = token_rms(h[1:])
    return float(r.std() / r.mean())


def massive_ratio(h: Tensor, token: int = 0) -> float:
    """max_c |h_{token,c}| over the median |h_tc| of the whole passage."""
    return float(h[token].abs().max() / h.abs().median())


def saturation(h: Tensor, outer: float = 0.1) -> float:
    """Does the norm's per-channel map bend (an S-shape) across tokens? (T, d) -> a number.

    For each channel c, y_c = h_c / rms(h) is what RMSNorm outputs before its gain (the
    gain only rescales the channel). We fit a slope through the origin of y_c against
    h_c on the tokens whose |h_c| is at most the channel's median, and another on the
    ``outer`` fraction with the largest |h_c|. Their ratio (outer / inner) is 1 for a
    straight line and below 1 when the largest inputs are squashed, as tanh squashes
    them. Returns the median ratio over channels.
    """
    T = h.shape[0]
    y = h / token_rms(h)[:, None]
    order = h.abs().argsort(dim=0)                                    # (T, d) per channel
    n_out = max(1, int(round(outer * T)))
    inner, top = order[: (T + 1) // 2], order[T - n_out:]

    def slope(rows: Tensor) -> Tensor:
        x, yy = h.gather(0, rows), y.gather(0, rows)
        return (x * yy).sum(0) / (x * x).sum(0).clamp_min(1e-30)
    return float((slope(top) / slope(inner)).median())


def passage_stats(h: Tensor, n_directions: int = 64) -> dict[str, float]:
    """Every statistic of one norm's input in one passage (token 0 apart where it matters)."""
    h = h.double()
    rest = h[1:]
    return {"abs_cos_ones": float(abs_cos_ones(rest).mean()),
            "abs_cos_ones_token0": float(abs_cos_ones(h[:1])[0]),
            "abs_cos_random": float(abs_cos_random(rest, n_directions).mean()),
            "cos2_ones": float(abs_cos_ones(rest).pow(2).mean()),
            "norm": float(rest.norm(dim=-1).mean()),
            "norm_token0": float(h[0].norm()),
            "rms_spread": rms_spread(h),
            "massive_token0": massive_ratio(h, 0),
            "massive_rest": float(rest.abs().max() / h.abs().median()),
            "saturation": saturation(h),
            "saturation_rest": saturation(rest)}


STATS = ("abs_cos_ones", "abs_cos_ones_token0", "abs_cos_random", "cos2_ones", "norm",
         "norm_token0", "rms_spread", "massive_token0", "massive_rest", "saturation",
         "saturation_rest")
