"""What chapter 3 concludes, computed from the stored runs (chapter 3).

Each sentence of the chapter's conclusion that states an effect or an ordering is a
:class:`Claim` here: its text carries the numbers it rests on, and ``holds`` says whether
the stored results support it. The chapter prints the claims; a test checks that every
one holds, so the prose cannot outlive its evidence. :func:`claims` lists them all: the
replication, the factorial effects, the interventions, the sensitivity grid, the queries,
the uniformity of attention and the 3-d run, and (from :func:`cost_claims`,
:func:`paper_distance_claim` and :func:`data_seed_claim`) what the projection costs, the
margin called negligible, our distance from the paper's curves and the data seed.

The yardstick for "small" is the scale's main effect: an effect is called negligible when
the data rule it out beyond :data:`NEGLIGIBLE` of that (two one-sided t tests at the 5%
level); that constant carries its rationale, and the verdict reports the equivalence
result against it. The claims are :class:`lncourse.evidence.claims.Claim` objects (the
mechanism every chapter shares), and :mod:`lncourse.evidence.majority.ledger` puts their
texts into chapter 3's ledger of reported numbers.
"""

from __future__ import annotations

import math

import numpy as np
import torch

from lncourse.majority import stats as ST, task as majority
from lncourse.evidence.claims import Claim
from lncourse.majority.task import effective_queries, query_angles
from lncourse.majority.config import MajorityConfig
from lncourse.majority.train import initial_model

__all__ = ["Claim", "NEGLIGIBLE", "NEGLIGIBLE_RATIONALE", "claims", "cost_claims",
           "paper_distance_claim", "data_seed_claim", "fmt_ci", "grid_cells",
           "uniformity_stats"]

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
    to 80% per cell (:func:`grid_cells`)."""
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


def _complete(run: dict) -> bool:
    return run["step"][-1] == run["config"]["steps"]


def _interval(e: tuple[float, float, float], fmt: str = "{:+.3f}") -> str:
    return f"[{fmt.format(e[1])}, {fmt.format(e[2])}]"


def _ci(e: tuple[float, float, float], fmt: str = "{:+.3f}") -> str:
    """mean [low, high] of a (mean, low, high) interval."""
    return f"{fmt.format(e[0])} {_interval(e, fmt)}"


def _paired(per_seed: dict[str, np.ndarray], a: str, b: str):
    return ST.paired_interval(per_seed[a] - per_seed[b])


def _reached(run: dict, threshold: float) -> tuple[int, int]:
    """How many of a run's models of the 2 x 2 design reach ``threshold`` test accuracy."""
    acc = np.asarray(run["test_acc"])
    cols = [m for m, v in enumerate(run["variant"]) if v in ST.DESIGN]
    return int((acc[:, cols] >= threshold).any(axis=0).sum()), len(cols)


def grid_cells(paper: dict, grids: dict[int, dict],
               metric: str = "steps_to_90") -> dict[tuple[int, float], tuple[dict, int]]:
    """The sensitivity grid, cell by cell: (batch, lr) -> (variant -> ``metric`` per seed,
    for the 2 x 2 design; the last step its run reached, 0 for a run not yet started).
    grids: batch size -> the stored grid run;
    the cell of the paper's own setting comes from the paper run's first 5 seeds (the same
    models: same seeds, same batches)."""
    cells = {}
    for batch, run in sorted(grids.items()):
        lrs = sorted(set(run["lr"]) | ({paper["config"]["lr"]}
                                       if batch == paper["config"]["batch_size"] else set()))
        for lr in lrs:
            if batch == paper["config"]["batch_size"] and lr == paper["config"]["lr"]:
                n = len(run["config"]["seeds"])
                values = ST.per_seed(paper, metric, variants=tuple(ST.DESIGN))
                cells[(batch, lr)] = ({v: x[:n] for v, x in values.items()},
                                      int(paper["step"][-1]))
            else:
                cells[(batch, lr)] = (ST.per_seed(run, metric, lr=lr, variants=tuple(ST.DESIGN)),
                                      int(run["step"][-1]))
    return cells


def claims(paper: dict, grids: dict[int, dict], three_d: dict,
           data_seeds: dict[int, dict] | None = None, uniformity: dict | None = None
           ) -> list[Claim]:
    """The conclusion of chapter 3 from the paper-settings run (its first 5,000 steps are
    enough), the sensitivity grid (batch size -> stored grid run), the 3-d run and the
    runs on other data (data seed -> stored run; missing: that claim is pending).
    ``uniformity``: :func:`uniformity_stats` of ``paper`` if already computed."""
    if paper["step"][-1] < 5000:
        raise ValueError("the conclusion needs at least the first 5,000 steps of the paper run")
    out = []
    # 1. The replication: our released variant against the paper's curves.
    gaps = []
    for variant in ("layernorm", "no_projection_released"):
        c = ST.history_arrays(paper, variant)
        for step, ref in ST.PAPER["test_acc"][variant].items():
            if step in c["step"]:
                gaps.append((variant, step, ST.value_at(c["step"], c["test_acc"], step).mean(), ref))
    worst = max(abs(ours - ref) for *_, ours, ref in gaps)
    # "to within X" is a bound: the worst gap rounded up at the printed decimal, never
    # down (rounded to two decimals a gap of 0.0427 read "0.04", narrower than measured)
    bound = math.ceil(worst * 1000) / 1000
    detail = "; ".join(f"{v} at step {s:,}: {ours:.2f} (paper {ref:.2f})" for v, s, ours, ref in gaps
                       if s > 0)
    out.append(Claim("reproduces_paper",
                     f"Our runs reproduce the paper's curves to within {bound:.3f} in test "
                     f"accuracy at every reference step ({detail}).", worst <= 0.05,
                     {"worst_gap": worst, "bound": bound}))

    acc = ST.per_seed(paper, "mean_acc_to_5000")
    steps80 = ST.per_seed(paper, "steps_to_80")
    effects = ST.factorial_effects({v: acc[v] for v in ST.DESIGN})
    effects80 = ST.factorial_effects({v: steps80[v] for v in ST.DESIGN})
    scale = effects["scale"]
    small = NEGLIGIBLE * scale[0]

    # 2. The released variant is slower than LayerNorm, as the paper reports.
    d = _paired(acc, "no_projection_released", "layernorm")
    d80 = _paired(steps80, "no_projection_released", "layernorm")
    out.append(Claim("released_slower",
                     f"The released variant learns more slowly than LayerNorm: its mean test "
                     f"accuracy over steps 0–5,000 is lower by {-d[0]:.3f} (paired difference "
                     f"{_ci(d)}), and it needs {d80[0]:,.0f} more steps to reach 80% "
                     f"({_ci(d80, '{:+,.0f}')}).", d[2] < 0 and d80[1] > 0))

    # 3. The scale explains it.
    out.append(Claim("scale_drives_speed",
                     f"The scale explains the difference: the main effect of the scale √d "
                     f"against 1/√d is {_ci(scale)} in mean accuracy and "
                     f"{_ci(effects80['scale'], '{:+,.0f}')} in steps to 80%.",
                     scale[1] > 0 and effects80["scale"][2] < 0))

    # 4. The projection does not.
    proj = effects["projection"]
    proj_seed = ((acc["layernorm"] - acc["no_projection"])
                 + (acc["layernorm_released_scale"] - acc["no_projection_released"])) / 2
    bound = ST.equivalence_bound(proj_seed)
    out.append(Claim("projection_no_speedup",
                     f"The projection does not speed learning up: its main effect is "
                     f"{_ci(proj)} in mean accuracy (in steps to 80%: "
                     f"{_ci(effects80['projection'], '{:+,.0f}')}), and the data rule out a gain "
                     f"larger than {bound:.3f}, {bound / scale[0]:.0%} of the scale's effect.",
                     proj[2] < small and bound < small))

    # 5. At each scale separately.
    at_small = effects["projection_at_released_scale"]
    at_paper = effects["projection_at_paper_scale"]
    out.append(Claim("projection_at_each_scale",
                     f"At either scale alone the projection gains less than {NEGLIGIBLE:.0%} "
                     f"of the scale's effect: {_ci(at_paper)} at √d (LayerNorm against the paper's "
                     f"no-projection) and {_ci(at_small)} at 1/√d (the control against the "
                     f"released variant).", at_paper[2] < small and at_small[2] < small))

    # 5b. What the projection costs, the margin, LayerNorm at the released scale, the
    # distance from the paper's figure and the data seed.
    out += cost_claims(paper, grid_cells(paper, grids, "steps_to_80"))
    out.append(paper_distance_claim(paper))
    out.append(data_seed_claim(paper, data_seeds or {}))

    # 6. The other reading of "no projection" behaves like the first.
    sig = _paired(acc, "no_projection_sigma", "no_projection")
    out.append(Claim("other_reading_same",
                     f"The other reading of the paper's definition, x/σ(x−μ), learns like "
                     f"√d·x/‖x‖: paired difference {_ci(sig)} in mean accuracy.",
                     abs(sig[1]) < small and abs(sig[2]) < small))

    # 7. The interventions: signal is part of the story, not all of it.
    gap = -d[0]
    parts = []
    partial = True
    for v, name in (("no_projection_released_value_scaled", "W_V × 8 at initialisation"),
                    ("no_projection_released_gain", "a learned gain")):
        up = _paired(acc, v, "no_projection_released")
        left = _paired(acc, v, "layernorm")
        partial &= up[1] > 0 and left[2] < 0
        parts.append(f"{name} gains {up[0]:+.3f} {_interval(up)} on the released variant, "
                     f"{up[0] / gap:.0%} of its gap to LayerNorm")
    out.append(Claim("interventions_partial",
                     f"Restoring the signal speeds the released variant up, but closes only "
                     f"part of the gap: {'; '.join(parts)}.", partial))

    # 8. Robust to the regime: the sensitivity grid, one statement per batch size.
    cells90 = grid_cells(paper, grids, "steps_to_90")
    cells80 = grid_cells(paper, grids, "steps_to_80")
    for batch, run in sorted(grids.items()):
        if not _complete(run):
            out.append(Claim(f"grid_b{batch}",
                             f"Batch {batch}: pending, the grid run is at step "
                             f"{run['step'][-1]:,} of {run['config']['steps']:,}.", None))
            continue
        lrs = [lr for (b, lr) in cells90 if b == batch]
        e90 = {lr: ST.factorial_effects(cells90[(batch, lr)][0]) for lr in lrs}
        e80 = {lr: ST.factorial_effects(cells80[(batch, lr)][0]) for lr in lrs}
        scale_wins = all(e90[lr]["scale"][2] < 0 for lr in lrs)
        never_faster = all(e90[lr]["projection"][2] > 0 and e80[lr]["projection"][2] > 0
                           for lr in lrs)
        runs = [run] + ([paper] if batch == paper["config"]["batch_size"] else [])
        reached, total = map(sum, zip(*(_reached(r, 0.8) for r in runs)))
        open_cells = [lr for lr in lrs
                      if e90[lr]["projection"][1] < NEGLIGIBLE * e90[lr]["scale"][0]]
        fmt = "{:+,.0f}"
        text = (f"Batch {batch}, learning rates {', '.join(f'{lr:g}' for lr in lrs)}: the "
                f"paper's scale reaches 90% sooner at every learning rate (scale effect in "
                f"steps: {'; '.join(_ci(e90[lr]['scale'], fmt) for lr in lrs)}), and the "
                f"projection reaches 90% or 80% significantly sooner at none (its effect on "
                f"steps to 90%: {'; '.join(_ci(e90[lr]['projection'], fmt) for lr in lrs)}; "
                f"to 80%, which {reached} of its {total} models reach: "
                f"{'; '.join(_ci(e80[lr]['projection'], fmt) for lr in lrs)}).")
        if open_cells:
            text += (f" At lr {', '.join(f'{lr:g}' for lr in open_cells)} the intervals on "
                     f"steps to 90% are too wide to rule out a saving of {NEGLIGIBLE:.0%} of "
                     "the scale's effect: some seeds take several times as long as others, or "
                     "never get there (counted at the last step).")
        out.append(Claim(f"grid_b{batch}", text, scale_wins and never_faster))

    # 9. The queries: the alignment is real, and specific to LayerNorm.
    angles = {v: ST.history_arrays(paper, v)["query_angle"] for v in dict.fromkeys(paper["variant"])}
    ln_start, ln_end = angles["layernorm"][:, 0].mean(), angles["layernorm"][:, -1].mean()
    others = min(a[:, -1].mean() for v, a in angles.items() if v != "layernorm")
    out.append(Claim("queries_align_with_layernorm",
                     f"LayerNorm's queries turn towards 1 (mean angle {ln_start:.0f}° at the "
                     f"start, {ln_end:.0f}° at step {paper['step'][-1]:,}); every other variant "
                     f"ends at {others:.0f}° or more.", ln_end < ln_start / 2 and others > ln_end + 20))

    # 10. How uniform the attention is, at the start and at the end.
    out.append(_uniformity_claim(paper, uniformity))

    # 11. In three dimensions the projection costs accuracy.
    final = np.asarray(three_d["test_acc"])[-1]
    by = {v: final[[m for m, x in enumerate(three_d["variant"]) if x == v]]
          for v in dict.fromkeys(three_d["variant"])}
    W_E, W_in = (np.asarray(three_d["final_params"][k]) for k in ("W_E", "W_in"))
    ln_angle = np.mean([float(query_angles(effective_queries(
        torch.tensor(W_E[m]), torch.tensor(W_in[m]), "layernorm")).mean())
        for m, x in enumerate(three_d["variant"]) if x == "layernorm"])
    # paired by model seed (every variant of a seed starts from the same weights)
    seeds = {v: [three_d["seed"][m] for m, x in enumerate(three_d["variant"]) if x == v]
             for v in ("layernorm", "no_projection")}
    if seeds["layernorm"] != seeds["no_projection"]:
        raise ValueError(f"the 3-d run's variants have different seeds: {seeds}")
    d3 = ST.paired_interval(by["layernorm"] - by["no_projection"])
    out.append(Claim("three_d",
                     f"In three dimensions (Figure 1a/1b) LayerNorm's queries gather near 1 "
                     f"(mean angle {ln_angle:.0f}°), and the projection costs accuracy: "
                     f"{by['layernorm'].mean():.2f} against {by['no_projection'].mean():.2f} "
                     f"without it, a paired difference of {d3[0]:+.3f} [{d3[1]:+.3f}, "
                     f"{d3[2]:+.3f}] over {len(by['layernorm'])} seeds (95% t interval), "
                     f"the keys having a circle instead of a sphere.",
                     ln_angle < 15 and by["layernorm"].max() < by["no_projection"].min()
                     and d3[2] < 0,
                     {"layernorm": float(by["layernorm"].mean()),
                      "no_projection": float(by["no_projection"].mean()),
                      "difference": d3, "mean_angle_layernorm": float(ln_angle)}))
    return out


def uniformity_stats(paper: dict) -> dict[str, np.ndarray]:
    """Distance of attention from uniform and score spread, at the start and the end,
    per variant (means over seeds), on 2,000 test sequences: variant -> (tv start, std
    start, tv end, std end)."""
    config = MajorityConfig.from_dict(paper["config"])
    tokens, labels = majority.make_dataset(config.n_samples, config.seq_len, config.n_classes,
                                    config.min_margin, seed=config.data_seed)
    _, test_idx = majority.stratified_split(labels, 0.2, seed=config.data_seed)
    counts = majority.class_counts(tokens, config.n_classes)[test_idx[:2000]]
    final = {k: torch.tensor(v) for k, v in paper["final_params"].items()}
    stats = {}
    for v in dict.fromkeys(paper["variant"]):
        rows = []
        for m in [m for m, x in enumerate(paper["variant"]) if x == v]:
            init = majority.stack_params([initial_model(v, paper["seed"][m], config)])
            uniformity = majority.attention_uniformity
            rows.append(uniformity(init["W_E"][0], init["W_in"][0], v, counts, init["n1_gain"][0])
                        + uniformity(final["W_E"][m], final["W_in"][m], v, counts,
                                     final["n1_gain"][m]))
        stats[v] = np.mean(rows, axis=0)          # tv start, std start, tv end, std end
    return stats


def _uniformity_claim(paper: dict, stats: dict | None = None) -> Claim:
    """How uniform the attention is at the start and the end (:func:`uniformity_stats`)."""
    stats = uniformity_stats(paper) if stats is None else stats
    big = [v for v in stats if v in ("layernorm", "no_projection", "none", "no_projection_sigma")]
    small = [v for v in stats if v not in big]
    others = [v for v in big if v != "layernorm"]
    holds = (all(stats[v][0] > 0.1 and stats[v][2] < 0.05 for v in big)
             and all(stats[v][0] < 0.01 < stats[v][2] for v in small))
    return Claim(
        "uniform_by_other_routes",
        f"At the paper's scale every variant starts far from uniform attention (mean distance "
        f"{min(stats[v][0] for v in big):.2f} or more) and ends close to it "
        f"({max(stats[v][2] for v in big):.3f} or less): LayerNorm with its queries along 1, "
        f"the others by shrinking the spread of their scores, from "
        f"{min(stats[v][1] for v in others):.2f} or more to {max(stats[v][3] for v in others):.3f} "
        f"or less, without turning their queries. The variants at the released scale start "
        f"almost exactly uniform ({max(stats[v][0] for v in small):.4f} or less) and move away "
        f"from it as they learn ({min(stats[v][2] for v in small):.3f} or more at step "
        f"{paper['step'][-1]:,}): averaging is not what they lack.", holds)
