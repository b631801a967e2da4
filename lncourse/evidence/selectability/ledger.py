"""Every number chapter 2 reports from its stored files, and its ledger (chapter 2).

:func:`reported` recomputes, from ``selectability/lm_paper.json`` (characters, contexts of
1,024), ``selectability/lm_quick_bpe.json`` (BPE tokens at the build's size),
``selectability/lm_paper_bpe.json`` (BPE tokens, contexts of 1,024) and
``selectability/seeds_table1.json`` (three seeds to 34,000 steps) and
``selectability/seeds_table1_50000.json`` (the no-scaling seeds carried on to the released
code's Table 1 checkpoint, step 50,000), each number the
chapter prints, plots or glues from them: per run, the line that says what ran
(:func:`lncourse.results.describe`), the tokenizer and the configuration the chapter
prints, per model its loss curves and final test loss, Tables 1 and 2 per layer at the
largest n, the curves against n and the Gaussian proxy, the LayerNorm's guard (smallest
variance over ε, smallest |γ|), the diagnostics at the largest n, the training curve, the
glued numbers of the discussion of the gap to Table 1 (:func:`measure.gap_summary`, its
stored part) and the text and verdict of each claim
(:func:`lncourse.evidence.selectability.claims.lm_claims`), the comparison of tokens at n = 1,024
with its claims (:func:`~lncourse.evidence.selectability.claims.tokenisation_claims`), the
paper-length BPE data's reference losses with a bigram whose smoothing is chosen on
held-out training text, and whether the BPE pair is below it
(:func:`~lncourse.evidence.selectability.claims.bpe_learning_claim`); for the
seeded runs the table with its bootstrap intervals, the curves
against the step and the text of every claim, and (:mod:`~lncourse.evidence.selectability.seeds_stats`)
the Student-t and prediction intervals over seeds, the final losses beside the data's
unigram and bigram losses, their paired difference and Table 2's settling test. What this build computes itself (its fast
run, the random-direction column, the Gaussian CVs drawn here) is not in it. The ledger
``results/selectability/reported.json`` holds them, written by::

    python -m lncourse.evidence.selectability.ledger

and ``tests/selectability/test_ledger.py`` recomputes them and compares
(:mod:`lncourse.evidence.claims`): editing any stored value they depend on, or the ledger, fails.
"""

from __future__ import annotations


import numpy as np

from lncourse.evidence.claims import ledger_main
from lncourse.results import RESULTS_DIR, describe, load_result
from lncourse.evidence.selectability import measure, seeds_measure, seeds_stats
from lncourse.evidence.selectability.claims import (bpe_learning_claim, bpe_references,
                                                    lm_claims,
                                                    tokenisation_at_paper_length,
                                                    tokenisation_claims)

__all__ = ["SOURCES", "load_runs", "reported", "main"]

SOURCES = {"stored": "selectability/lm_paper", "stored_bpe": "selectability/lm_quick_bpe",
           "paper_bpe": "selectability/lm_paper_bpe", "seeds": "selectability/seeds_table1",
           "continuation": "selectability/seeds_table1_50000"}
LEDGER = "selectability/reported"


def load_runs() -> dict:
    """The stored files chapter 2 reads: {"stored", "stored_bpe", "paper_bpe", "seeds",
    "continuation"} -> result."""
    return {key: load_result(name) for key, name in SOURCES.items()}


def _lm_run(res: dict) -> dict:
    """What the chapter shows of one stored Table 1/2 run."""
    c = res["config"]
    out = {"describe": describe(res),
           "tokenizer": {k: res["tokenizer"][k] for k in ("kind", "vocab_size")},
           "config": {k: c[k] for k in ("block_size", "batch_size", "steps", "lr")},
           "sweep_n": list(c["sweep"]),
           "tables": measure.layer_table(res), "curves": measure.sweep_curves(res),
           "proxy": {str(d): v for d, v in measure.proxy_curves(res).items()}, "models": {}}
    for label, m in res["models"].items():
        h, s = m["history"], m["sweep"]
        at_n = {q: np.asarray(s[q])[:, :, -1].mean() for q in ("before", "after")}
        out["models"][label] = {
            "final_test_loss": h["test_loss"][-1], "test_loss": h["test_loss"],
            "train_loss": h["train_loss"], "step": h["step"],
            "min_var_over_eps": s["min_var_over_eps"], "min_abs_gamma": s["min_abs_gamma"],
            "fraction_at_largest_n": at_n,
            "cv": {k: float(np.mean(s[k])) for k in ("cv_before", "cv_after", "raw_cv_before",
                                                     "raw_cv_after")},
            "distinct_at_largest_n": float(np.mean([c[-1] for c in s["distinct"]]))}
    steps, track = measure.training_curve(res)
    out["training_curve"] = {"step": steps, **track}
    return out


def _seeds(seeds: dict) -> dict:
    """What the chapter shows of the seeded runs."""
    rows = seeds_measure.layer_rows(seeds)
    out = {"describe": describe(seeds), "steps_done": seeds["steps_done"],
           "snapshot_steps_done": seeds["snapshot_steps_done"],
           "measured_contexts": seeds["measured_contexts"],
           "curve_contexts": seeds["curve_contexts"],
           "table": {f"{label}, {q}": rows[label, q] for label, q in rows},
           "table_t": {f"{label}, {q}": v for (label, q), v in seeds_measure.layer_rows(
               seeds, interval="t").items()},
           "curves": {}, "claims": {c.key: c for c in seeds_measure.claims(seeds)}}
    for label, q in ((measure.NO_SCALING, "after"), (measure.FULL, "before"),
                     (measure.FULL, "after")):
        steps, values = seeds_measure.curve(seeds, label, q)
        out["curves"][f"{label}, {q}"] = {"step": steps, "per_layer": values}
    # the replication page's intervals over seeds, losses and Table 2's settling test
    refs = seeds_stats.data_references(seeds)
    loss = seeds_stats.loss_difference(seeds)
    out["stats"] = {"tables": seeds_stats.table_intervals(seeds), "references": refs,
                    "final_losses": seeds_stats.final_losses(seeds),
                    "loss_difference": {k: loss[k] for k in ("final", "t",
                                                             "negative_since")},
                    "table2_drift": seeds_stats.table2_drift(seeds),
                    "table1_drift": seeds_stats.table1_drift(seeds),
                    "learning_rate": {"ours": seeds["config"]["lm"]["lr"],
                                      "paper": measure.PAPER_LR,
                                      "ratio": seeds["config"]["lm"]["lr"]
                                      / measure.PAPER_LR},
                    "claims": {c.key: c for c in seeds_stats.stats_claims(seeds, refs)}}
    return out


def _continuation(cont: dict) -> dict:
    """What the replication page shows of the no-scaling seeds carried on to step 50,000:
    the line that says what ran, each seed's last test loss, and the claims of
    :func:`lncourse.evidence.selectability.seeds_stats.continuation_claims` (their text and values)."""
    return {"describe": describe(cont), "steps_done": cont["steps_done"],
            "final_test_loss": [h["test_loss"][-1] for h in cont["histories"]],
            "provenance": _segments(cont["provenance"]),
            "claims": {c.key: c for c in seeds_stats.continuation_claims(cont)}}


def _segments(prov: dict) -> dict:
    """Where the continuation's steps ran, from its stored provenance: the sessions
    that resumed it, those that started from a tree with uncommitted changes
    (``+dirty``), and the devices other than the CPU of the export (``resumed_on``)."""
    resumed = prov.get("resumed_at_commits", [])
    dirty = [c for c in resumed if c.endswith("+dirty")]
    return {"started_at": prov["git_commit"][:7], "device": prov["device"],
            "resumes": len(resumed), "dirty_resumes": len(dirty),
            "dirty_commits": ", ".join(c[:7] + "+dirty" for c in dirty),
            "other_devices": "; ".join(prov.get("resumed_on", [])),
            "wall_seconds": prov["wall_seconds"]}


def reported(stored: dict, stored_bpe: dict, paper_bpe: dict, seeds: dict,
             continuation: dict) -> dict:
    """Every number chapter 2 reports from these stored files (see the module's
    docstring)."""
    gap = measure.gap_summary(stored, stored_bpe, stored_bpe)   # "fast" is the build's run
    structure = {}
    for label, q, name, dim in ((measure.NO_SCALING, "after", "ln1, no scaling (7-D)", 7),
                                (measure.FULL, "before", "resid_pre, full LN (8-D)", 8)):
        own = np.asarray(stored["models"][label]["sweep"][q])[:, :, -1].mean()
        structure[name] = {"own": 100 * own,
                           "gaussian": 100 * np.mean(stored["proxy"][str(dim)][-1])}
    bpe_refs = bpe_references(paper_bpe)
    return {"lm_paper": _lm_run(stored), "lm_quick_bpe": _lm_run(stored_bpe),
            "lm_paper_bpe": {**_lm_run(paper_bpe), "references": bpe_refs},
            "gap": {k: v for k, v in gap.items() if not k.startswith("fast_")},
            "tokenisation": tokenisation_at_paper_length(stored, paper_bpe, seeds),
            "lengths_or_directions": structure, "seeds_table1": _seeds(seeds),
            "seeds_table1_50000": _continuation(continuation),
            "claims": {c.key: c for c in lm_claims(stored, stored_bpe)
                       + tokenisation_claims(stored, paper_bpe, seeds)
                       + [bpe_learning_claim(paper_bpe, bpe_refs)]}}


def main(argv: list[str] | None = None):
    """``python -m lncourse.evidence.selectability.ledger``: write the ledger of chapter 2."""
    return ledger_main("lncourse.evidence.selectability.ledger", __doc__.split("\n\n")[0],
                       RESULTS_DIR / f"{LEDGER}.json",
                       lambda: (reported(**load_runs()),
                                {k: f"{v}.json" for k, v in SOURCES.items()}), argv)


if __name__ == "__main__":
    main()
