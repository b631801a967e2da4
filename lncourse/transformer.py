"""A small GPT-style transformer whose every intermediate can be read (chapters 1, 2, 4).

The normalisation is a :class:`~lncourse.layernorm.FactorizedLayerNorm`, so the same
model runs with full LayerNorm, without projection (RMSNorm), without scaling, or with
none; or DyT (γ·tanh(αx) + β, chapter 5). QK-norm (an RMSNorm with a learned gain on each
head's queries and keys, chapter 5), positional embeddings, the causal mask and
Pre-/Post-LN placement are switches.
Attention is :func:`lncourse.attention.self_attention`, shared with MiniLM.
Dimension names (as in :mod:`lncourse.attention`): B batch, T positions, d ``d_model``,
H heads, dh = d / H, V vocabulary.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from lncourse.attention import self_attention
from lncourse.layernorm import (  # noqa: F401  (the model names its norms there)
    NORMS, NORM_ALIASES, DyT, HeadRMSNorm, make_norm)

__all__ = ["NORMS", "TransformerConfig", "DyT", "HeadRMSNorm", "make_norm", "Attention",
           "Block", "GPT"]

# norm name -> (projection, scaling) of FactorizedLayerNorm; "none" is the identity.
# One name per norm: LayerNorm without projection *is* RMSNorm (chapter 1).
@dataclass(frozen=True)
class TransformerConfig:
    """Everything that defines a :class:`GPT`; checked on creation."""

    vocab_size: int
    d_model: int = 8
    n_heads: int = 4
    n_layers: int = 4
    block_size: int = 256          # longest sequence (positional embedding table size)
    pos_emb: bool = True           # False: NoPE, no positional information at the input
    causal: bool = True            # False: bidirectional (BERT-style) attention
    norm: str = "layernorm"        # every norm in the model, see NORMS
    norm_attn: str | None = None   # override for the norm in front of attention only
    placement: str = "pre"         # "pre": x + f(LN(x)); "post": LN(x + f(x));
                                   # "peri": x + LN_out(f(LN(x))) (Peri-LN, chapter 5)
    final_norm: bool = True        # a norm before the unembedding (Pre- and Peri-LN only)
    init_std: float = 0.02         # every weight ~ N(0, init_std^2), biases 0 (GPT-2 style)
    mlp_ratio: int = 4
    bias: bool = True
    qk_norm: bool = False          # RMSNorm (learned gain, per head) on queries and keys
    dyt_alpha: float = 0.5         # DyT's initial alpha (Zhu et al.: 0.5 for LLMs' others)
    dyt_beta: bool = True          # DyT's shift beta (False: gamma * tanh(alpha x), as in
                                   # the released LLaMA code of Zhu et al.)
    emb_scale: float | None = None  # a learned scalar on the input embeddings, started
                                    # here (the released LLaMA-DyT code's, at sqrt(d))

    def __post_init__(self):
        if self.d_model % self.n_heads:
            raise ValueError(f"d_model ({self.d_model}) must be divisible by n_heads "
                             f"({self.n_heads})")
        for name in (self.norm, self.norm_attn or self.norm):
            if name in NORM_ALIASES:
                raise ValueError(f"norm {name!r} is called {NORM_ALIASES[name]!r} here "
                                 "(LayerNorm without projection is RMSNorm)")
            if name not in NORMS:
                raise ValueError(f"unknown norm {name!r}; choose from {sorted(NORMS)}")
        if self.placement not in ("pre", "post", "peri"):
            raise ValueError("placement must be 'pre', 'post' or 'peri', got "
                             f"{self.placement!r}")
        if self.init_std <= 0:
            raise ValueError(f"init_std must be positive, got {self.init_std}")
        if self.emb_scale is not None and not 0 < self.emb_scale < float("inf"):
            raise ValueError(f"emb_scale must be None or finite and positive, got "
                             f"{self.emb_scale}")


def _norm_of(cfg: TransformerConfig, name: str) -> nn.Module:
    return make_norm(name, cfg.d_model, cfg.dyt_alpha, cfg.dyt_beta)


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
        if cfg.qk_norm:
            self.q_norm = HeadRMSNorm(cfg.n_heads, d // cfg.n_heads)
            self.k_norm = HeadRMSNorm(cfg.n_heads, d // cfg.n_heads)

    def forward(self, x: Tensor, cache: dict | None = None, prefix: str = "") -> Tensor:
        """Attention output W_O(softmax(q k^T / sqrt(dh) + mask) v): (B, T, d) -> (B, T, d).

        With a ``cache`` dict, also stores under ``prefix``: ``q``, ``k``, ``v``
        (B, H, T, dh), ``attn_scores`` (-inf where masked) and ``attn_weights``
        (B, H, T, T), ``z`` (B, H, T, dh). The output is the same with or without it: the
        cache only adds the written-out scores and weights.
        """
        W_Q, W_K = self.W_Q, self.W_K
        if hasattr(self, "k_norm"):     # QK-norm: q and k (so the cache's) normalised
            W_Q, W_K = (lambda e: self.q_norm(self.W_Q(e))), (lambda e: self.k_norm(self.W_K(e)))
        parts = self_attention(x, W_Q, W_K, self.W_V, self.W_O, self.n_heads,
                               causal=self.causal, pattern=cache is not None)
        if cache is not None:
            cache.update({f"{prefix}{name}": t for name, t in parts.items()
                          if name != "attn_out"})
        return parts["attn_out"]


class Block(nn.Module):
    """One transformer block: attention and MLP, each with a norm and a residual.

    Pre-LN:  resid_mid = x + attn(ln1(x));          out = resid_mid + mlp(ln2(resid_mid))
    Post-LN: resid_mid = x + attn(x);  h = ln1(resid_mid);  out = ln2(h + mlp(h))
    Peri-LN: resid_mid = x + ln1_out(attn(ln1(x)));
             out = resid_mid + ln2_out(mlp(ln2(resid_mid)))
    (Peri-LN, Kim et al. 2025: Pre-LN plus a norm on each sublayer's output, so what a
    sublayer adds to the stream has a norm bounded by its output norm's γ and β.)

    ``forward(x, cache, prefix)``: x (B, T, d) -> (B, T, d). With a ``cache`` dict it
    stores, under ``prefix``, the attention's intermediates (see :class:`Attention`) and
    these (B, T, d) tensors, each meaning the same in both placements:

    ``resid_pre``  the block's input x
    ``ln1``        the output of the first norm (Pre-LN: of x; Post-LN: of resid_mid)
    ``attn_in``    what the attention reads (Pre-LN: ``ln1``; Post-LN: x)
    ``attn_out``   the attention's output (Peri-LN: after its output norm, what is added)
    ``resid_mid``  x + attn_out, the residual stream after attention, before any norm
    ``mlp_in``     what the MLP reads (Pre-LN: ``ln2``; Post-LN: ``ln1``)
    ``mlp_out``    the MLP's output (Peri-LN: after its output norm, what is added)
    ``ln2``        the output of the second norm (Post-LN: the block's output)
    ``resid_post`` the block's output
    """

    def __init__(self, cfg: TransformerConfig):
        super().__init__()
        d = cfg.d_model
        self.placement = cfg.placement
        self.ln1 = _norm_of(cfg, cfg.norm_attn or cfg.norm)
        self.attn = Attention(cfg)
        self.ln2 = _norm_of(cfg, cfg.norm)
        self.mlp = nn.Sequential(nn.Linear(d, cfg.mlp_ratio * d, bias=cfg.bias), nn.GELU(),
                                 nn.Linear(cfg.mlp_ratio * d, d, bias=cfg.bias))
        if cfg.placement == "peri":     # the output norms draw no random numbers: a Peri-LN
            # model shares every other weight with the Pre-LN model of the same seed
            self.ln1_out = _norm_of(cfg, cfg.norm_attn or cfg.norm)
            self.ln2_out = _norm_of(cfg, cfg.norm)

    def forward(self, x: Tensor, cache: dict | None = None, prefix: str = "") -> Tensor:
        if self.placement in ("pre", "peri"):
            peri = self.placement == "peri"
            ln1 = attn_in = self.ln1(x)
            attn_out = self.attn(attn_in, cache, prefix)
            if peri:
                attn_out = self.ln1_out(attn_out)
            resid_mid = x + attn_out
            ln2 = mlp_in = self.ln2(resid_mid)
            mlp_out = self.mlp(mlp_in)
            if peri:
                mlp_out = self.ln2_out(mlp_out)
            out = resid_mid + mlp_out
        else:  # post-LN: the attention reads the previous block's (normalised) output
            attn_in = x
            attn_out = self.attn(attn_in, cache, prefix)
            resid_mid = x + attn_out
            ln1 = mlp_in = self.ln1(resid_mid)
            mlp_out = self.mlp(mlp_in)
            ln2 = out = self.ln2(ln1 + mlp_out)
        if cache is not None:
            cache.update({f"{prefix}{name}": t for name, t in [
                ("resid_pre", x), ("ln1", ln1), ("attn_in", attn_in), ("attn_out", attn_out),
                ("resid_mid", resid_mid), ("mlp_in", mlp_in), ("mlp_out", mlp_out),
                ("ln2", ln2), ("resid_post", out)]})
        return out


class GPT(nn.Module):
    """Token (and optionally position) embeddings, ``n_layers`` blocks, tied unembedding."""

    def __init__(self, cfg: TransformerConfig):
        super().__init__()
        self.cfg = cfg
        self.W_E = nn.Embedding(cfg.vocab_size, cfg.d_model)
        self.W_pos = nn.Embedding(cfg.block_size, cfg.d_model) if cfg.pos_emb else None
        self.blocks = nn.ModuleList(Block(cfg) for _ in range(cfg.n_layers))
        use_final = cfg.final_norm and cfg.placement in ("pre", "peri")
        self.ln_final = _norm_of(cfg, cfg.norm) if use_final \
            else nn.Identity()
        self.W_U = nn.Linear(cfg.d_model, cfg.vocab_size, bias=False)
        self.W_U.weight = self.W_E.weight  # tied, as in GPT-2
        self.emb_scale = None if cfg.emb_scale is None else \
            nn.Parameter(torch.tensor(float(cfg.emb_scale)))
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
        """idx: (B, T) token ids -> logits (B, T, V), mean cross-entropy loss, cache.

        The cache (with ``return_cache``) holds ``embed`` (B, T, d), the token plus
        position embeddings; ``blocks.{i}.<name>`` for every name :class:`Block` lists;
        and ``ln_final`` (B, T, d), what the unembedding reads.
        """
        if idx.dim() != 2 or idx.dtype != torch.long:
            raise ValueError(f"idx must be a LongTensor of shape (B, T), got "
                             f"{idx.dtype} {tuple(idx.shape)}")
        T = idx.shape[1]
        if self.W_pos is not None and T > self.cfg.block_size:
            raise ValueError(f"sequence length {T} exceeds block_size {self.cfg.block_size}")
        x = self.W_E(idx)  # (B, T, d)
        if self.W_pos is not None:
            x = x + self.W_pos(torch.arange(T, device=idx.device))
        if self.emb_scale is not None:
            x = x * self.emb_scale
        h, cache = self.forward_embeddings(x, return_cache)
        if cache is not None:
            cache["embed"] = x
        logits = self.W_U(h)  # (B, T, V)
        loss = None
        if targets is not None:
            loss = F.cross_entropy(logits.flatten(0, 1), targets.flatten())
        return logits, loss, cache
