"""Comparing majority runs the way a reviewer would: per seed, paired, with intervals
(chapter 3).

Every variant of a seed starts from the same weights and sees the same batches, so the
difference between two variants *within* a seed is free of that seed's luck. The
functions here turn a history (see :func:`lncourse.majority.train.train`) into per-seed
summaries (steps to a test accuracy, mean accuracy over a window, accuracy at a step),
paired differences with t intervals, and the 2 x 2 design of chapter 3:

=================  ======================  ===========================
                   scale sqrt(d) (paper)   scale 1/sqrt(d) (release)
=================  ======================  ===========================
with projection    ``layernorm``           ``layernorm_released_scale``
no projection      ``no_projection``       ``no_projection_released``
=================  ======================  ===========================
"""

from __future__ import annotations

import math

import numpy as np

from lncourse.summary import markdown_table, paired_interval  # noqa: F401  (ST.paired_interval in the chapter)

__all__ = ["DESIGN", "PAPER", "history_arrays", "steps_to_threshold", "window_mean", "value_at", "per_seed",
           "paired_interval", "factorial_effects", "equivalence_bound", "reproduction_rows",
           "markdown_table"]

# (projection, paper scale) of each cell of the design.
DESIGN = {"layernorm": (True, True), "no_projection": (False, True),
          "layernorm_released_scale": (True, False), "no_projection_released": (False, False)}

# The paper's numbers, read off its figures (Brody et al. 2023, section 4.1; 10 seeds,
# batch 6,000, lr 1e-3). Its "without projection" curves come from the released code, so
# they belong to our "no_projection_released". Steps -> value; "end" is the last step.
PAPER = {
    "test_acc": {"source": "Figure 3", "layernorm": {0: 0.34, 1000: 0.74, 5000: 0.93},
                 "no_projection_released": {0: 0.34, 1000: 0.52, 5000: 0.85}},
    "train_loss": {"source": "Figure 2a", "layernorm": {5000: 0.2},
                   "no_projection_released": {5000: 0.4}},
    "query_angle": {"source": "Figure 2b", "layernorm": {0: 70.0, "end": 12.0},
                    "no_projection_released": {0: 70.0, "end": 83.0}},
}


def history_arrays(history: dict, variant: str, lr: float | None = None) -> dict[str, np.ndarray]:
    """One variant's curves (at one learning rate; default: the run's only one) as arrays:
    ``step`` (P,) and ``train_loss``, ``test_acc``, ``query_angle`` of shape (n_seeds, P),
    seeds in the run's order, ready for :func:`lncourse.plotting.band`."""
    lrs = sorted(set(history.get("lr", [history["config"]["lr"]] * len(history["variant"]))))
    if lr is None:
        if len(lrs) > 1:
            raise ValueError(f"this history holds several learning rates {lrs}; pass lr=")
        lr = lrs[0]
    run_lr = history.get("lr", [lr] * len(history["variant"]))
    cols = [m for m, (v, r) in enumerate(zip(history["variant"], run_lr))
            if v == variant and math.isclose(r, lr)]
    if not cols:
        raise ValueError(f"variant {variant!r} at lr {lr:g} is not in this history "
                         f"(it has {sorted(set(history['variant']))} at {lrs})")
    out = {"step": np.asarray(history["step"]), "seed": np.asarray(history["seed"])[cols]}
    for key in ("train_loss", "test_acc", "query_angle"):
        out[key] = np.asarray(history[key], dtype=float)[:, cols].T
    return out


def steps_to_threshold(steps: np.ndarray, values: np.ndarray, threshold: float = 0.9,
                       censor: float | None = None) -> np.ndarray:
    """First evaluation step at which each run reaches ``threshold``.

    steps: (P,); values: (n_runs, P). Returns (n_runs,): NaN for a run that never gets
    there, or ``censor`` if given (e.g. the last step, to compare runs where some seeds
    did not finish: the result is then a lower bound for those).
    """
    values = np.atleast_2d(np.asarray(values, dtype=float))
    steps = np.asarray(steps, dtype=float)
    if values.shape[-1] != len(steps):
        raise ValueError(f"{values.shape[-1]} values per run for {len(steps)} steps")
    reached = values >= threshold
    first = steps[reached.argmax(axis=1)]
    missing = np.nan if censor is None else float(censor)
    return np.where(reached.any(axis=1), first, missing)


def window_mean(steps: np.ndarray, values: np.ndarray, stop: float | None = None) -> np.ndarray:
    """Mean of each run's curve over steps [0, stop], by the trapezoid rule: the area
    under the curve divided by its length. (n_runs, P) -> (n_runs,)."""
    steps = np.asarray(steps, dtype=float)
    values = np.atleast_2d(np.asarray(values, dtype=float))
    stop = steps[-1] if stop is None else float(stop)
    if stop > steps[-1] or stop <= steps[0]:
        raise ValueError(f"the window ends at {stop}, outside the run's steps "
                         f"({steps[0]:g}..{steps[-1]:g})")
    if stop not in steps:
        raise ValueError(f"step {stop:g} was not evaluated; the window must end at one")
    keep = steps <= stop
    x, y = steps[keep], values[:, keep]
    area = ((y[:, 1:] + y[:, :-1]) / 2 * np.diff(x)).sum(axis=1)   # trapezoid rule
    return area / (stop - steps[0])


def value_at(steps: np.ndarray, values: np.ndarray, step: float) -> np.ndarray:
    """Each run's value at an evaluated ``step`` (an error if it was not evaluated)."""
    steps = np.asarray(steps)
    where = np.nonzero(steps == step)[0]
    if len(where) == 0:
        raise ValueError(f"step {step} was not evaluated (steps {steps[0]}..{steps[-1]})")
    return np.atleast_2d(np.asarray(values, dtype=float))[:, where[0]]


def per_seed(history: dict, metric: str, lr: float | None = None,
             variants: tuple[str, ...] | None = None) -> dict[str, np.ndarray]:
    """One number per seed and variant, seeds in the run's order.

    metric: ``"steps_to_80"``, ``"steps_to_90"`` (censored at the last step: a lower
    bound for seeds that never got there), ``"mean_acc_to_<step>"`` (mean test accuracy
    over [0, step]) or ``"acc_at_<step>"``.
    """
    variants = variants or tuple(dict.fromkeys(history["variant"]))
    out = {}
    for v in variants:
        c = history_arrays(history, v, lr)
        if metric.startswith("steps_to_"):
            th = int(metric.removeprefix("steps_to_")) / 100
            out[v] = steps_to_threshold(c["step"], c["test_acc"], th, censor=c["step"][-1])
        elif metric.startswith("mean_acc_to_"):
            out[v] = window_mean(c["step"], c["test_acc"], float(metric.removeprefix("mean_acc_to_")))
        elif metric.startswith("acc_at_"):
            out[v] = value_at(c["step"], c["test_acc"], float(metric.removeprefix("acc_at_")))
        else:
            raise ValueError(f"unknown metric {metric!r}")
    return out


def factorial_effects(values: dict[str, np.ndarray],
                      level: float = 0.95) -> dict[str, tuple[float, float, float]]:
    """Main effects of projection and of scale, and their interaction, per seed, with
    t intervals over seeds: (mean, low, high) each.

    values: the four cells of :data:`DESIGN` -> (n_seeds,), paired by seed. Projection:
    the mean over both scales of (with - without); scale: the mean over projection of
    (paper - released); interaction: (projection effect at the paper's scale) - (at the
    released scale).
    """
    missing = set(DESIGN) - values.keys()
    if missing:
        raise ValueError(f"the 2 x 2 design needs {sorted(missing)} too")
    ln, np_, ln_s, np_s = (np.asarray(values[k], dtype=float) for k in
                           ("layernorm", "no_projection", "layernorm_released_scale",
                            "no_projection_released"))
    return {"projection": paired_interval(((ln - np_) + (ln_s - np_s)) / 2, level),
            "scale": paired_interval(((ln - ln_s) + (np_ - np_s)) / 2, level),
            "interaction": paired_interval((ln - np_) - (ln_s - np_s), level),
            "projection_at_paper_scale": paired_interval(ln - np_, level),
            "projection_at_released_scale": paired_interval(ln_s - np_s, level)}


def paired_rows(per_seed_values: dict[str, dict[str, np.ndarray]],
                 comparisons: list[tuple[str, str]], formats: dict[str, str],
                 level: float = 0.95) -> list[tuple[str, ...]]:
    """Table rows of paired differences a - b, one row per comparison (a, b): its label,
    then for each metric of ``formats`` (metric -> format of one number) the mean
    difference over seeds and its t interval, as "mean [low, high]".

    per_seed_values: metric -> variant -> (n_seeds,), as :func:`per_seed` gives them.
    """
    rows = []
    for a, b in comparisons:
        cells = []
        for metric, fmt in formats.items():
            values = per_seed_values[metric]
            mean, low, high = paired_interval(values[a] - values[b], level)
            cells.append(f"{fmt.format(mean)} [{fmt.format(low)}, {fmt.format(high)}]")
        rows.append((f"`{a}` − `{b}`", *cells))
    return rows


def equivalence_bound(differences: np.ndarray) -> float:
    """The smallest delta for which the mean difference is shown to lie within
    [-delta, delta] by two one-sided t tests at the 5% level (the largest |end| of the
    90% interval)."""
    _, low, high = paired_interval(differences, level=0.90)
    return max(abs(low), abs(high))


def reproduction_rows(history: dict) -> list[tuple[str, str, str, str]]:
    """The paper's numbers (:data:`PAPER`) beside a run's, at the same steps:
    rows of (quantity, source, paper, ours as mean ± std over seeds)."""
    rows = []
    names = {"test_acc": "test accuracy", "train_loss": "training loss",
             "query_angle": "query angle (degrees)"}
    for key, entry in PAPER.items():
        for variant in ("layernorm", "no_projection_released"):
            c = history_arrays(history, variant)
            for step, paper in entry[variant].items():
                # "end": the end of training, the configuration's last step
                at = history["config"]["steps"] if step == "end" else step
                last = int(c["step"][-1])
                if at in c["step"]:
                    v = value_at(c["step"], c[key], at)
                    ours = f"{v.mean():.2f} ± {v.std():.2f}"
                elif at > last:      # a stored run still going
                    v = value_at(c["step"], c[key], last)
                    ours = f"not reached (at step {last:,}: {v.mean():.2f} ± {v.std():.2f})"
                else:
                    ours = "not evaluated"
                fmt = "{:.0f}" if key == "query_angle" else "{:.2f}"
                rows.append((f"{names[key]}, {variant}, step {at:,}", entry["source"],
                             fmt.format(paper), ours))
    return rows
