"""Chapter 4's checked claims about the position probe, from the stored results.

:func:`summary` gives the per-depth error of the all-positions probe
(:mod:`lncourse.evidence.nope.stream_run`) as a mean over seeds with a 95% t interval, and the depth
trend (per seed, the least-squares slope of the error against depth over depths
1 ... K; then its mean and interval over seeds). :func:`claims` states the comparison
with Chi et al.'s Figure 2 and the ablation's readings, each with the numbers it rests on
and whether it holds (None while too few models have finished), in the pattern of
:func:`lncourse.evidence.majority.claims.claims`. :func:`page_claims` are the chapter's own
sentences about the stored probe run and the ablation, checked the same way.
"""

from __future__ import annotations

import numpy as np

from lncourse.evidence.claims import Claim
from lncourse.summary import paired_interval

__all__ = ["summary", "depth_slope", "claims", "ablation_claims", "below_baseline_claims",
           "uniform_guess", "page_claims", "trained_claims", "decode_table", "decode_claims",
           "HYPOTHESES"]


def depth_slope(mae) -> float:
    """Least-squares slope of the error against depth over depths 1 ... K (depth 0, the
    LayerNorm of the raw inputs, carries no position by construction)."""
    y = np.asarray(mae, dtype=float)[1:]
    x = np.arange(1, len(y) + 1, dtype=float)
    x -= x.mean()
    return float((x * (y - y.mean())).sum() / (x * x).sum())


def t_interval(values) -> tuple[float, float, float] | None:
    v = np.asarray(values, dtype=float)
    return paired_interval(v) if len(v) >= 2 else None


def summary(stored: dict, key: str = "mae_classifier") -> dict:
    """Per kind (causal, bidirectional) of a stored run (``key``: which per-depth errors;
    ``"mae"`` for :mod:`lncourse.evidence.nope.probe`'s run): ``mae`` (mean per depth),
    ``ci`` ((low, high) per depth, None for one seed), ``slope`` (mean, low, high or
    None), ``mean_1_to_K`` (the error averaged over depths 1 ... K: mean, low, high or
    None), ``seeds``."""
    out = {}
    for kind, runs in stored["results"].items():
        if not runs:
            continue
        mae = np.array([r[key] for r in runs])                       # (seeds, K + 1)
        per_depth = [t_interval(mae[:, k]) for k in range(mae.shape[1])]
        out[kind] = {"mae": mae.mean(0).tolist(),
                     "ci": [None if c is None else (c[1], c[2]) for c in per_depth],
                     "slope": t_interval([depth_slope(m) for m in mae]),
                     "mean_1_to_K": t_interval(mae[:, 1:].mean(1)),
                     "seeds": len(runs), "per_seed": mae.tolist()}
    return out


def format_ci(e, fmt: str = "{:.1f}") -> str:
    return f"{fmt.format(e[0])} [{fmt.format(e[1])}, {fmt.format(e[2])}]"


def claims(stored: dict, ablation: dict | None = None, key: str = "mae_classifier"
           ) -> list[Claim]:
    """The verdict on Figure 2 from a stored probe run (``key`` as in :func:`summary`),
    and the ablation's readings."""
    s = summary(stored, key)
    base = stored["baseline"] if "baseline" in stored else \
        stored["results"]["causal"][0]["baseline"]
    c = s.get("causal")
    out = []
    if c is None or c["slope"] is None:
        n = 0 if c is None else c["seeds"]
        out.append(Claim("figure2", f"Too few causal models have finished ({n}) to compare "
                         "with Figure 2 (INCOMPLETE).", None))
    else:
        slope, level = c["slope"], c["mean_1_to_K"]
        falls, below = slope[2] < 0, level[2] < base
        out.append(Claim("falls_with_depth",
                         f"The causal probe's error changes by {format_ci(slope, '{:+.2f}')} "
                         f"positions per layer over depths 1–{len(c['mae']) - 1} "
                         f"({c['seeds']} seeds).", falls))
        out.append(Claim("below_baseline",
                         f"Averaged over depths 1–{len(c['mae']) - 1} the causal probe's "
                         f"error is {format_ci(level)}, against {base:.0f} for guessing the "
                         "middle.", below))
        out.append(Claim("reproduces_figure2",
                         "Figure 2's shape (the error falls with depth, below the baseline) "
                         + ("is reproduced." if falls and below else "is not reproduced."),
                         falls and below))
    if ablation is not None:
        out += ablation_claims(ablation)
    return out


# row -> (hypothesis, the depths' paired differences (row - base) that must agree)
HYPOTHESES = {
    "64_positions": ("Keeping 64 positions of each sequence instead of all 512 raises the "
                     "error", "raises"),
    "quarter_sequences": ("A quarter of the training sequences raises the error", "raises"),
    "regression": ("The regression probe's error differs from the paper's classifier's",
                   "differs"),
    "variance_feature": ("A probe given only the log variance of each vector before the "
                         "final LayerNorm has a lower error", "lowers"),
    "before_final_ln": ("Reading before the final LayerNorm lowers the error", "lowers"),
    "base_bfloat16": ("Held-out features computed in bfloat16 leave the error unchanged "
                      "(within 2 positions)", "same"),
}


def uniform_guess(seq_len: int) -> float:
    """MAE of guessing a position uniformly at random: (L² - 1) / (3L), 170.7 at L = 512
    (what a classifier that learned nothing does with its argmax; guessing the middle
    gives L / 4)."""
    return (seq_len ** 2 - 1) / (3 * seq_len)


def below_baseline_claims(ablation: dict) -> list[Claim]:
    """Per ablation row: is its error at the deepest probe below guessing the middle
    (the 95% interval over seeds entirely below it)?"""
    runs, depths = ablation["runs"], ablation["config"]["depths"]
    base = ablation["baseline"]
    out = []
    for row in runs[0]["mae"]:
        v = np.array([r["mae"][row][-1] for r in runs])
        if len(v) < 2:
            out.append(Claim(f"below_{row}", f"{row}: too few seeds (INCOMPLETE).", None))
            continue
        e = paired_interval(v)
        out.append(Claim(f"below_{row}", f"{row} at depth {depths[-1]}: {format_ci(e)} against "
                         f"{base:.0f} for guessing the middle.", bool(e[2] < base)))
    return out


def ablation_claims(ablation: dict) -> list[Claim]:
    """One claim per ablation row: a hypothesis fixed before the run, checked at the
    deepest probe (depth K) by the 95% interval over seeds of the paired difference to
    the base probe; the text gives the differences at every depth of the table."""
    runs, depths = ablation["runs"], ablation["config"]["depths"]
    out = []
    for row, (text, kind) in HYPOTHESES.items():
        if len(runs) < 2:
            out.append(Claim(f"ablation_{row}", f"{text}: too few seeds have run "
                             "(INCOMPLETE).", None))
            continue
        d = [paired_interval(np.array([r["mae"][row][i] - r["mae"]["base"][i] for r in runs]))
             for i in range(len(depths))]
        last = d[-1]
        holds = {"raises": last[1] > 0, "lowers": last[2] < 0,
                 "differs": last[1] > 0 or last[2] < 0,
                 "same": -2 < last[1] and last[2] < 2}[kind]
        detail = "; ".join(f"depth {k}: {format_ci(e, '{:+.1f}')}" for k, e in zip(depths, d))
        out.append(Claim(f"ablation_{row}", f"{text} (paired difference to the base probe, "
                         f"{len(runs)} seeds: {detail}).", bool(holds)))
    return out


def page_claims(stored: dict, ablation: dict) -> list[Claim]:
    """The sentences chapter 4 states about the stored probe run (``mae``, the regression
    probe) and the ablation, each checked: no trend with depth, the error after 0 layers
    above the baseline, the classifier not below it, the probe's form the one choice whose
    effect the intervals resolve, and no probe significantly below the baseline."""
    c = summary(stored, key="mae")["causal"]
    base = stored["results"]["causal"][0]["baseline"]
    slope, lo0 = c["slope"], c["ci"][0]
    runs, depths = ablation["runs"], ablation["config"]["depths"]
    deep = paired_interval(np.array([r["mae"]["base"][-1] for r in runs]))
    resolved = sorted(k.key.removeprefix("ablation_") for k in ablation_claims(ablation)
                      if k.holds)
    below = [k.key.removeprefix("below_") for k in below_baseline_claims(ablation) if k.holds]
    return [
        Claim("no_trend", f"The causal probe's error has no trend with depth: "
              f"{format_ci(slope, '{:+.2f}')} positions per layer.", slope[1] < 0 < slope[2]),
        Claim("depth0_above_baseline", f"After 0 layers the causal probe's error is "
              f"{c['mae'][0]:.1f} [{lo0[0]:.1f}, {lo0[1]:.1f}], above the baseline "
              f"{base:.0f}.", lo0[0] > base),
        Claim("classifier_not_below", f"At depth {depths[-1]} the paper's classifier "
              f"averages {format_ci(deep)}, not below the {ablation['baseline']:.0f} of guessing "
              "the middle.", deep[2] >= ablation["baseline"]),
        Claim("form_resolved", "Of the ablation's choices, the intervals resolve the "
              f"effect of the probe's form only (hypotheses that hold: {', '.join(resolved)}; "
              "bfloat16 is the check that nothing changes).",
              resolved == ["base_bfloat16", "regression"]),
        Claim("none_below_baseline", "No probe of the ablation is significantly below "
              f"guessing the middle at depth {depths[-1]} (below: {below or 'none'}).",
              not below),
    ]


def decode_table(decode: dict) -> dict[str, list[tuple[float, float, float]]]:
    """Per reading of the classifier (argmax, median, mean; ``nope/decode_cpu.json``), per
    depth: the mean error over seeds and its 95% t interval."""
    runs = decode["runs"]
    return {k: [paired_interval(np.array([r["mae"][k][i] for r in runs]))
                for i in range(len(decode["config"]["depths"]))] for k in decode["readings"]}


def decode_claims(decode: dict) -> list[Claim]:
    """The sentences chapter 4 states about the classifier read three ways: at depth 0 the
    argmax errs like a uniform random guess and the median like guessing the middle; the
    median's error is below the argmax's at every depth (paired over seeds); the median's
    interval contains guessing the middle at every depth, and the mean's is not below it
    at the deepest probe; and there the mean is below the
    median, which a calibrated posterior would not allow (the median minimises the
    expected absolute error under the posterior)."""
    runs, depths = decode["runs"], decode["config"]["depths"]
    base, uni = decode["baseline"], uniform_guess(decode["config"]["seq_len"])
    t = decode_table(decode)

    def diff(a, b, i):
        return paired_interval(np.array([r["mae"][a][i] - r["mae"][b][i] for r in runs]))

    a0, m0 = t["argmax"][0], t["median"][0]
    d = [diff("median", "argmax", i) for i in range(len(depths))]
    deep = {k: t[k][-1] for k in ("median", "mean")}
    mm = diff("mean", "median", -1)
    return [
        Claim("decode_depth0", f"After {depths[0]} layers, where nothing of the position "
              f"can be read, the argmax errs by {format_ci(a0)}, like a uniform random guess "
              f"({uni:.1f}); the median of the same posterior by {format_ci(m0)}, like guessing "
              f"the middle ({base:.0f}).",
              bool(a0[1] <= uni <= a0[2] and abs(m0[0] - base) < abs(m0[0] - uni))),
        Claim("decode_median_lower", "At every depth the median's error is below the "
              f"argmax's (paired difference, {len(runs)} seeds: " + "; ".join(
                  f"depth {k}: {format_ci(e, '{:+.1f}')}" for k, e in zip(depths, d)) + ").",
              all(e[2] < 0 for e in d)),
        Claim("decode_none_below", "Read by its median, the classifier cannot be told "
              f"from guessing the middle ({base:.0f}) at any depth: every interval contains "
              "it (" + "; ".join(f"depth {k}: {format_ci(e)}" for k, e in zip(depths, t["median"]))
              + f"). Read by its mean, at depth {depths[-1]} it errs by "
              f"{format_ci(deep['mean'])}, not below the middle either.",
              all(e[1] <= base <= e[2] for e in t["median"]) and deep["mean"][2] >= base),
        Claim("decode_overconfident", f"At depth {depths[-1]} the mean's error is below "
              f"the median's ({format_ci(mm, '{:+.1f}')}), which cannot happen on average for a "
              "calibrated posterior: the probe's probabilities are not calibrated.",
              bool(mm[2] < 0)),
    ]


def trained_claims(stored: dict) -> list[Claim]:
    """The sentences chapter 4 states about its trained NoPE language model
    (``results/nope/trained_lm.json``), from the per-layer summaries recomputed from the
    stored curves (:func:`lncourse.evidence.nope.trained.summary`; intervals are 95% t intervals
    over the groups of windows)."""
    from lncourse.evidence.nope.trained import bigram_loss, summary as layer_summary

    before, after = layer_summary(stored["before"]), layer_summary(stored["after"])
    bigram = bigram_loss()
    b0, a0 = before[0], after[0]
    lo_after = min(l["slope_ci"][0] for l in after)
    top_unif = max(l["uniformity_ci"][1] for l in after)
    low_unif_before = min(l["uniformity_ci"][0] for l in before)
    loss = stored["history"]["test_loss"]
    return [
        Claim("trained_init_layer0", f"At initialisation layer 0's variance falls with "
              f"position: slope {b0['slope']:.2f} [{b0['slope_ci'][0]:.2f}, "
              f"{b0['slope_ci'][1]:.2f}], below -0.85.", b0["slope_ci"][1] < -0.85),
        Claim("trained_no_shrinkage", "After training no layer's variance falls like 1/m: "
              f"the lowest interval of a slope starts at {lo_after:+.2f}, above -0.5.",
              lo_after > -0.5),
        Claim("trained_layer0_rises", f"Training raises layer 0's slope from "
              f"{b0['slope']:.2f} to {a0['slope']:+.2f}, by more than 0.5.",
              a0["slope_ci"][0] - b0["slope_ci"][1] > 0.5),
        Claim("trained_not_uniform", "Training makes every layer's attention far from "
              f"uniform: uniformity above {low_unif_before:.3f} at initialisation, below "
              f"{top_unif:.2f} after (1: uniform).",
              low_unif_before > 0.99 and top_unif < 0.5),
        Claim("trained_learned", f"The model learned: test loss {loss[0]:.2f} -> "
              f"{loss[-1]:.2f} nats per character.", loss[-1] < loss[0] - 1.0),
        Claim("trained_bigram", f"But no better than the bigram table: {loss[-1]:.2f} "
              f"against its {bigram:.2f} nats per character (within 0.1).",
              abs(loss[-1] - bigram) < 0.1),
    ]
