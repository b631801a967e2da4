"""Does the 1/m shrinkage survive training? A small NoPE language model (chapter 4).

Chi et al. (2023) report that the variance shrinkage persists in a pretrained NoPE model.
Here a small character-level NoPE GPT is trained on Shakespeare, and the variance of its
layer-0 attention output across windows of real text is measured before and after.
Shapes: a token stream (N,); windows (B, T); the variance per position (T,).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

import torch
from torch import Tensor

from lncourse.lm import train_lm
from lncourse.modes import scaled
from lncourse.nope.variance import Moments
from lncourse.rng import check_seed, generator, seeded
from lncourse.text import CharTokenizer, load_shakespeare, sample_batch, split_ids
from lncourse.transformer import GPT, TransformerConfig

__all__ = ["NoPELMConfig", "trained_lm_variance", "train_nope_lm"]


@dataclass(frozen=True)
class NoPELMConfig:
    """The trained NoPE model: size, training, and how many windows measure it."""

    d_model: int = 256
    n_heads: int = 8
    n_layers: int = 4
    block_size: int = 256
    steps: int = 3000
    batch_size: int = 32
    lr: float = 3e-3
    windows: int = 256          # text windows for the variance across windows
    eval_batches: int = 8       # batches per loss evaluation (5 evaluations per run)
    seed: int = 0

    @classmethod
    def paper(cls) -> "NoPELMConfig":
        """A larger model trained longer (the paper's is 162M parameters, 50,000 steps)."""
        return cls()

    @classmethod
    def quick(cls) -> "NoPELMConfig":
        """d = 64, 2 layers, windows of 64 characters, 300 steps."""
        return cls(d_model=64, n_heads=4, n_layers=2, block_size=64, steps=300,
                   batch_size=16)

    def scaled(self, scale: float) -> "NoPELMConfig":
        """Steps, batch, evaluation batches and measured windows multiplied by ``scale``
        (at least 2, 4, 1 and 2), see :mod:`lncourse.modes`; the model is unchanged."""
        return dataclasses.replace(self, steps=scaled(self.steps, scale, 2),
                                   batch_size=scaled(self.batch_size, scale, 4),
                                   eval_batches=scaled(self.eval_batches, scale, 1),
                                   windows=scaled(self.windows, scale, 2))


@torch.no_grad()
def trained_lm_variance(model: GPT, ids: Tensor, *, n_windows: int, block_size: int,
                        layer: int = 0, seed: int = 0, batch_size: int = 64) -> Tensor:
    """Variance of layer ``layer``'s attention output in a language model: (T,).

    Windows (n_windows, block_size) of the token stream ``ids`` (N,) replace the random
    inputs; the variance is across windows, per dimension, averaged over dimensions (as in
    :func:`lncourse.nope.variance.attention_output_variance`). Runs where the model's parameters
    are; leaves the model's training mode as it was.
    """
    if isinstance(n_windows, bool) or not isinstance(n_windows, int) or n_windows < 2:
        raise ValueError(f"n_windows must be an integer >= 2, got {n_windows!r}")
    if not 0 <= layer < len(model.blocks):
        raise ValueError(f"layer must be in [0, {len(model.blocks)}), got {layer}")
    device = next(model.parameters()).device
    was_training = model.training
    model.eval()
    gen = generator(seed)
    mom = Moments()
    done = 0
    while done < n_windows:
        n = min(batch_size, n_windows - done)
        x, _ = sample_batch(ids, n, block_size, gen, device)
        _, _, cache = model(x, return_cache=True)
        mom.add(cache[f"blocks.{layer}.attn_out"].cpu())
        done += n
    model.train(was_training)
    return mom.variance().mean(-1).float()


def train_nope_lm(cfg: NoPELMConfig, device: torch.device | str = "cpu",
                  progress: bool = True) -> dict:
    """Train the NoPE model of ``cfg``; layer-0 variance before and after, and the history.

    Returns ``before`` and ``after`` ((T,) tensors), ``history`` (from ``train_lm``) and
    ``model``.
    """
    check_seed(cfg.seed, offset=2)
    text = load_shakespeare()
    tok = CharTokenizer.from_text(text)
    train_ids, test_ids = split_ids(tok.encode(text))
    with seeded(cfg.seed):
        model = GPT(TransformerConfig(vocab_size=tok.vocab_size, d_model=cfg.d_model,
                                      n_heads=cfg.n_heads, n_layers=cfg.n_layers,
                                      block_size=cfg.block_size, pos_emb=False))
    model.to(device)
    measure = dict(n_windows=cfg.windows, block_size=cfg.block_size, seed=cfg.seed)
    before = trained_lm_variance(model, test_ids, **measure)
    history = train_lm(model, train_ids, test_ids, steps=cfg.steps,
                       batch_size=cfg.batch_size, block_size=cfg.block_size, lr=cfg.lr,
                       eval_every=max(cfg.steps // 5, 1), eval_batches=cfg.eval_batches,
                       seed=cfg.seed, device=device,
                       progress=progress)
    after = trained_lm_variance(model, test_ids, **measure)
    return {"before": before, "after": after, "history": history, "model": model}
