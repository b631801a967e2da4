"""Every number chapter 5 reports from its stored file, and its ledger (chapter 5).

:func:`reported` recomputes, from ``norms/real_paper.json`` (SmolLM2-135M and MiniLM on 32
passages), each number the chapter prints, plots or glues from it: the line that says
what ran (:func:`lncourse.results.describe`), per model its width, its norms' names and,
per statistic and norm, the mean over passages with its 95% interval (recomputed from
the stored per-passage values, :func:`lncourse.evidence.norms.real.summarize`), the glued
summaries (ratios to the chance level, counts of norms whose interval lies below or above
a level, growth, massive activations, slope ratios) and every claim of
:func:`lncourse.evidence.norms.claims.claims`; from ``norms/trained_heads.json`` the per-head
summary, test losses and claims; from ``norms/vlens.json`` (the V lens) the summary per
norm recomputed from the stored curves, the lens's parameters and the claims of
:func:`lncourse.evidence.norms.claims.vlens_claims`; from ``norms/logits.json`` (logit growth
with and without QK-norm) the summary recomputed from the stored records, each model's
final test loss and largest logits, and the claims of
:func:`lncourse.evidence.norms.claims.logits_claims`; and the replication page's review
(:mod:`lncourse.evidence.norms.review`): the bigram and unigram levels of the character data, where
each trained model sits against them, the majority arms' intervals corrected for the five
comparisons (from the arms' ledger) and DyT's position signal in absolute and relative
terms; and, under ``page/``, every number the replication page's prose quotes with the
``{ledger}`` role (:mod:`lncourse.evidence.norms.quoted`, which also reads the two
majority runs and the logit-growth run's weights). The ledger
``results/norms/reported.json`` holds them, written by::

    python -m lncourse.evidence.norms.ledger

and ``tests/norms/test_ledger.py`` recomputes them and compares (:mod:`lncourse.evidence.claims`):
editing any stored value they depend on (a per-passage value, a summary, the width), or
the ledger, fails. ``tests/norms/test_real.py`` recomputes the per-passage values
themselves from the models (the first and the last passage; all in its slow test).
"""

from __future__ import annotations


import numpy as np

from lncourse.evidence.claims import ledger_main, load_ledger
from lncourse.evidence.norms import (claims, context_use, majority_report, periln_report,
                                     quoted, real, review, trained)
from lncourse.norms.hidden import STATS, chance_abs_cos
from lncourse.results import RESULTS_DIR, describe, load_result

__all__ = ["SOURCE", "reported", "arms_from_ledger", "load_majority", "load_logits_weights",
           "main"]

SOURCE = "norms/real_paper"
HEADS = "norms/trained_heads"
VLENS = "norms/vlens"
LOGITS = "norms/logits"
CONTEXT = "norms/context_use"
RETRAINED = "norms/retrained_heads_cpu"
# The runs of lncourse.evidence.norms.retrained at d = 32, each read by _recipe_run: the
# ledger's key (under "review") and the stored result. The four norms of wide_cpu; DyT's
# two recipes of the released LLaMA code (dyt_cpu); DyT-scaled for twice the steps; each
# recipe at the rate dyt_cpu's sweep chose for the other.
RECIPE_RUNS = {"retrained_wide": "norms/retrained_heads_wide_cpu",
               "retrained_dyt": "norms/retrained_heads_dyt_cpu",
               "retrained_dyt_long": "norms/retrained_heads_dyt_long_cpu",
               "retrained_dyt_lr": "norms/retrained_heads_dyt_llama_lr_cpu",
               "retrained_dyt_high": "norms/retrained_heads_dyt_scaled_high_lr_cpu"}
LEDGER = "norms/reported"


def _model(m: dict) -> dict:
    s = {stat: real.summarize(np.asarray(m["per_passage"][stat])) for stat in STATS}
    chance = chance_abs_cos(m["d"])
    ratio = np.asarray(s["abs_cos_ones"]["mean"]) / chance
    random = np.asarray(s["abs_cos_random"]["mean"])
    norm = np.asarray(s["norm"]["mean"])
    return {"d": m["d"], "names": m["names"], "summary": s, "chance_abs_cos": chance,
            "ratio_to_chance": {"median": np.median(ratio), "min": ratio.min(),
                                "max": ratio.max()},
            "below_random": int((np.asarray(s["abs_cos_ones"]["high"]) < random).sum()),
            "above_random": int((np.asarray(s["abs_cos_ones"]["low"]) > random).sum()),
            "cos2_median_pct": 100 * np.median(s["cos2_ones"]["mean"]),
            "cos2_times_d": {"median": np.median(s["cos2_ones"]["mean"]) * m["d"],
                             "max": max(s["cos2_ones"]["mean"]) * m["d"]},
            "growth": norm[-1] / norm[0], "token0_largest_norm": max(s["norm_token0"]["mean"]),
            "massive_token0": max(s["massive_token0"]["mean"]),
            "massive_rest": max(s["massive_rest"]["mean"]),
            "rms_spread_median": np.median(s["rms_spread"]["mean"]),
            **{f"{stat}_median": np.median(s[stat]["mean"]) for stat in ("saturation",
                                                                         "saturation_rest")},
            **{f"{stat}_below_1": int((np.asarray(s[stat]["high"]) < 1).sum())
               for stat in ("saturation", "saturation_rest")},
            "strongest_bend": {"norm": m["names"][int(np.argmin(s["saturation"]["mean"]))],
                               "ratio": min(s["saturation"]["mean"]),
                               "without_token0": s["saturation_rest"]["mean"][
                                   int(np.argmin(s["saturation"]["mean"]))]}}


def _heads(stored: dict) -> dict:
    """What the chapter reports from the trained per-head run: the line that says what ran,
    the summary recomputed from the stored counts (and the stored one beside it), each
    model's last evaluated test loss, and the claims."""
    return {"describe": describe(stored), "config": stored["config"],
            "summary": trained.summarize(stored["models"]),
            "stored_summary": stored["summary"],
            "final_test_loss": {v: [r["history"]["test_loss"][-1] for r in runs]
                                for v, runs in stored["models"].items()},
            "claims": {text: holds for text, holds in claims.heads_claims(stored).items()}}


def _vlens(stored: dict) -> dict:
    """What the chapter reports from the V-lens run: the line that says what ran, the
    summary recomputed from the stored curves, the lens's parameters per arm and the
    claims."""
    from lncourse.norms import vlens

    cfg = vlens.VConfig.from_dict(stored["config"])
    return {"describe": describe(stored), "config": stored["config"],
            "summary": vlens.summarize(stored),
            "lens": {a: {k: v for k, v in vlens.predicted(a, cfg).items()
                         if k in ("tau2", "s_in", "crossover")} for a in cfg.arms},
            "claims": claims.vlens_claims(stored)}


def _logits(stored: dict) -> dict:
    """What the chapter reports from the logit-growth run: the line that says what ran,
    the summary recomputed from the stored records (and the stored one beside it), every
    model's final test loss, largest logit at initialisation and after training, and the
    claims."""
    from lncourse.evidence.norms import logits

    cfg = logits.LogitsConfig.from_dict(stored["config"])
    return {"describe": describe(stored), "config": stored["config"],
            "summary": logits.summarize(stored["models"], cfg),
            "stored_summary": stored["summary"],
            "models": {v: [{k: r[k] for k in ("seed", "lr", "initial_loss", "test_loss",
                                              "final_max_logit")}
                           | {"max_logit_at_0": r["history"]["max_logit"][0]}
                           for r in runs] for v, runs in stored["models"].items()},
            "claims": claims.logits_claims(stored)}


def _retrained(run: dict) -> dict:
    """What the page prints and glues from the DyT run trained with the recipe: the line
    that says what ran, each sweep run's last test loss, the chosen rate, the final test
    loss, its level, the largest distance of a sweep run from the unigram table, the
    report and the claims of :mod:`lncourse.evidence.norms.retrained`."""
    from lncourse.evidence.norms import retrained

    refs, dyt = run["references"], run["models"]["DyT"][0]
    sweep = [r["history"]["test_loss"][-1] for r in run["sweep"]["DyT"]]
    return {"describe": describe(run), "sweep_test_loss": sweep,
            "chosen_lr": dyt["lr"], "test_loss": dyt["test_loss"],
            "above_bigram": dyt["test_loss"] - refs["bigram"],
            "level": review.level(dyt["test_loss"], refs),
            "sweep_gap": max(abs(x - refs["unigram"]) for x in sweep),
            "report": retrained.report(run), "claims": retrained.claims(run)}


def _recipe_run(run: dict) -> dict:
    """A run of :mod:`lncourse.evidence.norms.retrained` at d = 32 (:data:`RECIPE_RUNS`): the
    line that says what ran, the chosen rates, the report (per seed, and across seeds), the
    claims, and the statements on why DyT stays at the unigram level
    (:func:`lncourse.evidence.norms.retrained.residual_claims`)."""
    from lncourse.evidence.norms import retrained

    return {"describe": describe(run), "chosen_lr": run["chosen_lr"],
            "report": retrained.report(run), "claims": retrained.claims(run),
            "residual_claims": retrained.residual_claims(run)}


def _review(heads: dict, vlens: dict, logits: dict, periln: dict, arms: dict,
            context: dict, retrained: dict, recipe_runs: dict) -> dict:
    """What the replication page adds for a reviewer (:mod:`lncourse.evidence.norms.review`): the
    data's bigram and unigram losses, where each trained model's loss sits against them
    and the claims on it, the majority arms' intervals corrected for multiplicity (from
    the arms' ledger, ``results/norms/majority_reported.json``, which
    ``tests/norms/test_majority.py`` guards), DyT's weaker position signal, and which
    stored models use their context (``norms/context_use.json``: each group's late-position
    gains over the bigram table and :func:`review.context_claims`), and the DyT run
    trained with the recipe (:func:`_retrained`), and the runs at d = 32 of
    :data:`RECIPE_RUNS` (``recipe_runs``: its keys to the loaded results), each read by
    :func:`_recipe_run`."""
    from lncourse.evidence.norms import logits as lg

    refs = review.char_references()
    summary = lg.summarize(logits["models"], lg.LogitsConfig.from_dict(logits["config"]))
    heads_loss = {v: float(np.mean([r["history"]["test_loss"][-1] for r in runs]))
                  for v, runs in heads["models"].items()}
    return {"references": refs,
            "heads_level": {v: review.level(x, refs) for v, x in heads_loss.items()},
            "claims": review.learning_claims(heads, summary, periln["summary"], refs),
            "arms_corrected": review.arms_corrected(arms),
            "dyt_signal": review.dyt_signal_ratio(vlens),
            "context": {"late_gain": {k: v["late_gain"] for k, v in
                                      context_use.verdicts(context).items()},
                        "claims": review.context_claims(context)},
            "retrained": _retrained(retrained),
            **{key: _recipe_run(recipe_runs[key]) for key in RECIPE_RUNS}}


def arms_from_ledger(run: str = "paper_batch") -> dict:
    """The majority arms' paired differences from LayerNorm as the arms' ledger holds
    them (``results/norms/majority_reported.json``): the part of
    :func:`lncourse.evidence.norms.majority_report.summary` that :func:`review.arms_corrected`
    reads, without recomputing the run (a minute of CPU)."""
    numbers = load_ledger(RESULTS_DIR / "norms" / "majority_reported.json")
    pre = f"{run}/"
    seeds = sorted(int(k.rsplit("/", 1)[1]) for k in numbers
                   if k.startswith(pre + "ran/seeds/"))
    arms = {}
    for k in numbers:
        head, _, tail = k.partition(pre + "arms/")
        if not head and "/vs_layernorm_90/" in tail:
            arm, _, i = tail.partition("/vs_layernorm_90/")
            arms.setdefault(arm, [None] * 3)[int(i)] = numbers[k]
    return {"ran": {"seeds": seeds}, "arms": {a: {"vs_layernorm_90": ci}
                                               for a, ci in arms.items()}}


def reported(stored: dict, heads: dict, vlens: dict, logits: dict,
             periln: dict | None = None, arms: dict | None = None,
             context: dict | None = None, retrained: dict | None = None,
             majority: dict | None = None, logits_weights: dict | None = None,
             **recipe_runs: dict) -> dict:
    """Every number chapter 5 reports from its stored files (see the module's docstring);
    the summaries are recomputed from the per-passage values and the per-head counts, so
    an edit of either shows. With ``periln`` (:func:`lncourse.evidence.norms.periln_report.reported`),
    ``arms`` (:func:`arms_from_ledger`), ``context``, ``retrained`` and every run of
    :data:`RECIPE_RUNS` by its key, also the replication page's review (:func:`_review`);
    with all of those, ``majority`` (the two stored majority runs by the keys of
    :data:`lncourse.evidence.norms.majority_report.RUNS`) and ``logits_weights`` (the
    logit-growth run's ``logits.pt``), also the numbers the page's prose quotes
    (``page``, :func:`lncourse.evidence.norms.quoted.numbers`)."""
    unknown = set(recipe_runs) - set(RECIPE_RUNS)
    if unknown:
        raise TypeError(f"reported() got runs it does not read: {sorted(unknown)}; "
                        f"the runs at d = 32 are {list(RECIPE_RUNS)}")
    parts = (periln, arms, context, retrained)
    whole = all(p is not None for p in parts) and set(recipe_runs) == set(RECIPE_RUNS)
    extra = {"review": _review(heads, vlens, logits, *parts, recipe_runs)} if whole else {}
    if whole and majority is not None and logits_weights is not None:
        extra["page"] = quoted.numbers(stored, heads, vlens, logits, logits_weights, periln,
                                       context, retrained, majority, recipe_runs)
    return {**extra, "describe": describe(stored), "n_passages": stored["config"]["n_passages"],
            "stored_summary": {k: m["summary"] for k, m in stored["models"].items()},
            "models": {k: _model(m) for k, m in stored["models"].items()},
            "claims": {text: holds for text, holds in claims.claims(stored).items()},
            "trained_heads": _heads(heads), "vlens": _vlens(vlens),
            "logits": _logits(logits)}


def load_majority() -> dict:
    """The two stored majority runs, by the keys of :data:`majority_report.RUNS`."""
    return {run: load_result(path) for run, path in majority_report.RUNS.items()}


def load_logits_weights() -> dict:
    """The logit-growth run's weights (``results/norms/logits.pt``)."""
    import torch

    return torch.load(RESULTS_DIR / f"{LOGITS}.pt", weights_only=True)


def main(argv: list[str] | None = None):
    """``python -m lncourse.evidence.norms.ledger``: write the ledger of chapter 5."""
    return ledger_main("lncourse.evidence.norms.ledger", __doc__.split("\n\n")[0],
                       RESULTS_DIR / f"{LEDGER}.json",
                       lambda: (reported(load_result(SOURCE), load_result(HEADS),
                                         load_result(VLENS), load_result(LOGITS),
                                         periln_report.reported(*periln_report.load()),
                                         arms_from_ledger(),
                                         load_result(CONTEXT),
                                         load_result(RETRAINED),
                                         load_majority(), load_logits_weights(),
                                         **{key: load_result(path) for key, path
                                            in RECIPE_RUNS.items()}),
                                {"stored": f"{SOURCE}.json", "heads": f"{HEADS}.json",
                                 "vlens": f"{VLENS}.json", "logits": f"{LOGITS}.json",
                                 "logits_weights": f"{LOGITS}.pt",
                                 "majority": {run: f"{path}.json" for run, path
                                              in majority_report.RUNS.items()}}),
                       argv)


if __name__ == "__main__":
    main()
