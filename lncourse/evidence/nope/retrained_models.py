"""What the NoPE recipe run trains (:mod:`lncourse.evidence.nope.retrained`): the two variants, the
configuration and its presets, the data, and the models, fresh or as the stored run
holds them.

* ``NoPE``: no positional embedding, as Chi et al.'s model;
* ``learned``: the control, a learned positional embedding added at the input.
"""

from __future__ import annotations

import dataclasses
import functools
from dataclasses import dataclass

import torch

from lncourse.lm_recipe import Recipe
from lncourse.nope.lm import NoPELMConfig
from lncourse.rng import seeded
from lncourse.text import CharTokenizer, load_shakespeare, split_ids
from lncourse.transformer import GPT, TransformerConfig

__all__ = ["VARIANTS", "RetrainConfig", "PRESETS", "build", "load_models"]

VARIANTS = {"NoPE": {"pos_emb": False}, "learned": {"pos_emb": True}}


@dataclass(frozen=True)
class RetrainConfig:
    """The models, the recipe, the sweep and what is measured."""

    d_model: int = 128
    n_heads: int = 4
    n_layers: int = 4
    block_size: int = 128
    batch_size: int = 64
    steps: int = 4000
    warmup: int = 200
    min_lr_ratio: float = 0.1
    clip: float = 1.0
    eval_every: int = 250
    eval_batches: int = 8
    sweep_lrs: tuple[float, ...] = (1e-3, 2e-3, 4e-3, 8e-3)
    sweep_steps: int = 500
    windows: int = 512          # for the variance profiles (16 groups of 32)
    loss_windows: int = 256     # for the per-position loss
    late_start: int = 64        # "positions >= 64"
    seeds: tuple[int, ...] = (0, 1, 2)
    shared_lr: bool = False     # True: only NoPE is swept, the control takes its rate

    def recipe(self) -> Recipe:
        return Recipe(steps=self.steps, batch_size=self.batch_size,
                      block_size=self.block_size, warmup=self.warmup,
                      min_lr_ratio=self.min_lr_ratio, clip=self.clip,
                      eval_every=self.eval_every, eval_batches=self.eval_batches)

    def profile_cfg(self, seed: int) -> NoPELMConfig:
        """What :func:`lncourse.evidence.nope.trained.profiles` reads (windows, T, seed)."""
        return NoPELMConfig(d_model=self.d_model, n_heads=self.n_heads,
                            n_layers=self.n_layers, block_size=self.block_size,
                            windows=self.windows, seed=seed)

    @classmethod
    def from_dict(cls, d: dict) -> "RetrainConfig":
        names = {f.name for f in dataclasses.fields(cls)}
        return cls(**{k: tuple(v) if isinstance(v, list) else v
                      for k, v in d.items() if k in names})


def _tiny() -> RetrainConfig:
    """For tests: d 16, 2 layers, T 32, 12 steps, a sweep of two rates."""
    return RetrainConfig(d_model=16, n_heads=2, n_layers=2, block_size=32, batch_size=4,
                         steps=12, warmup=2, eval_every=6, eval_batches=1,
                         sweep_lrs=(1e-3, 1e-2), sweep_steps=5, windows=32,
                         loss_windows=4, late_start=16, seeds=(0, 1))


def _cpu() -> RetrainConfig:
    """What a shared 2-core CPU (load average 15-19) affords in under an hour (the GPU
    preset ``paper`` could not be sent to a GPU): d 64, 4 heads, 2 layers, T 128, batch
    32, 500 steps (25 of warm-up), a sweep of 3 rates over 150 steps for the NoPE model
    (the control takes the same rate, so the two differ only in the positional
    embedding), one seed; 256 windows (16 groups of 16) for the variance profiles, 128
    for the per-position loss."""
    return RetrainConfig(d_model=64, n_heads=4, n_layers=2, block_size=128, batch_size=32,
                         steps=500, warmup=25, eval_every=50, eval_batches=4,
                         sweep_lrs=(1e-3, 3e-3, 1e-2), sweep_steps=150, windows=256,
                         loss_windows=128, late_start=64, seeds=(0,), shared_lr=True)


def _wide() -> RetrainConfig:
    """The ``paper`` preset's model on a quiet 2-core CPU in about an hour and a half
    (issue 35 item 7: the ``cpu`` preset's NoPE model stopped 0.109 nats below the
    bigram table, short of the 0.3 bar): d 128, 4 heads, 4 layers, T 128, batch 32 (not
    64), 3,000 steps (150 of warm-up), three seeds; a sweep of 3 rates over 300 steps for
    the NoPE model, whose rate the control takes; 512 windows for the profiles, 256 for
    the per-position loss. One step takes about 0.39 s on one thread."""
    return RetrainConfig(batch_size=32, steps=3000, warmup=150,
                         sweep_lrs=(1e-3, 3e-3, 1e-2), sweep_steps=300, shared_lr=True)


PRESETS = {"paper": RetrainConfig, "wide": _wide, "cpu": _cpu, "tiny": _tiny}


@functools.lru_cache(maxsize=1)
def plays_data() -> tuple[CharTokenizer, torch.Tensor, torch.Tensor]:
    text = load_shakespeare()
    tok = CharTokenizer.from_text(text)
    train_ids, test_ids = split_ids(tok.encode(text))
    return tok, train_ids, test_ids


def build(cfg: RetrainConfig, vocab_size: int, variant: str, seed: int) -> GPT:
    """The model of ``variant`` at initialisation (seeded)."""
    if variant not in VARIANTS:
        raise ValueError(f"unknown variant {variant!r}; choose from {list(VARIANTS)}")
    with seeded(seed):
        return GPT(TransformerConfig(vocab_size=vocab_size, d_model=cfg.d_model,
                                     n_heads=cfg.n_heads, n_layers=cfg.n_layers,
                                     block_size=cfg.block_size, **VARIANTS[variant]))


def load_models(result: dict, weights: dict, variant: str, seed: int) -> GPT:
    """A stored model (bfloat16 weights as float32)."""
    cfg = RetrainConfig.from_dict(result["config"])
    model = build(cfg, result["config"]["vocab_size"], variant, seed)
    model.load_state_dict({k: v.float() for k, v in weights[f"{variant}/{seed}"].items()})
    return model.eval()
