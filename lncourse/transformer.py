"""A small GPT-style transformer whose every intermediate can be read (chapters 1, 2, 4).

The normalisation is a :class:`~lncourse.layernorm.FactorizedLayerNorm`, so the same
model runs with full LayerNorm, without projection (RMSNorm), without scaling, or with
none; positional embeddings, the causal mask and Pre-/Post-LN placement are switches.
Dimension names: B batch, T positions, d ``d_model``, H heads, dh = d / H, V vocabulary.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from .layernorm import FactorizedLayerNorm

__all__ = ["NORMS", "TransformerConfig", "make_norm", "Attention", "Block", "GPT"]

# norm name -> (projection, scaling) of FactorizedLayerNorm; "none" is the identity.
NORMS = {
    "layernorm": (True, True),
    "no_scaling": (True, False),
    "no_projection": (False, True),
    "rmsnorm": (False, True),
    "none": None,
}


@dataclass(frozen=True)
class TransformerConfig:
    vocab_size: int
    d_model: int = 8
    n_heads: int = 4
    n_layers: int = 4
    block_size: int = 256          # longest sequence (positional embedding table size)
    pos_emb: bool = True           # False: NoPE, no positional information at the input
    causal: bool = True            # False: bidirectional (BERT-style) attention
    norm: str = "layernorm"        # every norm in the model, see NORMS
    norm_attn: str | None = None   # override for the norm in front of attention only
    placement: str = "pre"         # "pre": x + f(LN(x)); "post": LN(x + f(x))
    final_norm: bool = True        # a norm before the unembedding (pre-LN only)
    init_std: float = 0.02         # every weight ~ N(0, init_std^2), biases 0 (GPT-2 style)
    mlp_ratio: int = 4
    bias: bool = True

    def __post_init__(self):
        if self.d_model % self.n_heads:
            raise ValueError(f"d_model ({self.d_model}) must be divisible by n_heads "
                             f"({self.n_heads})")
        for name in (self.norm, self.norm_attn or self.norm):
            if name not in NORMS:
                raise ValueError(f"unknown norm {name!r}; choose from {sorted(NORMS)}")
        if self.placement not in ("pre", "post"):
            raise ValueError(f"placement must be 'pre' or 'post', got {self.placement!r}")
        if self.init_std <= 0:
            raise ValueError(f"init_std must be positive, got {self.init_std}")


def make_norm(name: str, d: int) -> nn.Module:
    """The norm called ``name`` (a key of :data:`NORMS`) as a module, with affine γ, β."""
    flags = NORMS[name]
    if flags is None:
        return nn.Identity()
    return FactorizedLayerNorm(d, projection=flags[0], scaling=flags[1])


class Attention(nn.Module):
    """Multi-head self-attention with separate W_Q, W_K, W_V, W_O (as in the prose)."""

    def __init__(self, cfg: TransformerConfig):
        super().__init__()
        d = cfg.d_model
        self.n_heads, self.causal = cfg.n_heads, cfg.causal
        self.W_Q = nn.Linear(d, d, bias=cfg.bias)
        self.W_K = nn.Linear(d, d, bias=cfg.bias)
        self.W_V = nn.Linear(d, d, bias=cfg.bias)
        self.W_O = nn.Linear(d, d, bias=cfg.bias)

    def forward(self, x: Tensor, cache: dict | None = None, prefix: str = "") -> Tensor:
        B, T, d = x.shape
        H = self.n_heads
        dh = d // H
        q = self.W_Q(x).view(B, T, H, dh).transpose(1, 2)  # (B, H, T, dh)
        k = self.W_K(x).view(B, T, H, dh).transpose(1, 2)
        v = self.W_V(x).view(B, T, H, dh).transpose(1, 2)
        if cache is None:
            z = F.scaled_dot_product_attention(q, k, v, is_causal=self.causal)
        else:
            scores = q @ k.transpose(-2, -1) / math.sqrt(dh)  # (B, H, T, T)
            if self.causal:
                mask = torch.ones(T, T, dtype=torch.bool, device=x.device).tril()
                scores = scores.masked_fill(~mask, float("-inf"))
            weights = scores.softmax(dim=-1)
            z = weights @ v  # (B, H, T, dh)
            cache.update({f"{prefix}q": q, f"{prefix}k": k, f"{prefix}v": v,
                          f"{prefix}attn_scores": scores, f"{prefix}attn_weights": weights,
                          f"{prefix}z": z})
        return self.W_O(z.transpose(1, 2).reshape(B, T, d))


class Block(nn.Module):
    def __init__(self, cfg: TransformerConfig):
        super().__init__()
        d = cfg.d_model
        self.placement = cfg.placement
        self.ln1 = make_norm(cfg.norm_attn or cfg.norm, d)
        self.attn = Attention(cfg)
        self.ln2 = make_norm(cfg.norm, d)
        self.mlp = nn.Sequential(nn.Linear(d, cfg.mlp_ratio * d, bias=cfg.bias), nn.GELU(),
                                 nn.Linear(cfg.mlp_ratio * d, d, bias=cfg.bias))

    def forward(self, x: Tensor, cache: dict | None = None, prefix: str = "") -> Tensor:
        c = cache is not None
        if c:
            cache[f"{prefix}resid_pre"] = x
        if self.placement == "pre":
            ln1 = self.ln1(x)
            attn_in = ln1
            attn_out = self.attn(attn_in, cache, prefix)
            resid_mid = x + attn_out
            ln2 = self.ln2(resid_mid)
            mlp_out = self.mlp(ln2)
            out = resid_mid + mlp_out
        else:  # post-LN: the attention reads the previous block's (normalised) output
            attn_in = x
            attn_out = self.attn(attn_in, cache, prefix)
            ln1 = resid_mid = self.ln1(x + attn_out)
            mlp_out = self.mlp(resid_mid)
            ln2 = out = self.ln2(resid_mid + mlp_out)
        if c:
            cache.update({f"{prefix}ln1": ln1, f"{prefix}attn_in": attn_in,
                          f"{prefix}attn_out": attn_out, f"{prefix}resid_mid": resid_mid,
                          f"{prefix}ln2": ln2, f"{prefix}mlp_out": mlp_out,
                          f"{prefix}resid_post": out})
        return out


class GPT(nn.Module):
    """Token (and optionally position) embeddings, ``n_layers`` blocks, tied unembedding."""

    def __init__(self, cfg: TransformerConfig):
        super().__init__()
        self.cfg = cfg
        self.W_E = nn.Embedding(cfg.vocab_size, cfg.d_model)
        self.W_pos = nn.Embedding(cfg.block_size, cfg.d_model) if cfg.pos_emb else None
        self.blocks = nn.ModuleList(Block(cfg) for _ in range(cfg.n_layers))
        use_final = cfg.final_norm and cfg.placement == "pre"
        self.ln_final = make_norm(cfg.norm, cfg.d_model) if use_final else nn.Identity()
        self.W_U = nn.Linear(cfg.d_model, cfg.vocab_size, bias=False)
        self.W_U.weight = self.W_E.weight  # tied, as in GPT-2
        self.apply(self._init)

    def _init(self, module: nn.Module) -> None:
        if isinstance(module, (nn.Linear, nn.Embedding)):
            nn.init.normal_(module.weight, mean=0.0, std=self.cfg.init_std)
            if getattr(module, "bias", None) is not None:
                nn.init.zeros_(module.bias)

    def forward_embeddings(self, x: Tensor, return_cache: bool = False
                           ) -> tuple[Tensor, dict | None]:
        """Run the blocks and the final norm on given vectors x: (B, T, d) -> (B, T, d)."""
        if x.dim() != 3 or x.shape[-1] != self.cfg.d_model:
            raise ValueError(f"expected input of shape (B, T, {self.cfg.d_model}), "
                             f"got {tuple(x.shape)}")
        cache = {} if return_cache else None
        for i, block in enumerate(self.blocks):
            x = block(x, cache, f"blocks.{i}.")
        x = self.ln_final(x)
        if cache is not None:
            cache["ln_final"] = x
        return x, cache

    def forward(self, idx: Tensor, targets: Tensor | None = None, return_cache: bool = False
                ) -> tuple[Tensor, Tensor | None, dict | None]:
        """idx: (B, T) token ids -> logits (B, T, V), mean cross-entropy loss, cache."""
        if idx.dim() != 2 or idx.dtype != torch.long:
            raise ValueError(f"idx must be a LongTensor of shape (B, T), got "
                             f"{idx.dtype} {tuple(idx.shape)}")
        T = idx.shape[1]
        if self.W_pos is not None and T > self.cfg.block_size:
            raise ValueError(f"sequence length {T} exceeds block_size {self.cfg.block_size}")
        x = self.W_E(idx)  # (B, T, d)
        if self.W_pos is not None:
            x = x + self.W_pos(torch.arange(T, device=idx.device))
        h, cache = self.forward_embeddings(x, return_cache)
        if cache is not None:
            cache["embed"] = x
        logits = self.W_U(h)  # (B, T, V)
        loss = None
        if targets is not None:
            loss = F.cross_entropy(logits.flatten(0, 1), targets.flatten())
        return logits, loss, cache
