"""The configuration of a majority run, and the runs chapter 3 stores (chapter 3).

One frozen dataclass describes a run: the data, the model, the optimisation and which
models train side by side (every learning rate x variant x seed). Presets name the runs
of the chapter: :meth:`MajorityConfig.paper` (the paper's settings), :meth:`quick` (fast
mode), :meth:`grid` (the sensitivity grid) and :meth:`three_d` (Figure 1a/1b).
"""

from __future__ import annotations

import dataclasses
import math
import numbers
from dataclasses import dataclass

from lncourse.majority import task as majority
from lncourse.modes import scaled
from lncourse.rng import check_seed

__all__ = ["PAPER_SEEDS", "MajorityConfig"]

PAPER_SEEDS = (11, 123, 42, 9, 456, 4, 5, 6, 7, 8)   # the released scripts' seeds


def _int(name: str, value, low: int, high: int | None = None) -> None:
    if isinstance(value, bool) or not isinstance(value, numbers.Integral) or value < low \
            or (high is not None and value >= high):
        bound = f" and < {high}" if high is not None else ""
        raise ValueError(f"{name} must be an integer >= {low}{bound}, got {value!r}")


@dataclass(frozen=True)
class MajorityConfig:
    """One majority run: data, model, optimisation, and which models train side by side.

    The models are every (learning rate, variant, seed) triple; models of the same seed
    start from the same weights and see the same batches, so comparisons are paired.
    """

    n_samples: int = 100_000
    seq_len: int = 50
    n_classes: int = 20
    min_margin: int = 6             # largest class beats the second by this many tokens
    d_model: int = 8
    lr: float | tuple[float, ...] = 1e-3   # several: a grid trained side by side
    batch_size: int = 6000
    steps: int = 14_000             # 1,000 epochs of ceil(80,008 / 6,000) = 14 steps
    schedule_epochs: int = 10_000   # the linear decay is set for 10,000 epochs (release)
    eval_every: int = 100           # steps between evaluations (and checkpoints)
    eval_size: int | None = None    # test sequences used per evaluation; None: all
    seeds: tuple[int, ...] = PAPER_SEEDS
    variants: tuple[str, ...] = majority.VARIANTS
    data_seed: int = 0              # one dataset for every model

    def __post_init__(self):
        for v in self.variants:
            if v not in majority.ALL_VARIANTS:
                raise ValueError(f"unknown variant {v!r}; choose from {majority.ALL_VARIANTS}")
        if not self.seeds or not self.variants or not self.lrs:
            raise ValueError("need at least one seed, one variant and one learning rate")
        for name, items in (("seeds", self.seeds), ("variants", self.variants),
                            ("lr", self.lrs)):
            if len(set(items)) != len(items):
                raise ValueError(f"{name} must not repeat (each model is one triple)")
        for lr in self.lrs:
            if isinstance(lr, bool) or not isinstance(lr, numbers.Real) \
                    or not math.isfinite(lr) or lr <= 0:
                raise ValueError(f"lr must be a finite positive number, got {lr!r}")
        for seed in self.seeds + (self.data_seed,):
            check_seed(seed, "a seed")   # 2**32 and above repeat smaller seeds
        for name in ("n_samples", "batch_size", "steps", "eval_every", "schedule_epochs"):
            _int(name, getattr(self, name), 1)
        _int("d_model", self.d_model, 2)
        if self.eval_size is not None:
            _int("eval_size", self.eval_size, 1)

    @classmethod
    def from_dict(cls, d: dict) -> MajorityConfig:
        """The configuration stored in a history (JSON turns tuples into lists)."""
        d = {k: tuple(v) if isinstance(v, list) else v for k, v in d.items()}
        return cls(**d)

    @property
    def lrs(self) -> tuple[float, ...]:
        return self.lr if isinstance(self.lr, tuple) else (self.lr,)

    @classmethod
    def paper(cls) -> MajorityConfig:
        """The paper's setting (appendix E.1 and the released scripts): batch 6,000, lr
        1e-3, its 10 seeds, 14,000 steps; every variant, the control, the other reading
        of "no projection" and the two interventions (80 models)."""
        return cls(variants=majority.ALL_VARIANTS)

    @classmethod
    def quick(cls) -> MajorityConfig:
        """Fast mode, in the paper's regime: batch 6,000 and lr 1e-3 as in the paper, the
        first seed, the 2 x 2 design (projection x scale), 500 steps, evaluated on 2,000
        test sequences. In the paper-settings run the two scales have parted by step 500
        in every seed (the first: test accuracy 0.56 and 0.57 against 0.42 and 0.42)
        while the projection has not. One seed, not two: the second doubled the site
        build's longest cell (75 s of a 600 s test command) and showed the same."""
        return cls(steps=500, eval_every=50, eval_size=2000, seeds=PAPER_SEEDS[:1],
                   variants=("layernorm", "no_projection", "no_projection_released",
                             "layernorm_released_scale"))

    @classmethod
    def grid(cls, batch_size: int) -> MajorityConfig:
        """The sensitivity grid at one batch size: lr 3e-4, 1e-3, 3e-3, the 2 x 2
        design, 5 seeds. Batch 6,000: 14,000 steps, and the cell lr 1e-3 is the paper run
        (the same models: its first 5 seeds). Batch 500: 30,000 steps, which see about
        as many sequences as 2,500 steps at batch 6,000."""
        big = batch_size == 6000
        return cls(lr=(3e-4, 3e-3) if big else (3e-4, 1e-3, 3e-3), batch_size=batch_size,
                   steps=14_000 if big else 30_000, eval_every=100 if big else 200,
                   seeds=PAPER_SEEDS[:5],
                   variants=("layernorm", "no_projection", "no_projection_released",
                             "layernorm_released_scale"))

    @classmethod
    def other_data(cls, data_seed: int) -> MajorityConfig:
        """The paper's settings on another dataset: LayerNorm and the released variant,
        the first 5 seeds, data seed ``data_seed`` (the paper's generator is unseeded;
        data seed 0 is the paper run's own dataset, whose first 5 seeds are these models).
        Three data seeds x 5 model seeds measure how much the verdict owes to one dataset."""
        return cls(variants=("layernorm", "no_projection_released"), seeds=PAPER_SEEDS[:5],
                   data_seed=data_seed)

    @classmethod
    def three_d(cls, steps: int = 10_000) -> MajorityConfig:
        """Figure 1a/1b: d = 3, 10 classes, length 30, the released 3-d scripts' settings
        (6,000 sequences, one full batch per step, lr 1e-3, 10,000 steps), three norms,
        5 seeds (the paper's figure shows one model)."""
        return cls(n_samples=6000, seq_len=30, n_classes=10, d_model=3, batch_size=6000,
                   steps=steps, eval_every=max(1, steps // 50),
                   variants=("layernorm", "no_projection", "no_projection_released"),
                   seeds=PAPER_SEEDS[:5])

    def scaled(self, scale: float) -> MajorityConfig:
        """Steps and seeds multiplied by ``scale`` (at least one of each), evaluations no
        further apart than the steps, see :mod:`lncourse.modes`; data and model unchanged."""
        steps = scaled(self.steps, scale)
        return dataclasses.replace(self, steps=steps, eval_every=min(self.eval_every, steps),
                                   seeds=self.seeds[:scaled(len(self.seeds), scale)])

    @property
    def models(self) -> list[tuple[str, int, float]]:
        """(variant, seed, lr) of each of the M models: lr outermost, seed innermost, so
        that model m reads the batch of seed m % n_seeds."""
        return [(v, s, lr) for lr in self.lrs for v in self.variants for s in self.seeds]
