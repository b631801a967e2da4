"""Chapter 3's claims about what the projection costs, the margin called negligible, our
distance from the paper's curves and the data seed (chapter 3).

Each function returns :class:`lncourse.evidence.claims.Claim` objects computed from the stored
runs; :func:`lncourse.evidence.majority.verdict.claims` lists them with the rest of the verdict.
"""

from __future__ import annotations

import numpy as np

from lncourse.majority import stats as ST
from lncourse.evidence.claims import Claim

__all__ = ["NEGLIGIBLE", "NEGLIGIBLE_RATIONALE", "cost_claims", "paper_distance_claim",
           "data_seed_claim", "fmt_ci"]

# The margin below which an effect of the projection is called negligible, as a fraction
# of the scale's main effect on the same metric. Rationale: the question is whether the
# projection, rather than the scale, explains the paper's speed-up; an effect of a fifth
# of the scale's is too small to be that explanation. It was NOT pre-registered: the first
# version of this chapter chose it after seeing the paper run's results. It is fixed here,
# before the data-seed runs, and the verdict reports the equivalence result against it.
NEGLIGIBLE = 0.2
NEGLIGIBLE_RATIONALE = ("an effect that small cannot be what explains the paper's speed-up; "
                        "the margin was chosen after seeing the paper run, in the first "
                        "version of this chapter, not pre-registered")


def fmt_ci(e, fmt: str = "{:+.3f}") -> str:
    """mean [low, high] of a (mean, low, high) interval."""
    return f"{fmt.format(e[0])} [{fmt.format(e[1])}, {fmt.format(e[2])}]"


def cost_claims(paper: dict, cells80: dict) -> list[Claim]:
    """The projection's cost at the paper's settings, the margin, and LayerNorm at the
    released scale against the released variant. cells80: the sensitivity grid's steps
    to 80% per cell (:func:`lncourse.evidence.majority.verdict.grid_cells`)."""
    acc = ST.per_seed(paper, "mean_acc_to_5000")
    s80 = ST.per_seed(paper, "steps_to_80")
    last = int(paper["step"][-1])
    final = ST.per_seed(paper, f"acc_at_{last}")
    e_acc = ST.factorial_effects({v: acc[v] for v in ST.DESIGN})
    e80 = ST.factorial_effects({v: s80[v] for v in ST.DESIGN})
    e_fin = ST.factorial_effects({v: final[v] for v in ST.DESIGN})
    slower = [k for k, (vals, _) in cells80.items()
              if ST.factorial_effects(vals)["projection"][0] > 0]
    signif = [k for k, (vals, _) in cells80.items()
              if ST.factorial_effects(vals)["projection"][1] > 0]
    p, f = e_acc["projection"], e_fin["projection_at_paper_scale"]
    out = [Claim(
        "projection_costs_speed",
        f"The projection does not merely fail to speed learning up: it slows it down. Its "
        f"main effect on the mean test accuracy over steps 0–5,000 is {fmt_ci(p)}; on the "
        f"steps to reach 80% it is {fmt_ci(e80['projection'], '{:+,.0f}')} steps; the "
        f"models with the projection are slower to 80% in {len(slower)} of the "
        f"{len(cells80)} cells of the sensitivity grid (significantly in {len(signif)}); "
        f"and at step {last:,} LayerNorm's test accuracy is {-f[0]:.3f} lower than without "
        f"the projection at the same scale ({fmt_ci(f)}).",
        p[2] < 0 and e80["projection"][1] > 0 and len(slower) == len(cells80) and f[2] < 0,
        {"mean_acc": p, "steps_to_80": e80["projection"], "final_acc_at_paper_scale": f,
         "grid_cells_slower": len(slower), "grid_cells_significant": len(signif),
         "grid_cells": len(cells80)})]

    # the margin, and whether the projection's effect is within it (either sign)
    scale = e_acc["scale"][0]
    proj_seed = ((acc["layernorm"] - acc["no_projection"])
                 + (acc["layernorm_released_scale"] - acc["no_projection_released"])) / 2
    bound = ST.equivalence_bound(proj_seed)
    margin = NEGLIGIBLE * scale
    out.append(Claim(
        "negligible_margin",
        f"We call an effect negligible below {NEGLIGIBLE:.0%} of the scale's main effect, "
        f"here {margin:.3f} in mean accuracy ({scale:.3f} × {NEGLIGIBLE:g}): "
        f"{NEGLIGIBLE_RATIONALE}. Against it the projection's effect is equivalent to zero "
        f"by two one-sided tests (within ±{bound:.3f}, {bound / scale:.0%} of the scale's "
        f"effect) although it is not zero: a small, significant cost.",
        bound < margin and p[2] < 0,
        {"margin_fraction": NEGLIGIBLE, "margin": margin, "scale_effect": scale,
         "equivalence_bound": bound}))

    # LayerNorm shrunk to the released scale is slower than the released variant
    d = ST.paired_interval(s80["layernorm_released_scale"] - s80["no_projection_released"])
    da = ST.paired_interval(acc["layernorm_released_scale"] - acc["no_projection_released"])
    out.append(Claim(
        "released_scale_layernorm_slower",
        f"LayerNorm shrunk to the released scale is slower still than the released variant: "
        f"{fmt_ci(d, '{:+,.0f}')} steps to 80%, {fmt_ci(da)} in mean accuracy over steps "
        f"0–5,000.", d[1] > 0 and da[2] < 0, {"steps_to_80": d, "mean_acc": da}))
    return out


def paper_distance_claim(paper: dict) -> Claim:
    """How far our accuracy at the paper's step 1,000 is above its figure, and one cheap
    candidate cause: the paper counts 17 steps per epoch ("1000 epochs consisting of 17K
    steps", appendix E.1), the release 14.

    The paper's value is itself a mean over 10 seeds, read off a plot to two decimals, so
    the difference has three sources of error (issue 35, item 11): our 10-seed mean's
    standard error; the paper's, which it does not report and which we estimate as ours
    (the same protocol, seeds and number of seeds, so the same seed-to-seed spread is
    assumed); and the reading, rounding to 0.01 (uniform, standard deviation
    0.005/sqrt(3)). They add in quadrature. ``z`` keeps the old figure (our error only) for
    comparison; ``z_diff`` and the 95% interval ``diff_ci`` (t with 18 degrees of freedom)
    use the difference's error."""
    from scipy import stats as _stats

    parts, values, z_all, zd_all = [], {}, [], []
    steps = np.asarray(paper["step"], dtype=float)
    read_sd = 0.005 / np.sqrt(3)
    for v in ("layernorm", "no_projection_released"):
        c = ST.history_arrays(paper, v)
        ours = ST.value_at(c["step"], c["test_acc"], 1000)
        n = len(ours)
        se = ours.std(ddof=1) / np.sqrt(n)
        se_paper = se                              # estimated: the same spread, 10 seeds
        se_diff = float(np.sqrt(se ** 2 + se_paper ** 2 + read_sd ** 2))
        ref = ST.PAPER["test_acc"][v][1000]
        diff = float(ours.mean() - ref)
        z, z_diff = diff / se, diff / se_diff
        half = float(_stats.t.ppf(0.975, 2 * n - 2)) * se_diff
        at = 1000 * 14 / 17                       # the paper's step 1,000 at 17 steps/epoch
        mapped = float(np.mean([np.interp(at, steps, row) for row in c["test_acc"]]))
        z_all.append(z)
        zd_all.append(z_diff)
        values[v] = {"ours": float(ours.mean()), "se": float(se), "paper": ref, "z": float(z),
                     "se_paper_estimated": float(se_paper), "se_reading": float(read_sd),
                     "se_diff": se_diff, "z_diff": float(z_diff),
                     "diff_ci": (diff, diff - half, diff + half), "at_step_824": mapped}
        parts.append(f"{v}: {ours.mean():.3f} against {ref:.2f}, a difference of "
                     f"{fmt_ci(values[v]['diff_ci'])} ({z_diff:.1f} standard errors of the "
                     f"difference, {se_diff:.3f}); at step {at:,.0f}, {mapped:.3f}")
    return Claim(
        "step_1000_above_paper",
        f"At step 1,000 our test accuracy is {min(zd_all):.1f} to {max(zd_all):.1f} standard "
        f"errors of the difference above the paper's figure ({'; '.join(parts)}). The "
        f"difference's error counts our 10-seed mean, the paper's 10-seed mean (not "
        f"reported; estimated as ours) and reading its plot to 0.01; with our error alone "
        f"the distance would read {min(z_all):.1f} to {max(z_all):.1f}. One cheap candidate "
        f"cause: the paper's appendix counts 17,000 steps for its 1,000 epochs where the "
        f"released code takes 14 steps per epoch; if its step axis counts 17 per epoch, its "
        f"step 1,000 is our step 824 (interpolated), where our accuracies are the ones given "
        f"last, within "
        f"{max(abs(values[v]['at_step_824'] - values[v]['paper']) for v in values):.3f}"
        f" of the paper's. We cannot check its axis; the unseeded data (below) is another "
        f"candidate.", all(values[v]["diff_ci"][1] > 0 for v in values), values)


def data_seed_claim(paper: dict, others: dict[int, dict]) -> Claim:
    """The released variant against LayerNorm on each data seed (0: the paper run's first
    5 seeds; others: data seed -> stored run of ``MajorityConfig.other_data``), paired by
    model seed, on the mean accuracy over steps 0–5,000 and the steps to 80%."""
    missing = [k for k in (1, 2) if k not in others]
    if missing:
        return Claim("data_seed", "Data seeds: pending, no stored run on data seed "
                     + " or ".join(map(str, missing)) + " yet.", None)
    runs = {0: paper, **others}
    short = {k: int(r["step"][-1]) for k, r in runs.items() if r["step"][-1] < 5000}
    if short:
        return Claim("data_seed", "Data seeds: pending, the runs on other data are at steps "
                     + ", ".join(f"{s:,} (data seed {k})" for k, s in sorted(short.items()))
                     + " of the 5,000 the comparison needs.", None)
    effects, rows = {}, []
    for k, r in sorted(runs.items()):
        n = 5
        acc = ST.per_seed(r, "mean_acc_to_5000", variants=("layernorm", "no_projection_released"))
        s80 = ST.per_seed(r, "steps_to_80", variants=("layernorm", "no_projection_released"))
        ea = ST.paired_interval((acc["no_projection_released"] - acc["layernorm"])[:n])
        e8 = ST.paired_interval((s80["no_projection_released"] - s80["layernorm"])[:n])
        effects[k] = {"mean_acc": ea, "steps_to_80": e8}
        rows.append(f"data seed {k}: {fmt_ci(ea)} in mean accuracy, "
                    f"{fmt_ci(e8, '{:+,.0f}')} steps to 80%")
    means = np.array([e["mean_acc"][0] for e in effects.values()])
    holds = all(e["mean_acc"][2] < 0 and e["steps_to_80"][1] > 0 for e in effects.values())
    return Claim(
        "data_seed",
        f"On three datasets (data seeds 0, 1, 2; 5 model seeds each) the released variant is "
        f"slower than LayerNorm on every one: {'; '.join(rows)}. The effect on mean accuracy "
        f"ranges over {means.max() - means.min():.3f} across data seeds, "
        f"{'less' if means.max() - means.min() < abs(means.mean()) else 'more'} than its "
        f"size: the verdict does not hang on one dataset." if holds else
        f"The released variant is not slower than LayerNorm on every dataset: {'; '.join(rows)}.",
        holds, effects)
