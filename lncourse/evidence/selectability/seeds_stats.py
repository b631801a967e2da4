"""Intervals over seeds, the loss comparison and Table 2's settling test (chapter 2).

The seeded run (:mod:`lncourse.evidence.selectability.seeds`) has three seeds per model. A
percentile bootstrap over three seeds returns about the lowest and highest seed mean (a
range of three draws covers the median with probability 1 - 2 / 2**3 = 75%), so the
replication page reports, beside it:

- the **Student-t interval** of the mean over seeds (each seed's mean over layers and
  held-out contexts is one observation; n - 1 = 2 degrees of freedom);
- the **prediction interval for one new seed**, mean +- t * s * sqrt(1 + 1/n): the fair
  comparison with the paper, whose number is one trained model;
- the **final test losses** of the two models per seed, their paired difference with its
  t interval, beside the unigram and bigram losses of the data
  (:func:`lncourse.lm.reference_losses`);
- **the trends**, each change with its Student-t interval over seeds (:func:`drift`):
  Table 1's from step 400 to the end, across the paper's value;
- **Table 2's settling test**: the test Table 1's count passed
  (:data:`~lncourse.evidence.selectability.seeds_measure.SETTLE_SINCE`,
  :data:`~lncourse.evidence.selectability.seeds_measure.SETTLE_BAND`, written down at step
  21,700 for Table 1), applied unchanged to Table 2's quantity.

:func:`stats_claims` states each as a :class:`~lncourse.evidence.claims.Claim`; the tests check
that each holds on the stored run and fails on contrary numbers.
"""

from __future__ import annotations

import math

import numpy as np
from scipy import stats

from lncourse.lm import LEARNED_MARGIN
from lncourse.evidence.claims import Claim
from lncourse.evidence.selectability.seeds_measure import (PAPER, SETTLE_BAND, SETTLE_SINCE, curve,
                                                  late_change)

__all__ = ["t_interval", "prediction_interval", "seed_means", "table_intervals",
           "final_losses", "loss_difference", "data_references", "drift",
           "table1_drift", "table2_drift",
           "stats_claims", "continuation_claims", "T1_50K_BAND", "FULL", "NO_SCALING",
           "LOSS_FROM_STEP"]

FULL, NO_SCALING = "full LayerNorm", "no scaling before attention"
TABLES = {"table1": (NO_SCALING, "after"), "table2": (FULL, "before")}
# The step from which the claim says the mean loss difference stays negative: the
# evaluation steps are noisy (4 batches each), so it is stated for the mean over seeds.
LOSS_FROM_STEP = 8000


def _check(values) -> np.ndarray:
    a = np.asarray(values, dtype=float)
    if a.ndim != 1 or len(a) < 2:
        raise ValueError(f"an interval over seeds needs at least 2 values in a 1-D array, "
                         f"got shape {a.shape}")
    if not np.all(np.isfinite(a)):
        raise ValueError(f"values must be finite, got {a.tolist()}")
    return a


def t_interval(values, level: float = 0.95) -> tuple[float, float, float]:
    """Mean and Student-t interval of the mean of ``values`` (one per seed)."""
    a = _check(values)
    half = stats.t.ppf(0.5 + level / 2, len(a) - 1) * a.std(ddof=1) / math.sqrt(len(a))
    return float(a.mean()), float(a.mean() - half), float(a.mean() + half)


def prediction_interval(values, level: float = 0.95) -> tuple[float, float, float]:
    """Mean and the interval that holds one new seed's value with probability
    ``level`` (normal observations): mean +- t * s * sqrt(1 + 1/n)."""
    a = _check(values)
    half = stats.t.ppf(0.5 + level / 2, len(a) - 1) * a.std(ddof=1) * math.sqrt(
        1 + 1 / len(a))
    return float(a.mean()), float(a.mean() - half), float(a.mean() + half)


def seed_means(result: dict, label: str, q: str) -> list[float]:
    """Per seed, the fraction (mean over layers and the measured contexts) at the last
    measured step, in %, in the order of ``result["seeds"]``."""
    idx = [m for m, lab in enumerate(result["labels"]) if lab == label]
    return [100 * float(np.mean(result["final"][q][m])) for m in idx]


def table_intervals(result: dict) -> dict:
    """Tables 1 and 2 (means over layers): per seed, the Student-t interval, the
    prediction interval for one new seed, and the paper's average."""
    out = {}
    for name, (label, q) in TABLES.items():
        per_seed = seed_means(result, label, q)
        out[name] = {"seed_means": per_seed, "t": t_interval(per_seed),
                     "prediction": prediction_interval(per_seed),
                     "paper": float(np.mean(PAPER[label, q]))}
    return out


def final_losses(result: dict) -> dict:
    """{label: [final test loss per seed]} in nats per character."""
    out = {FULL: [], NO_SCALING: []}
    for label, h in zip(result["labels"], result["histories"]):
        out[label].append(float(h["test_loss"][-1]))
    return out


def loss_difference(result: dict) -> dict:
    """No scaling minus full LayerNorm, paired by seed: the final differences with their
    t interval, and at every evaluation step the mean difference over seeds."""
    h = dict(zip(zip(result["labels"], result["seeds"]), result["histories"]))
    seeds = list(dict.fromkeys(result["seeds"]))
    per_step = np.asarray([np.asarray(h[NO_SCALING, s]["test_loss"])
                           - np.asarray(h[FULL, s]["test_loss"]) for s in seeds])
    final = per_step[:, -1].tolist()
    steps = list(h[FULL, seeds[0]]["step"])
    mean = per_step.mean(axis=0)
    # the first step from which the mean difference stays below zero
    later_neg = np.flip(np.logical_and.accumulate(np.flip(mean < 0)))
    since = next((steps[i] for i, v in enumerate(later_neg) if v), None)
    return {"final": final, "t": t_interval(final), "steps": steps,
            "mean_per_step": mean.tolist(), "negative_since": since}


def data_references(result: dict) -> dict:
    """The unigram and bigram test losses of the run's data (nats per token)."""
    from lncourse.lm import reference_losses
    from lncourse.selectability.lm import KeysLMConfig, tokenized
    lm = KeysLMConfig(**{k: tuple(v) if isinstance(v, list) else v
                         for k, v in result["config"]["lm"].items()})
    tok, train_ids, test_ids = tokenized(lm)
    return reference_losses(train_ids, test_ids, tok.vocab_size)


def drift(result: dict, label: str, q: str, early: int = 400) -> dict:
    """A table's quantity (mean over layers, seeds and the curve's contexts) at step
    ``early`` and at the last stored step, beside the paper's average; its change from
    ``early`` to the last step; and the settling test: the change over the last steps
    since ``SETTLE_SINCE``. Each change is paired by model and context, with the 95%
    Student-t interval over seeds (:func:`seeds_measure.late_change`): with three seeds
    the bootstrap is about their range, too narrow to judge a trend."""
    steps, vals = curve(result, label, q)
    level = dict(zip(steps, vals.mean(axis=1).tolist()))
    change = late_change(result, label, q)
    fall = late_change(result, label, q, since=early)
    return {"early_step": early, "early": level[early], "last_step": steps[-1],
            "last": level[steps[-1]], "paper": float(np.mean(PAPER[label, q])),
            "change": tuple(float(v) for v in change),
            "change_since_early": tuple(float(v) for v in fall),
            "settled": bool(-SETTLE_BAND < change[1] and change[2] < SETTLE_BAND)}


def table2_drift(result: dict, early: int = 400) -> dict:
    """:func:`drift` of Table 2's quantity (full LayerNorm, before it)."""
    return drift(result, FULL, "before", early)


def table1_drift(result: dict, early: int = 400) -> dict:
    """:func:`drift` of Table 1's quantity (no scaling, after ``ln1``); ``early``
    defaults to the length of the one-seed stored run."""
    return drift(result, NO_SCALING, "after", early)


def _ci(e, unit: str = "%", digits: int = 1) -> str:
    return f"{e[0]:.{digits}f}{unit} [{e[1]:.{digits}f}, {e[2]:.{digits}f}]"


def stats_claims(result: dict, refs: dict) -> list[Claim]:
    """The replication page's statements on intervals, losses and Table 2's settling,
    checked against the seeded run ``result`` and its data's ``refs`` (unigram, bigram)."""
    tab = table_intervals(result)
    out = []
    for name, title in (("table1", "Table 1"), ("table2", "Table 2")):
        e = tab[name]
        inside_t = e["t"][1] <= e["paper"] <= e["t"][2]
        inside_p = e["prediction"][1] <= e["paper"] <= e["prediction"][2]
        want = (True, True) if name == "table1" else (False, True)
        out.append(Claim(
            f"{name}_t", f"{title}'s quantity per seed: " + ", ".join(
                f"{v:.1f}%" for v in e["seed_means"]) + f"; mean {_ci(e['t'])} (95% "
            f"Student-t over {len(e['seed_means'])} seeds); one new seed would fall in "
            f"[{e['prediction'][1]:.1f}, {e['prediction'][2]:.1f}] (95% prediction "
            f"interval). The paper's {e['paper']:.1f}%, one model, lies "
            f"{'inside' if inside_t else 'outside'} the first interval and "
            f"{'inside' if inside_p else 'outside'} the second.",
            (inside_t, inside_p) == want,
            {"seed_means": e["seed_means"], "t": e["t"], "prediction": e["prediction"],
             "paper": e["paper"]}))
    losses, diff = final_losses(result), loss_difference(result)
    worst = max(max(v) for v in losses.values())
    out.append(Claim(
        "loss_no_scaling_lower",
        f"Final test loss (nats per character; unigram {refs['unigram']:.3f}, bigram "
        f"{refs['bigram']:.3f}): full LayerNorm " + ", ".join(
            f"{v:.3f}" for v in losses[FULL]) + "; no scaling " + ", ".join(
            f"{v:.3f}" for v in losses[NO_SCALING]) + ". No scaling minus full "
        "LayerNorm, paired by seed: " + ", ".join(f"{v:+.3f}" for v in diff["final"])
        + f"; mean {_ci(diff['t'], '', 3)} (95% Student-t), an interval that "
        f"{'contains' if diff['t'][1] <= 0 <= diff['t'][2] else 'excludes'} zero.",
        bool(all(v < 0 for v in diff["final"]) and diff["t"][1] <= 0 <= diff["t"][2]
             and worst < refs["bigram"] - 0.1),
        {"full": losses[FULL], "no_scaling": losses[NO_SCALING], "diff": diff["final"],
         "t": diff["t"], "refs": refs}))
    below = {k: [refs["bigram"] - v for v in vs] for k, vs in losses.items()}
    learned = {k: sum(x >= LEARNED_MARGIN for x in xs) for k, xs in below.items()}
    n_models = sum(len(xs) for xs in below.values())
    out.append(Claim(
        "learned_by_the_bar",
        "Below the bigram table by (nats per character): full LayerNorm " + ", ".join(
            f"{x:.2f}" for x in below[FULL]) + "; no scaling " + ", ".join(
            f"{x:.2f}" for x in below[NO_SCALING]) + ". Every model is below it, and "
        f"{sum(learned.values())} of the "
        f"{n_models} clear the course's bar for 'learned' ({LEARNED_MARGIN} nats below "
        f"the table): {learned[FULL]} with full LayerNorm, {learned[NO_SCALING]} without "
        "scaling.",
        bool(all(x > 0 for xs in below.values() for x in xs)),
        {"below": below, "learned": learned, "n_models": n_models,
         "margin": LEARNED_MARGIN}))
    since = diff["negative_since"]
    out.append(Claim(
        "loss_negative_since",
        "The mean over seeds of that difference is below zero at every evaluation from "
        f"step {since:,} on." if since is not None else
        "The mean over seeds of that difference is not below zero at the last step.",
        since is not None and since <= LOSS_FROM_STEP, {"since": since}))
    d = table1_drift(result)
    f = d["change_since_early"]
    out.append(Claim(
        "table1_training",
        f"Table 1's quantity (the same means) is {d['early']:.1f}% at step "
        f"{d['early_step']:,} and {d['last']:.1f}% at step {d['last_step']:,}: a change "
        f"of {f[0]:+.1f} points [{f[1]:+.1f}, {f[2]:+.1f}] (95% Student-t over seeds), "
        f"from {'above' if d['early'] > d['paper'] else 'below'} the paper's "
        f"{d['paper']:.1f}% to {'below' if d['last'] < d['paper'] else 'above'} it.",
        bool(f[2] < 0 and d["early"] > d["paper"] > d["last"]), d))
    d = table2_drift(result)
    c, f = d["change"], d["change_since_early"]
    out.append(Claim(
        "table2_not_settled",
        f"Table 2's quantity (mean over layers, seeds and the {result['curve_contexts']} "
        f"contexts measured at every stored step) is {d['early']:.1f}% at step "
        f"{d['early_step']:,} and {d['last']:.1f}% at step {d['last_step']:,} (paper "
        f"{d['paper']:.1f}%): a change of {f[0]:+.1f} points [{f[1]:+.1f}, {f[2]:+.1f}] "
        f"(paired by model and context, 95% Student-t over seeds), away from the paper's "
        f"value. Over the last {d['last_step'] - SETTLE_SINCE:,} steps it changed by "
        f"{c[0]:+.1f} points [{c[1]:+.1f}, {c[2]:+.1f}]: "
        f"{'inside' if d['settled'] else 'not inside'} the ±{SETTLE_BAND:.0f} points of "
        f"Table 1's settling test, and " + (
            f"an interval that contains zero: three seeds neither show it still "
            f"falling nor rule out a fall of {-c[1]:.0f} points." if c[1] <= 0 <= c[2]
            else "an interval that excludes zero."),
        bool(not d["settled"] and f[2] < 0 and c[1] <= 0 <= c[2]
             and abs(d["last"] - d["paper"]) > abs(d["early"] - d["paper"])),
        d))
    return out


# Written on 2026-11-27 while the continuation stood at step 34,200 of 50,000, before any
# of its weights past step 34,000 were measured: Table 1's quantity is predicted to move
# by less than this many points from step 34,000 to 50,000 (the mean over seeds of each
# model's change, mean over layers and contexts, with its 95% Student-t interval inside
# the band), as it moved by less than it over the 10,000 steps before 34,000.
T1_50K_BAND = 2.0


def continuation_claims(cont: dict) -> list[Claim]:
    """The statements on Table 1 at the released code's step 50,000, from the export of
    :mod:`lncourse.evidence.selectability.seeds_continue` (``cont``): the level with its
    intervals beside the paper's, and the prediction of :data:`T1_50K_BAND`."""
    start, last = sorted(cont["fractions"], key=int)
    per = {s: [100 * float(np.mean(m)) for m in cont["fractions"][s]["after"]]
           for s in (start, last)}
    paper = float(np.mean(PAPER[NO_SCALING, "after"]))
    t, p = t_interval(per[last]), prediction_interval(per[last])
    change = t_interval(np.subtract(per[last], per[start]))
    inside = -T1_50K_BAND < change[1] and change[2] < T1_50K_BAND
    paper_in = bool(p[1] <= paper <= p[2])
    return [
        Claim("table1_50000", f"At step {int(last):,}, Table 1's quantity per seed: "
              + ", ".join(f"{v:.1f}%" for v in per[last]) + f"; mean {_ci(t)} (95% "
              f"Student-t); one new seed would fall in [{p[1]:.1f}, {p[2]:.1f}]; the "
              f"paper's {paper:.1f}% lies {'inside' if paper_in else 'outside'}"
              " that prediction interval.", paper_in,
              {"per_seed": per[last], "t": t, "prediction": p, "paper": paper,
               "prediction_width": p[2] - p[1]}),
        Claim("table1_34000_to_50000", f"From step {int(start):,} to {int(last):,} it "
              f"changed by {change[0]:+.1f} points [{change[1]:+.1f}, {change[2]:+.1f}] "
              f"(per seed, 95% Student-t): {'inside' if inside else 'outside'} the "
              f"±{T1_50K_BAND:.0f} points predicted before the run finished.", inside,
              {"change": change, "per_seed_start": per[start]})]
