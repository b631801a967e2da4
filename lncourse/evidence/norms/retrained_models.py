"""What chapter 5's recipe run of the per-head models trains
(:mod:`lncourse.evidence.norms.retrained`): its configuration (dh = 2, so every head's keys are
counted exactly) and presets, the data, the held-out contexts the keys are counted on,
and the models, fresh or as the stored run holds them; and :func:`residual_parts`, what
reaches the final norm (why a model stays at the unigram level).
Shapes: contexts (S, T).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

import torch

from lncourse.lm_recipe import Recipe
from lncourse.evidence.norms.trained import VARIANTS
from lncourse.rng import generator, seeded
from lncourse.text import char_streams, sample_batch
from lncourse.transformer import GPT, TransformerConfig

__all__ = ["HeadsRecipeConfig", "PRESETS", "DYT_RECIPES", "RECIPE_VARIANTS", "build",
           "contexts_of", "load_model", "residual_parts", "SATURATED"]

SATURATED = 2.0    # |alpha x| beyond which tanh' < 0.071: DyT passes almost no change

# DyT as the released LLaMA code of Zhu et al. trains it: a learned scalar on the input
# embeddings, and (``DyT-LLaMA``) no biases in any linear map and no beta in DyT. The
# code starts the scalar at sqrt(d), so that embeddings of std 0.02 enter its 7B model
# (d 4,096) at a root mean square of 1.3; at d = 32, sqrt(d) would leave them at 0.11.
# Here the scalar starts at 1 / init_std = 50, so they enter at about 1, as they leave a
# LayerNorm. ``DyT-scaled`` adds the scalar alone to the course's DyT.
DYT_RECIPES = {"DyT-scaled": {"norm": "dyt", "emb_scale": 50.0},
               "DyT-LLaMA": {"norm": "dyt", "emb_scale": 50.0, "bias": False,
                             "dyt_beta": False}}
RECIPE_VARIANTS = {**VARIANTS, **DYT_RECIPES}


@dataclass(frozen=True)
class HeadsRecipeConfig:
    """The per-head models (dh = d_model / n_heads = 2), the recipe and the sweep."""

    d_model: int = 8
    n_heads: int = 4
    n_layers: int = 4
    block_size: int = 256
    batch_size: int = 32
    steps: int = 6000
    warmup: int = 300
    min_lr_ratio: float = 0.1
    clip: float = 1.0
    eval_every: int = 500
    eval_batches: int = 8
    sweep_lrs: tuple[float, ...] = (3e-3, 1e-2, 3e-2)
    sweep_steps: int = 600
    contexts: int = 16
    loss_windows: int = 128
    late_start: int = 128
    seeds: tuple[int, ...] = (0, 1, 2)
    variants: tuple[str, ...] = tuple(VARIANTS)

    def __post_init__(self):
        unknown = set(self.variants) - set(RECIPE_VARIANTS)
        if unknown or not self.variants:
            raise ValueError(f"variants must be some of {list(RECIPE_VARIANTS)}, got "
                             f"{self.variants}")
        if self.d_model != 2 * self.n_heads:
            raise ValueError("per-head counting needs dh = 2: d_model = 2 * n_heads, got "
                             f"{self.d_model} and {self.n_heads}")

    def recipe(self) -> Recipe:
        return Recipe(steps=self.steps, batch_size=self.batch_size,
                      block_size=self.block_size, warmup=self.warmup,
                      min_lr_ratio=self.min_lr_ratio, clip=self.clip,
                      eval_every=self.eval_every, eval_batches=self.eval_batches)

    @classmethod
    def from_dict(cls, d: dict) -> "HeadsRecipeConfig":
        names = {f.name for f in dataclasses.fields(cls)}
        return cls(**{k: tuple(v) if isinstance(v, list) else v
                      for k, v in d.items() if k in names})


def _wide() -> HeadsRecipeConfig:
    """dh = 2 in a wider model: d = 32, 16 heads."""
    return HeadsRecipeConfig(d_model=32, n_heads=16)


def _tiny() -> HeadsRecipeConfig:
    return HeadsRecipeConfig(block_size=32, batch_size=4, steps=10, warmup=2, eval_every=5,
                             eval_batches=1, sweep_lrs=(1e-3, 1e-2), sweep_steps=4,
                             contexts=3, loss_windows=4, late_start=16, seeds=(0, 1))


def _cpu() -> HeadsRecipeConfig:
    """Chapter 2's model (d 8, 4 heads, 4 layers, T 256) as far as a shared 2-core CPU
    (load average 15) trains it in 40 minutes: DyT alone (the variant that stayed at the
    unigram level), batch 16, 800 steps (40 of warm-up), a sweep of 3 rates over 100
    steps, one seed; 64 windows for the per-position loss."""
    return HeadsRecipeConfig(batch_size=16, steps=800, warmup=40, eval_every=100,
                             eval_batches=4, sweep_steps=100, loss_windows=64,
                             seeds=(0,), variants=("DyT",))


def _wide_cpu() -> HeadsRecipeConfig:
    """The ``wide`` model (d 32, 16 heads of dh = 2, 4 layers, T 256) as far as two CPU
    sessions train it: batch 16, 2,000 steps (100 of warm-up), a sweep of 3 rates over
    200 steps, 3 seeds, 64 windows for the per-position loss. Chapter 2's d = 8 models
    with full LayerNorm ended 0.17-0.22 nats below the bigram table after 34,000 steps
    of batch 16 (contexts of 1,024), short of the 0.3 bar, so the ``paper`` preset's
    d = 8 is not the model to spend CPU sessions on."""
    return HeadsRecipeConfig(d_model=32, n_heads=16, batch_size=16, steps=2000,
                             warmup=100, eval_every=250, eval_batches=8,
                             sweep_steps=200, loss_windows=64)


def _dyt_cpu() -> HeadsRecipeConfig:
    """``wide_cpu`` for the two DyT recipes of :data:`DYT_RECIPES` alone."""
    return dataclasses.replace(_wide_cpu(), variants=tuple(DYT_RECIPES))


def _dyt_long_cpu() -> HeadsRecipeConfig:
    """``DyT-scaled`` alone, for 4,000 steps (200 of warm-up) instead of 2,000: chosen
    after ``dyt_cpu`` left one of its three seeds 0.21 nats below the bigram table, short
    of the 0.3 bar; its sweep runs again (the same 200 steps, warm-up scaled)."""
    return dataclasses.replace(_wide_cpu(), variants=("DyT-scaled",), steps=4000,
                               warmup=200, eval_every=500)


def _dyt_llama_lr_cpu() -> HeadsRecipeConfig:
    """``DyT-LLaMA`` at 1e-2, the rate ``dyt_cpu``'s sweep chose for ``DyT-scaled``,
    instead of its own 3e-2: chosen after its models stalled, to tell the rate apart
    from the recipe's other changes (no biases, no beta). Its one-rate sweep repeats
    ``dyt_cpu``'s 200 steps at 1e-2."""
    return dataclasses.replace(_dyt_cpu(), variants=("DyT-LLaMA",), sweep_lrs=(1e-2,))


def _dyt_scaled_high_lr_cpu() -> HeadsRecipeConfig:
    """``DyT-scaled`` at 3e-2, the rate ``dyt_cpu``'s sweep chose for ``DyT-LLaMA``: with
    ``dyt_llama_lr_cpu``, the two recipes at both rates. Chosen after DyT-LLaMA learned at
    1e-2; its one-rate sweep repeats ``dyt_cpu``'s 200 steps at 3e-2."""
    return dataclasses.replace(_dyt_cpu(), variants=("DyT-scaled",), sweep_lrs=(3e-2,))


PRESETS = {"paper": HeadsRecipeConfig, "wide": _wide, "wide_cpu": _wide_cpu, "cpu": _cpu,
           "dyt_cpu": _dyt_cpu, "dyt_long_cpu": _dyt_long_cpu,
           "dyt_llama_lr_cpu": _dyt_llama_lr_cpu,
           "dyt_scaled_high_lr_cpu": _dyt_scaled_high_lr_cpu, "tiny": _tiny}


def plays_data():
    return char_streams()     # shared: read, never changed


def build(cfg: HeadsRecipeConfig, vocab_size: int, variant: str, seed: int) -> GPT:
    """A fresh model of ``variant`` (seeded)."""
    if variant not in RECIPE_VARIANTS:
        raise ValueError(f"unknown variant {variant!r}; choose from "
                         f"{list(RECIPE_VARIANTS)}")
    with seeded(seed):
        return GPT(TransformerConfig(vocab_size, d_model=cfg.d_model, n_heads=cfg.n_heads,
                                     n_layers=cfg.n_layers, block_size=cfg.block_size,
                                     **RECIPE_VARIANTS[variant]))


def contexts_of(cfg: HeadsRecipeConfig, test_ids: torch.Tensor) -> torch.Tensor:
    """The held-out contexts the keys are counted on (those of the old run's draw)."""
    x, _ = sample_batch(test_ids, cfg.contexts, cfg.block_size, generator(12345))
    return x


def load_model(result: dict, weights: dict, variant: str, seed: int) -> GPT:
    cfg = HeadsRecipeConfig.from_dict(result["config"])
    model = build(cfg, result["config"]["vocab_size"], variant, seed)
    model.load_state_dict({k: v.float() for k, v in weights[f"{variant}/{seed}"].items()})
    return model.eval()


def residual_parts(model: GPT, contexts: torch.Tensor) -> dict:
    """What reaches the final norm on ``contexts`` (S, T), and what leaves it.

    The residual stream before the final norm, h (S, T, d), split into its mean over all
    tokens (a constant vector c) and the rest (the part that differs from token to
    token): the root mean square of each. After the norm, the token part's root mean
    square alone: near 0, every position gets the same logits, the unigram table's
    kind of prediction. For DyT, also the share of coordinates where |alpha h| >
    ``SATURATED``, where tanh is flat (None for the other norms)."""
    model = model.eval()
    with torch.no_grad():
        _, _, cache = model(contexts, return_cache=True)
    h = cache[f"blocks.{len(model.blocks) - 1}.resid_post"].double()
    out = cache["ln_final"].double()
    c, c_out = h.mean((0, 1)), out.mean((0, 1))
    alpha = getattr(model.ln_final, "alpha", None)
    return {"constant_rms": float(c.pow(2).mean().sqrt()),
            "token_rms": float((h - c).pow(2).mean().sqrt()),
            "out_token_rms": float((out - c_out).pow(2).mean().sqrt()),
            "saturated": None if alpha is None else
            float(((alpha.double() * h).abs() > SATURATED).double().mean())}
