"""What the logit-growth grid trains (:mod:`lncourse.evidence.norms.logits`, and
:mod:`lncourse.evidence.norms.periln` in the same grid): the two variants, the configuration (the
models, their training and the learning-rate grid), its reduction for full mode at
``SCALE`` < 1, and the presets."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

import numpy as np

__all__ = ["VARIANTS", "LogitsConfig", "PRESETS"]

VARIANTS = {"Pre-LN": {"norm": "layernorm"},
            "QK-norm": {"norm": "layernorm", "qk_norm": True}}


@dataclass(frozen=True)
class LogitsConfig:
    """The models, their training and the learning-rate grid."""

    d_model: int = 64
    n_heads: int = 4
    n_layers: int = 2
    block_size: int = 128
    batch_size: int = 16
    steps: int = 600
    warmup: int = 60
    min_lr: float = 1e-5
    lrs: tuple[float, ...] = (1e-3, 3e-3, 1e-2, 3e-2, 1e-1, 3e-1)
    seeds: tuple[int, ...] = (0, 1, 2)
    weight_decay: float = 1e-4      # independent of the learning rate
    z_loss: float = 1e-4
    clip: float = 1.0
    eval_every: int = 50
    probe_windows: int = 4          # training windows the largest logits are read on
    test_windows: int = 32          # held-out windows of the final test loss
    text_chars: int | None = None

    def __post_init__(self):
        if not (0 <= self.warmup < self.steps):
            raise ValueError(f"warmup must be in [0, steps), got {self.warmup}")
        if self.steps % self.eval_every:
            raise ValueError(f"steps ({self.steps}) must be a multiple of eval_every "
                             f"({self.eval_every})")
        if not self.lrs or any(not (0 < lr < 10) for lr in self.lrs):
            raise ValueError(f"learning rates must lie in (0, 10), got {self.lrs}")
        if len(self.seeds) < 2:
            raise ValueError("need at least two seeds for an interval")

    def scaled(self, factor: float) -> "LogitsConfig":
        """Full mode at SCALE < 1: ``factor`` of the steps (at least 4), of the seeds (at
        least 2) and of the learning rates (at least the lowest and the highest, spread
        over the grid); ``scaled(1)`` is the configuration itself."""
        if not 0 < factor <= 1:
            raise ValueError(f"factor must be in (0, 1], got {factor}")
        steps = max(4, round(self.steps * factor))
        every = max(1, steps // (self.steps // self.eval_every))
        steps -= steps % every
        n = min(len(self.lrs), max(2, round(len(self.lrs) * factor)))
        pick = np.unique(np.round(np.linspace(0, len(self.lrs) - 1, n)).astype(int))
        return dataclasses.replace(
            self, steps=steps, warmup=min(max(1, round(self.warmup * factor)), steps - 1),
            eval_every=every, seeds=self.seeds[:max(2, round(len(self.seeds) * factor))],
            lrs=tuple(self.lrs[i] for i in pick))

    @classmethod
    def from_dict(cls, d: dict) -> "LogitsConfig":
        names = {f.name for f in dataclasses.fields(cls)}
        return cls(**{k: tuple(v) if isinstance(v, list) else v
                      for k, v in d.items() if k in names})


def _paper() -> LogitsConfig:
    """d = 64, 4 heads (dh = 16), 2 layers, contexts of 128 characters, batch 16, 600
    steps (60 of warm-up), lr 1e-3 ... 3e-1, 3 seeds."""
    return LogitsConfig()


def _tiny() -> LogitsConfig:
    return LogitsConfig(d_model=16, block_size=16, batch_size=4, steps=6, warmup=2,
                        eval_every=3, lrs=(1e-2, 3e-1), seeds=(0, 1), probe_windows=2,
                        test_windows=2, text_chars=100_000)


def _long() -> LogitsConfig:
    """The paper preset's high rates trained long enough to learn (issue 35 item 8: at
    600 steps of batch 16, Peri-LN at lr >= 0.03 ended at the bigram level): batch 32,
    2,000 steps (100 of warm-up), lr 0.03, 0.1 and 0.3, 3 seeds."""
    return LogitsConfig(batch_size=32, steps=2000, warmup=100, eval_every=100,
                        lrs=(3e-2, 1e-1, 3e-1))


PRESETS = {"paper": _paper, "tiny": _tiny, "long": _long}
