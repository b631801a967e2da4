"""Today's normalisations as small modules, each in a few lines (chapter 5).

Shapes: (..., d) in, (..., d) out, over the last axis; attention tensors (B, H, T, dh).

- :class:`RMSNorm`: the scaling S without the projection P (LLaMA, Mistral, SmolLM);
- :func:`qk_norm_scores`: an RMSNorm on each head's queries and keys, after W_Q and W_K,
  before their dot product (ViT-22B, OLMo 2, Gemma 3): every key of a head on a sphere;
- :class:`DyT`: γ·tanh(αx) + β, elementwise, with neither P nor S (Zhu et al. 2025);
- :func:`unit` and :class:`NGPTUpdate`: nGPT keeps every hidden vector on the unit sphere
  and moves it toward each sublayer's (normalised) output by a learned step α;
- :class:`PeriLN`: a norm on a sublayer's input and another on its output.
"""

from __future__ import annotations

import math

import torch
from torch import Tensor, nn

from lncourse.transformer import DyT   # the core model's DyT, so trained models use it too

__all__ = ["RMSNorm", "qk_norm_scores", "DyT", "unit", "NGPTUpdate", "PeriLN"]


class RMSNorm(nn.Module):
    """x / sqrt(mean(x²) + eps) · g: on the sphere of radius √d before the gain g."""

    def __init__(self, d: int, eps: float = 1e-6):
        super().__init__()
        self.weight, self.eps = nn.Parameter(torch.ones(d)), eps

    def forward(self, x: Tensor) -> Tensor:
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps) * self.weight


def qk_norm_scores(q: Tensor, k: Tensor, eps: float = 1e-6) -> Tensor:
    """Attention logits with QK-norm: RMSNorm (no gain) on each query and key over the
    head's dh channels, then q·k / √dh. q: (..., Tq, dh), k: (..., Tk, dh) -> (..., Tq, Tk).
    Every normalised key has norm √dh, so it lies on a sphere: each is a vertex of their
    convex hull, and selectable (chapter 2's Theorem 1)."""
    def rms(x: Tensor) -> Tensor:
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps)
    return rms(q) @ rms(k).transpose(-1, -2) / math.sqrt(q.shape[-1])


def unit(x: Tensor, eps: float = 1e-12) -> Tensor:
    """x / ||x||: onto the unit sphere (nGPT's only normalisation)."""
    return x / x.norm(dim=-1, keepdim=True).clamp_min(eps)


class NGPTUpdate(nn.Module):
    """nGPT's residual step: h <- unit(h + α ⊙ (unit(f(h)) - h)), with h on the unit
    sphere and α a learned per-channel step (Loshchilov et al. 2024)."""

    def __init__(self, d: int, alpha: float = 0.05):
        super().__init__()
        self.alpha = nn.Parameter(torch.full((d,), float(alpha)))

    def forward(self, h: Tensor, sublayer_out: Tensor) -> Tensor:
        return unit(h + self.alpha * (unit(sublayer_out) - h))


class PeriLN(nn.Module):
    """x + N_out(F(N_in(x))): Pre-LN's input norm and one more on the sublayer's output."""

    def __init__(self, sublayer: nn.Module, d: int, norm=RMSNorm):
        super().__init__()
        self.sublayer, self.norm_in, self.norm_out = sublayer, norm(d), norm(d)

    def forward(self, x: Tensor) -> Tensor:
        return x + self.norm_out(self.sublayer(self.norm_in(x)))
