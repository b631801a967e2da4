"""What chapter 3 concludes, computed from the stored runs (chapter 3).

Each sentence of the chapter's conclusion that states an effect or an ordering is a
:class:`Claim` here: its text carries the numbers it rests on, and ``holds`` says whether
the stored results support it. The chapter prints the claims; a test checks that every
one holds, so the prose cannot outlive its evidence.

The yardstick for "small" is the scale's main effect: an effect is called negligible when
the data rule it out beyond :data:`lncourse.evidence.majority.claims.NEGLIGIBLE` of that (two
one-sided t tests at the 5% level); that constant carries its rationale, and the verdict
reports the equivalence result against it. The claims are
:class:`lncourse.evidence.claims.Claim` objects (the mechanism every chapter shares), and
:mod:`lncourse.evidence.majority.report` puts their texts into chapter 3's ledger of reported
numbers.
"""

from __future__ import annotations

import math

import numpy as np
import torch

from lncourse.majority import stats as ST, task as majority
from lncourse.evidence.claims import Claim
from lncourse.majority.task import effective_queries, query_angles
from lncourse.evidence.majority.claims import NEGLIGIBLE, cost_claims, data_seed_claim, paper_distance_claim
from lncourse.majority.config import MajorityConfig
from lncourse.majority.train import initial_model

__all__ = ["Claim", "NEGLIGIBLE", "claims", "grid_cells", "uniformity_stats"]


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
