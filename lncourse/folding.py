"""Folding LayerNorm into the next linear map (chapter 1; Kamoda et al., 2025).

For LN(x) = P x / sigma(x) * gamma + beta followed by a linear map y = W z + b:

    W LN(x) + b = W' (x / sigma(x)) + b',   W' = W diag(gamma) P,   b' = W beta + b,

with P = I - 11^T/d and sigma(x) = sqrt(var(x) + eps) the standard deviation of the
centred x. TransformerLens calls this ``fold_layer_norm``; ``center_writing_weights`` is
its companion on the writing side. Shapes: x (..., d); W (d_out, d), as in ``nn.Linear``.
"""

from __future__ import annotations

import warnings
from typing import NamedTuple

import torch
from torch import Tensor, nn

from lncourse.attention import attention_scores, split_heads
from lncourse.layernorm import (FactorizedLayerNorm, check_eps, raise_if_degenerate, scaled_rows,
                        projection_matrix, validate_vectors)

__all__ = ["fold_layer_norm", "divide_by_std", "center_writing_weights",
           "folded_attention_scores", "FoldingGaps", "folding_gaps"]


def _ln_parts(ln: nn.Module) -> tuple[int, Tensor | None, Tensor | None, float]:
    if isinstance(ln, nn.LayerNorm):
        if len(ln.normalized_shape) != 1:
            raise ValueError("only LayerNorm over the last axis can be folded")
        return ln.normalized_shape[0], ln.weight, ln.bias, ln.eps
    if isinstance(ln, FactorizedLayerNorm):
        if not (ln.projection and ln.scaling):
            raise ValueError("fold_layer_norm needs a full LayerNorm (projection and "
                             "scaling); this one is a factorised variant")
        return ln.d, ln.weight, ln.bias, ln.eps
    raise TypeError(f"expected nn.LayerNorm or FactorizedLayerNorm, got {type(ln).__name__}")


def _check_linear(linear: nn.Module, what: str) -> None:
    if not isinstance(linear, nn.Linear):
        raise TypeError(f"{what} needs an nn.Linear (weight of shape (d_out, d)), got "
                        f"{type(linear).__name__}; a 1x1 Conv1d or GPT-2's Conv1D (weight "
                        "(d, d_out)) must first be rewritten as an nn.Linear")


def divide_by_std(x: Tensor, eps: float = 0.0) -> Tensor:
    """x / sigma(x) with sigma(x) = sqrt(var(x - mean x) + eps): what the folded map reads.

    x: (..., d) -> (..., d). Note: x itself is *not* centred; the folded weights do the
    centring. They cancel the mean of x / sigma(x) only up to rounding, so a row whose
    mean is huge against its spread (a nearly constant row) gives a ``RuntimeWarning``.
    """
    validate_vectors(x)
    check_eps(eps)
    u, c, m = scaled_rows(x, eps, centre=True)  # x = m u, exactly; no square overflows
    sigma = torch.sqrt((c * c).mean(dim=-1, keepdim=True) + eps / m / m)  # sigma(x) / m
    if eps == 0.0:
        raise_if_degenerate(c, "variance")
    # Relative to the result, the folded weights' rounding error is about
    # eps_mach * |mean| / sigma: warn once that costs more than half the digits.
    ratio = (u.mean(dim=-1, keepdim=True) / sigma).abs()
    limit = torch.finfo(x.dtype).eps ** -0.5
    if bool((ratio > limit).any()):
        warnings.warn(
            f"{int((ratio > limit).sum())} row(s) of x have a mean more than {limit:.0f} "
            "times their standard deviation (nearly constant rows): x / sigma(x) is huge "
            "along 1, and the folded weights cancel that only up to rounding, so more "
            "than half the digits of the result are lost. Centre x first or use eps > 0.",
            RuntimeWarning, stacklevel=2)
    return (u / sigma).to(x.dtype)


@torch.no_grad()
def fold_layer_norm(ln: nn.Module, linear: nn.Linear) -> nn.Linear:
    """A new ``nn.Linear`` with ``linear(ln(x)) == folded(divide_by_std(x, ln.eps))``.

    The LayerNorm's centring, gamma and beta move into the weights: W' = W diag(gamma) P,
    b' = W beta + b. Neither input module is modified.
    """
    d, gamma, beta, _ = _ln_parts(ln)
    _check_linear(linear, "fold_layer_norm")
    if linear.in_features != d:
        raise ValueError(f"the linear map reads {linear.in_features} features but the "
                         f"LayerNorm produces {d}")
    W = linear.weight  # (d_out, d)
    dtype, device = W.dtype, W.device
    for name, p in (("gamma", gamma), ("beta", beta)):
        if p is not None and (p.dtype, p.device) != (dtype, device):
            raise ValueError(f"the LayerNorm's {name} is {p.dtype} on {p.device} but the "
                             f"linear map's weight is {dtype} on {device}; convert one, "
                             f"e.g. ln.to({dtype}) or linear.to({p.dtype})")
    gamma = gamma if gamma is not None else torch.ones(d, dtype=dtype, device=device)
    beta = beta if beta is not None else torch.zeros(d, dtype=dtype, device=device)
    b = linear.bias if linear.bias is not None else torch.zeros(linear.out_features,
                                                                 dtype=dtype, device=device)
    P = projection_matrix(d, dtype=dtype, device=device)
    folded = nn.Linear(d, linear.out_features, bias=True, device=device, dtype=dtype)
    folded.weight.copy_((W * gamma) @ P)  # W diag(gamma) P
    folded.bias.copy_(W @ beta + b)
    return folded


@torch.no_grad()
def center_writing_weights(linear: nn.Linear) -> nn.Linear:
    """A new ``nn.Linear`` whose outputs have mean zero: W' = P W, b' = P b.

    A LayerNorm that reads ``resid + linear(z)`` cannot tell the difference, because it
    projects out the mean anyway.
    """
    _check_linear(linear, "center_writing_weights")
    d = linear.out_features
    P = projection_matrix(d, dtype=linear.weight.dtype, device=linear.weight.device)
    out = nn.Linear(linear.in_features, d, bias=linear.bias is not None,
                    device=linear.weight.device, dtype=linear.weight.dtype)
    out.weight.copy_(P @ linear.weight)
    if linear.bias is not None:
        out.bias.copy_(P @ linear.bias)
    return out


@torch.no_grad()
def folded_attention_scores(ln: nn.Module, W_Q: nn.Linear, W_K: nn.Linear, x: Tensor,
                            n_heads: int, causal: bool = False,
                            key_mask: Tensor | None = None) -> tuple[Tensor, Tensor]:
    """Queries and attention scores from x / sigma(x), with ``ln`` folded into W_Q and W_K.

    x: (B, T, d), the vectors *before* the LayerNorm. Returns q (B, H, T, dh) and the
    scores (B, H, T, T), which equal those computed from ln(x) with the original weights
    (-inf where ``causal`` or ``key_mask`` hides a key).
    """
    x_hat = divide_by_std(x, ln.eps)                                   # (B, T, d)
    q = split_heads(fold_layer_norm(ln, W_Q)(x_hat), n_heads)          # (B, H, T, dh)
    k = split_heads(fold_layer_norm(ln, W_K)(x_hat), n_heads)          # (B, H, T, dh)
    return q, attention_scores(q, k, causal, key_mask)                 # (B, H, T, T)


class FoldingGaps(NamedTuple):
    """Per attention layer: the largest |folded - original| query and score, and the
    largest |score| (what the score's gap is measured against)."""

    queries: list[float]
    scores: list[float]
    score_scales: list[float]


@torch.no_grad()
def folding_gaps(model: nn.Module, cache: dict, mask: Tensor, n_heads: int
                 ) -> FoldingGaps:
    """Fold the LayerNorm each attention layer reads into its W_Q and W_K, recompute the
    queries and scores with :func:`folded_attention_scores`, and compare with the model's.

    model: :class:`lncourse.minilm.MiniLM` (or any model with ``layers[i].W_Q``,
    ``layers[i].W_K`` and ``attn_norm(i)``); cache: its forward pass's cache, holding
    ``layers.{i}.attn_norm_in``, ``layers.{i}.q`` and ``layers.{i}.attn_scores``; mask
    (B, T): True for real tokens, the only ones compared.
    """
    if mask.dim() != 2 or mask.dtype != torch.bool:
        raise ValueError(f"mask must be a boolean tensor (B, T), got {mask.dtype} "
                         f"{tuple(mask.shape)}")
    if not bool(mask.any()):
        raise ValueError("mask holds no real token: nothing to compare")
    valid = mask[:, None, :, None] & mask[:, None, None, :]          # (B, 1, T, T)
    gaps = FoldingGaps([], [], [])
    for i, layer in enumerate(model.layers):
        missing = [k for k in ("attn_norm_in", "q", "attn_scores")
                   if f"layers.{i}.{k}" not in cache]
        if missing:
            raise KeyError(f"the cache has no layers.{i}.{missing[0]}: run the model "
                           "with return_cache=True on the same ids and mask")
        q, scores = folded_attention_scores(model.attn_norm(i), layer.W_Q, layer.W_K,
                                            cache[f"layers.{i}.attn_norm_in"],
                                            n_heads=n_heads, key_mask=mask)
        original = cache[f"layers.{i}.attn_scores"]                    # (B, H, T, T)
        if original.shape != scores.shape:
            raise ValueError(f"layer {i}: the cache's scores are {tuple(original.shape)}, "
                             f"the folded ones {tuple(scores.shape)}: is the mask the "
                             "one the model ran with, and n_heads the model's?")
        keep = valid.expand_as(scores)
        gaps.queries.append(float((q - cache[f"layers.{i}.q"]).abs().max()))
        gaps.scores.append(float((scores - original)[keep].abs().max()))
        gaps.score_scales.append(float(original[keep].abs().max()))
    return gaps
