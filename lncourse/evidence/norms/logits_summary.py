"""LR sensitivity and the summary of a logit-growth run (:mod:`lncourse.evidence.norms.logits`).

:func:`summarize` turns the per-model records of a run into what chapter 5 reports: per
variant and peak learning rate the mean test loss and largest final attention logit
with 95% t intervals over seeds, the number of models that diverged, each variant's LR
sensitivity (Wortsman et al., eq. 1; :func:`sensitivity`) and, paired by seed, QK-norm
minus Pre-LN for the sensitivity and for the test loss at every learning rate.
"""

from __future__ import annotations

import numpy as np

from lncourse.norms.heads import mean_interval
from lncourse.summary import paired_interval

__all__ = ["sensitivity", "summarize"]


def loss_or_inf(value: float | None) -> float:
    return float("inf") if value is None else value


def sensitivity(losses: np.ndarray, initial: np.ndarray) -> np.ndarray:
    """LR sensitivity per seed (Wortsman et al., eq. 1): ``losses`` (seeds, lrs) final
    test losses (inf for a diverged model), ``initial`` (seeds,) the loss at
    initialisation; returns (seeds,): mean over lrs of min(loss, initial) minus the
    seed's best loss over the grid."""
    losses, initial = np.asarray(losses, float), np.asarray(initial, float)
    if losses.ndim != 2 or initial.shape != losses.shape[:1]:
        raise ValueError(f"need losses (seeds, lrs) and initial (seeds,), got "
                         f"{losses.shape} and {initial.shape}")
    capped = np.minimum(losses, initial[:, None])
    return capped.mean(1) - capped.min(1)


def summarize(models: dict, cfg) -> dict:
    """``cfg``: the run's :class:`lncourse.evidence.norms.logits.LogitsConfig`. Per variant: per
    lr the mean test loss and largest final logit (max over layers)
    with t intervals over seeds and the number diverged; the LR sensitivity (mean and
    interval over seeds); and the paired difference of sensitivities, QK-norm minus
    Pre-LN."""
    out, sens = {}, {}
    for variant, runs in models.items():
        per_lr = []
        for i, lr in enumerate(cfg.lrs):
            cell = [r for r in runs if r["lr_index"] == i]
            loss = [r["test_loss"] for r in cell]
            logit = [None if None in r["final_max_logit"] else max(r["final_max_logit"])
                     for r in cell]
            diverged = sum(v is None for v in loss)
            per_lr.append({"lr": lr, "diverged": diverged,
                           "test_loss": list(mean_interval(loss)) if not diverged else None,
                           "max_logit": (list(mean_interval(logit))
                                         if None not in logit else None)})
        losses = np.array([[loss_or_inf(next(r["test_loss"] for r in runs
                                 if r["seed"] == s and r["lr_index"] == i))
                            for i in range(len(cfg.lrs))] for s in cfg.seeds])
        initial = np.array([next(r["initial_loss"] for r in runs if r["seed"] == s)
                            for s in cfg.seeds])
        sens[variant] = sensitivity(losses, initial)
        out[variant] = {"per_lr": per_lr, "sensitivity": list(mean_interval(sens[variant])),
                        "best_lr": cfg.lrs[int(np.argmin(np.minimum(
                            losses, initial[:, None]).mean(0)))]}
    out["sensitivity_difference"] = list(paired_interval(sens["QK-norm"] - sens["Pre-LN"]))
    # per lr, QK-norm minus Pre-LN on the same seed (None where either diverged)
    diff = []
    for i in range(len(cfg.lrs)):
        pairs = [(_cell(models, "QK-norm", i, s)["test_loss"],
                  _cell(models, "Pre-LN", i, s)["test_loss"]) for s in cfg.seeds]
        diff.append(None if any(None in p for p in pairs)
                    else list(paired_interval(np.array([a - b for a, b in pairs]))))
    out["loss_difference"] = diff
    return out


def _cell(models: dict, variant: str, lr_index: int, seed: int) -> dict:
    return next(r for r in models[variant] if r["seed"] == seed and r["lr_index"] == lr_index)
