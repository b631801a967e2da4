"""Multi-head scaled dot-product attention, written out once for every model of the course.

The small GPT (:mod:`lncourse.transformer`), all-MiniLM-L6-v2 (:mod:`lncourse.minilm`)
and chapter 4's first layer all compute attention here, step by step in the style of
nanoGPT's ``CausalSelfAttention``: project to queries, keys and values, split into heads,
score, mask, softmax, average the values, merge the heads, project out.

The average of the values is always PyTorch's fused ``F.scaled_dot_product_attention``
(fast, and it never stores the (B, H, T, T) weights). The scores and weights are
computed, written out, only when asked for (``pattern=True``, which the models do when
they fill a cache): asking changes what is returned, never the output.

Dimension names, the same across ``lncourse``: B batch (sequences), T positions,
d ``d_model``, H heads, dh = d / H per head, V vocabulary, L layers; ``d_out`` is the
output size of a linear map whose input has d entries.
"""

from __future__ import annotations

import math
from typing import Callable

import torch
import torch.nn.functional as F
from torch import Tensor

__all__ = ["split_heads", "merge_heads", "allowed_keys", "attention_scores",
           "attention_pattern", "attend", "self_attention"]

Projection = Callable[[Tensor], Tensor]  # (B, T, d) -> (B, T, d): nn.Linear, or e @ W


def split_heads(x: Tensor, n_heads: int) -> Tensor:
    """(B, T, d) -> (B, H, T, dh): head h reads entries h*dh .. (h+1)*dh - 1."""
    B, T, d = x.shape
    return x.view(B, T, n_heads, d // n_heads).transpose(1, 2)


def merge_heads(z: Tensor) -> Tensor:
    """(B, H, T, dh) -> (B, T, d): the heads side by side, as W_O reads them."""
    B, H, T, dh = z.shape
    return z.transpose(1, 2).reshape(B, T, H * dh)


def allowed_keys(T: int, causal: bool = False, key_mask: Tensor | None = None,
                 device: torch.device | str | None = None) -> Tensor | None:
    """Which keys each query may read: bool (1 or B, 1, T, T), or None when every key.

    ``causal``: query m reads keys n <= m. ``key_mask``: bool (B, T), False for keys no
    query may read (padding). Raises ``ValueError`` if some query could read no key at
    all: its softmax would be 0/0, NaN.
    """
    allowed = None
    if causal:
        allowed = torch.ones(T, T, dtype=torch.bool, device=device).tril()[None, None]
    if key_mask is not None:
        if key_mask.dtype != torch.bool or key_mask.dim() != 2 or key_mask.shape[1] != T:
            raise ValueError(f"key_mask must be a bool tensor of shape (B, {T}), got "
                             f"{key_mask.dtype} {tuple(key_mask.shape)}")
        keys = key_mask[:, None, None, :]                                  # (B, 1, 1, T)
        allowed = keys if allowed is None else allowed & keys              # (B, 1, T, T)
        blind = ~allowed.any(dim=-1)                                       # (B, 1, T)
        if blind.any():
            b, _, m = (int(i) for i in blind.nonzero()[0])
            raise ValueError(
                f"sequence {b}: query position {m} may attend to no key (every key it "
                "could read is masked out), so its attention weights would be NaN. A "
                "sequence needs at least one True in its attention mask"
                + (", and with a causal mask its first position must be True" if causal
                   else "") + ".")
    return allowed


def attention_scores(q: Tensor, k: Tensor, causal: bool = False,
                     key_mask: Tensor | None = None) -> Tensor:
    """q k^T / sqrt(dh), -inf where a key may not be read: q, k (B, H, T, dh) -> (B, H, T, T)."""
    dh = q.shape[-1]
    scores = q @ k.transpose(-2, -1) / math.sqrt(dh)                       # (B, H, T, T)
    allowed = allowed_keys(q.shape[-2], causal, key_mask, q.device)
    if allowed is not None:
        scores = scores.masked_fill(~allowed, float("-inf"))
    return scores


def attention_pattern(q: Tensor, k: Tensor, causal: bool = False,
                      key_mask: Tensor | None = None) -> tuple[Tensor, Tensor]:
    """The scores and the attention weights: q, k (B, H, T, dh) -> two (B, H, T, T).

    scores = q k^T / sqrt(dh), -inf where a key may not be read; weights = softmax of the
    scores over the keys (each row sums to 1, masked keys get 0).
    """
    scores = attention_scores(q, k, causal, key_mask)                      # (B, H, T, T)
    return scores, scores.softmax(dim=-1)                                  # (B, H, T, T)


def attend(q: Tensor, k: Tensor, v: Tensor, causal: bool = False,
           key_mask: Tensor | None = None) -> Tensor:
    """z = softmax(q k^T / sqrt(dh) + mask) v per head: q, k, v (B, H, T, dh) -> (B, H, T, dh).

    Equals ``attention_pattern(q, k, causal, key_mask)[1] @ v`` (a test checks it),
    computed by PyTorch's fused kernel. key_mask: bool (B, T), False for keys to ignore.
    """
    if key_mask is None:  # the causal mask needs no tensor: the kernel knows it
        return F.scaled_dot_product_attention(q, k, v, is_causal=causal)
    allowed = allowed_keys(q.shape[-2], causal, key_mask, q.device)       # (B, 1, T, T)
    return F.scaled_dot_product_attention(q, k, v, attn_mask=allowed)


def self_attention(x: Tensor, W_Q: Projection, W_K: Projection, W_V: Projection,
                   W_O: Projection, n_heads: int, causal: bool = False,
                   key_mask: Tensor | None = None, pattern: bool = False
                   ) -> dict[str, Tensor]:
    """Multi-head self-attention of x: (B, T, d), with its intermediates.

    W_Q, W_K, W_V, W_O map (B, T, d) -> (B, T, d): ``nn.Linear`` modules, or
    ``lambda e: e @ W`` for weights in the x @ W convention. Returns ``q``, ``k``, ``v``
    (B, H, T, dh), ``z`` (B, H, T, dh), ``attn_out`` (B, T, d) and, with ``pattern``,
    ``attn_scores`` and ``attn_weights`` (B, H, T, T). ``attn_out`` does not depend on
    ``pattern``.
    """
    if x.dim() != 3 or x.shape[-1] % n_heads:
        raise ValueError(f"x must have shape (B, T, d) with d divisible by n_heads = "
                         f"{n_heads}, got {tuple(x.shape)}")
    q = split_heads(W_Q(x), n_heads)                                       # (B, H, T, dh)
    k = split_heads(W_K(x), n_heads)                                       # (B, H, T, dh)
    v = split_heads(W_V(x), n_heads)                                       # (B, H, T, dh)
    z = attend(q, k, v, causal, key_mask)                                  # (B, H, T, dh)
    attn_out = W_O(merge_heads(z))                                         # (B, T, d)
    out = {"q": q, "k": k, "v": v, "z": z, "attn_out": attn_out}
    if pattern:
        out["attn_scores"], out["attn_weights"] = attention_pattern(q, k, causal, key_mask)
    return out
