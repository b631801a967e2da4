"""Folding LayerNorm into the next linear map (chapter 1; Kamoda et al., 2025).

For LN(x) = P x / sigma(x) * gamma + beta followed by a linear map y = W z + b:

    W LN(x) + b = W' (x / sigma(x)) + b',   W' = W diag(gamma) P,   b' = W beta + b,

with P = I - 11^T/d and sigma(x) = sqrt(var(x) + eps) the standard deviation of the
centred x. TransformerLens calls this ``fold_layer_norm``; ``center_writing_weights`` is
its companion on the writing side.
"""

from __future__ import annotations

import torch
from torch import Tensor, nn

from .layernorm import FactorizedLayerNorm, projection_matrix, validate_vectors

__all__ = ["fold_layer_norm", "divide_by_std", "center_writing_weights"]


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


def divide_by_std(x: Tensor, eps: float = 0.0) -> Tensor:
    """x / sigma(x) with sigma(x) = sqrt(var(x - mean x) + eps): what the folded map reads.

    Note: x itself is *not* centred; the folded weights do the centring.
    """
    validate_vectors(x)
    centred = x - x.mean(dim=-1, keepdim=True)
    var = (centred * centred).mean(dim=-1, keepdim=True)
    if eps == 0.0 and bool((var == 0).any()):
        raise ValueError("a row has zero variance and eps=0: x / sigma(x) is undefined")
    return x / torch.sqrt(var + eps)


@torch.no_grad()
def fold_layer_norm(ln: nn.Module, linear: nn.Linear) -> nn.Linear:
    """A new ``nn.Linear`` with ``linear(ln(x)) == folded(divide_by_std(x, ln.eps))``.

    The LayerNorm's centring, gamma and beta move into the weights: W' = W diag(gamma) P,
    b' = W beta + b. Neither input module is modified.
    """
    d, gamma, beta, _ = _ln_parts(ln)
    if linear.in_features != d:
        raise ValueError(f"the linear map reads {linear.in_features} features but the "
                         f"LayerNorm produces {d}")
    W = linear.weight  # (out, d)
    dtype, device = W.dtype, W.device
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
    d = linear.out_features
    P = projection_matrix(d, dtype=linear.weight.dtype, device=linear.weight.device)
    out = nn.Linear(linear.in_features, d, bias=linear.bias is not None,
                    device=linear.weight.device, dtype=linear.weight.dtype)
    out.weight.copy_(P @ linear.weight)
    if linear.bias is not None:
        out.bias.copy_(P @ linear.bias)
    return out
