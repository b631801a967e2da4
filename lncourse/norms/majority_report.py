"""What chapter 5 reports from the majority arms' run: each arm at its tuned learning
rate, paired against LayerNorm (chapter 5).

The learning rate of each arm is chosen by :data:`SELECTION_RULE`, written down (and
committed) before the stored run started. Everything here is recomputed from a stored
history (:func:`lncourse.norms.majority_run.train`): its evaluation curves and its final
weights, with the test set rebuilt from the stored configuration.
"""

from __future__ import annotations

import math

import numpy as np
import torch

from lncourse.majority.stats import steps_to_threshold
from lncourse.summary import paired_interval

__all__ = ["SELECTION_RULE", "per_seed_steps", "select_lr", "summary"]

SELECTION_RULE = (
    "For each arm, the learning rate with the smallest mean over the 10 seeds of steps to "
    "90% test accuracy, where a seed that never reaches 90% (or diverges first) counts as "
    "the run's last step plus one evaluation interval (a penalty, and a lower bound on its "
    "true value); an exact tie goes to the smaller learning rate. A learning rate at which "
    "any seed diverged (non-finite loss) is chosen only if every learning rate has one.")


def per_seed_steps(history: dict, arm: str, lr: float, threshold: float) -> np.ndarray:
    """Steps to ``threshold`` test accuracy for each seed of (arm, lr), in the run's seed
    order; NaN where the seed never reaches it (or only after diverging)."""
    cols = _columns(history, arm, lr)
    acc = np.asarray(history["test_acc"], dtype=float)[:, cols].T        # (seeds, evals)
    steps = np.asarray(history["step"], dtype=float)
    for row, m in enumerate(cols):       # a diverged model's curve ends at its divergence
        at = history["diverged_at"][m]
        if at is not None:
            acc[row, steps >= at] = -np.inf
    return steps_to_threshold(steps, acc, threshold)


def _columns(history: dict, arm: str, lr: float) -> list[int]:
    cols = [m for m, (a, r) in enumerate(zip(history["arm"], history["lr"]))
            if a == arm and math.isclose(r, lr)]
    if not cols:
        raise ValueError(f"arm {arm!r} at lr {lr:g} is not in this history")
    return cols


def _penalised(history: dict, values: np.ndarray) -> np.ndarray:
    last = history["step"][-1] + history["config"]["eval_every"]
    return np.where(np.isnan(values), last, values)


def select_lr(history: dict, arm: str) -> tuple[float, dict[float, float]]:
    """The learning rate :data:`SELECTION_RULE` picks for ``arm``, and each lr's score
    (mean penalised steps to 90%)."""
    lrs = sorted(set(history["config"]["lrs"]))
    score, diverged = {}, {}
    for lr in lrs:
        score[lr] = float(_penalised(history, per_seed_steps(history, arm, lr, 0.9)).mean())
        diverged[lr] = any(history["diverged_at"][m] is not None
                           for m in _columns(history, arm, lr))
    allowed = [lr for lr in lrs if not diverged[lr]] or lrs
    best = min(allowed, key=lambda lr: (score[lr], lr))
    return best, score
