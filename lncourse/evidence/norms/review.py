"""What a reviewer asks of chapter 5's claims before reading them (chapter 5's
replication page): how far each trained model learned, measured against the bigram and
unigram tables of its data (:func:`char_references`, :func:`level`,
:func:`learning_claims`); a comparison of several arms with LayerNorm corrected for
multiplicity (:func:`corrected_interval`, :func:`arms_corrected`); and DyT's weaker
position signal stated in absolute and in relative terms (:func:`dyt_signal_ratio`)."""

from __future__ import annotations

import functools

import numpy as np
from torch import Tensor

from lncourse import lm
from lncourse.norms.vlens import dyt_signal_ratio  # noqa: F401  (the ledger reads it here)
from lncourse.summary import corrected_interval  # noqa: F401  (review.corrected_interval)
from lncourse.text import char_streams

__all__ = ["char_references", "reference_losses", "level", "learning_claims",
           "periln_learning",
           "corrected_interval", "arms_corrected", "dyt_signal_ratio", "context_claims"]


# ------------------------------------------------------- how far each model learned
@functools.lru_cache(maxsize=1)
def char_references() -> dict[str, float]:
    """The test losses (nats per character) of the bigram and the unigram table of the
    character data that ``norms.trained``, ``norms.logits`` and ``norms.periln`` train
    on (all of Shakespeare, split by :func:`lncourse.text.split_text`), each fitted on
    the training split with add-one smoothing: what a model reaches that reads only the
    current character (bigram) or nothing at all (unigram)."""
    tok, train_ids, test_ids = char_streams()
    return reference_losses(train_ids, test_ids, tok.vocab_size)


def reference_losses(train_ids: Tensor, test_ids: Tensor, vocab_size: int) -> dict[str, float]:
    """Bigram and unigram test cross-entropy (nats per token) of tables counted on
    ``train_ids`` with add-one smoothing, read on every next token of ``test_ids``, as
    the course's core computes them (:func:`lncourse.lm.reference_losses`), after a
    check that every id lies in the vocabulary: (n,), (m,) -> floats."""
    if len(train_ids) < 2 or len(test_ids) < 2:
        raise ValueError("need at least two training and two test ids for a bigram table")
    if int(max(train_ids.max(), test_ids.max())) >= vocab_size or \
            int(min(train_ids.min(), test_ids.min())) < 0:
        raise ValueError(f"ids must lie in [0, {vocab_size}): got one outside")
    return dict(lm.reference_losses(train_ids, test_ids, vocab_size))


LEARNED_MARGIN = lm.LEARNED_MARGIN   # nats: the course's bar for "learned" (lncourse.lm)
LEVEL = 0.05           # nats: "at a table's level" means within this of it


def level(loss: float, refs: dict[str, float]) -> str:
    """Where a test loss sits against the data's tables: "below the bigram" (at least
    LEARNED_MARGIN below it), "bigram level", "unigram level" (within LEVEL), "above the
    bigram", or "between" (between the two tables, near neither)."""
    if not np.isfinite(loss):
        raise ValueError(f"a test loss must be finite, got {loss}")
    if loss <= refs["bigram"] - LEARNED_MARGIN:
        return "below the bigram"
    if abs(loss - refs["unigram"]) <= LEVEL:
        return "unigram level"
    if abs(loss - refs["bigram"]) <= LEVEL or loss < refs["bigram"]:
        return "bigram level"
    return "between" if loss < refs["unigram"] else "above the unigram"


def learning_claims(heads: dict, logits_summary: dict, periln_summary: dict,
                    refs: dict[str, float]) -> dict[str, bool]:
    """Which models of chapter 5 learned more than the bigram table (the reference every
    "after training" sentence needs): from the trained-heads run (each variant's mean final
    test loss over seeds), the logit-growth summary (:func:`lncourse.evidence.norms.logits.summarize`)
    and the Peri-LN summary (:func:`lncourse.evidence.norms.periln.summary`)."""
    loss = {v: float(np.mean([r["history"]["test_loss"][-1] for r in runs]))
            for v, runs in heads["models"].items()}
    pre = [c["test_loss"][0] for c in logits_summary["Pre-LN"]["per_lr"]]
    qk = [c["test_loss"][0] for c in logits_summary["QK-norm"]["per_lr"]]
    top = periln_summary["per_lr"][-2:]
    return {
        "no trained-heads model ends 0.3 nats or more below the bigram table":
            all(level(x, refs) != "below the bigram" for x in loss.values()),
        "the trained-heads DyT models end at the unigram level":
            level(loss["DyT"], refs) == "unigram level",
        "in the logit-growth run, Pre-LN's best mean test loss is more than 0.3 nats "
        "below the bigram table":
            min(pre) < refs["bigram"] - 0.3,
        "at the highest learning rate Pre-LN ends above the bigram table and QK-norm "
        "below it":
            pre[-1] > refs["bigram"] and qk[-1] < refs["bigram"],
        "at the two highest learning rates both Peri-LN variants end at the bigram level":
            all(level(r[v]["test_loss"][0], refs) == "bigram level"
                for r in top for v in ("Peri-LN", "Peri-LN-0.02")),
    }


def periln_learning(models: dict, summary: dict, refs: dict[str, float]) -> dict:
    """How far the Peri-LN run's models learned, by the course's bar (LEARNED_MARGIN below
    the bigram table), seed by seed: ``models`` as in the Peri-LN ledger (variant -> runs
    with ``lr``, ``seed``, ``test_loss``), ``summary`` its per-lr summary
    (:func:`lncourse.evidence.norms.periln.summary`, which holds Pre-LN's seeds as paired
    means and intervals). Returns the numbers the replication page prints and its claims."""
    bigram = refs["bigram"]
    below = {v: {} for v in models}
    for v, runs in models.items():
        for r in runs:
            below[v].setdefault(r["lr"], []).append(bigram - r["test_loss"])
    rows = {r["lr"]: r for r in summary["per_lr"]}
    pre_below = {lr: bigram - r["Pre-LN"]["test_loss"][0] for lr, r in rows.items()}
    pre_learned = [lr for lr, x in pre_below.items() if x >= LEARNED_MARGIN]
    top = max(pre_below, key=pre_below.get)         # the rate where Pre-LN learned most
    best = max((x, lr) for lr, xs in below["Peri-LN"].items() for x in xs)
    low = sorted(rows)[:2]
    return {
        "peri_ln_best_below": best[0], "peri_ln_best_lr": best[1],
        "pre_ln_mean_below": pre_below, "pre_ln_learned_lrs": pre_learned,
        "pre_ln_best_lr": top,
        "control_learned_seeds": {lr: sum(x >= LEARNED_MARGIN for x in xs)
                                  for lr, xs in below["Peri-LN-0.02"].items()},
        "claims": {
            "no Peri-LN model with γ_out = 1 ends 0.3 nats or more below the bigram "
            "table, at any learning rate or seed: by the course's bar it never learned":
                best[0] < LEARNED_MARGIN,
            "at the two lowest learning rates Pre-LN's mean test loss is less than 0.3 "
            "nats below the bigram table: the low-rate comparison is between models that "
            "barely learned":
                all(pre_below[lr] < LEARNED_MARGIN for lr in low),
            "Pre-LN's lowest mean test loss over the grid is 0.3 nats or more below the "
            "bigram table, and at that rate Peri-LN with γ_out = 1 is worse (paired "
            "interval above 0)":
                pre_below[top] >= LEARNED_MARGIN
                and rows[top]["Peri-LN"]["minus_pre_ln"][1] > 0}}


def arms_corrected(summary: dict) -> dict:
    """Each arm's paired difference from LayerNorm (steps to 90%) at its chosen lr, its
    95% interval and the interval corrected for the arms compared at once, with the
    claim the chapter makes of them."""
    n = len(summary["ran"]["seeds"])
    arms = {a: c["vs_layernorm_90"] for a, c in summary["arms"].items()
            if "vs_layernorm_90" in c}
    out = {a: {"nominal": ci, "corrected": list(corrected_interval(ci, n, len(arms)))}
           for a, ci in arms.items()}
    resolved = [a for a, c in out.items() if c["nominal"][2] < 0 or c["nominal"][1] > 0]
    return {"k": len(arms), "n": n, "arms": out, "claims": {
        "only the projection-free arm is resolved from LayerNorm nominally (95% interval)":
            resolved == ["no_projection"],
        "corrected for the arms compared at once, no arm's interval excludes 0":
            all(c["corrected"][1] < 0 < c["corrected"][2] for c in out.values())}}


SMALL_GAIN = 0.05      # nats: a late-position gain over the bigram table below this is "barely"


def context_claims(context: dict) -> dict[str, bool]:
    """Which stored models of chapter 5 use their context, from the per-position losses
    against the bigram table (``results/norms/context_use.json``,
    :func:`lncourse.evidence.norms.context_use.verdicts`, recomputed from each model's stored
    late-position gain): a group uses its context when every seed's gain has a 95%
    interval over windows above 0; a gain under SMALL_GAIN is barely any."""
    from lncourse.evidence.norms.context_use import verdicts

    v = verdicts(context)

    def rows(key: str) -> list[dict]:
        grid, model, *lr = key.split("/")
        group = context[grid][model]
        return group if not lr else [r for r in group if f"lr {r['lr']:g}" == lr[0]]

    def barely(key: str) -> bool:         # not every seed, and no seed above SMALL_GAIN
        return not v[key]["uses_context"] and all(
            r["late"] is None or r["late"]["gain"][0] < SMALL_GAIN for r in rows(key))

    def none(key: str) -> bool:           # no seed's interval above 0
        return all(r["late"] is None or r["late"]["gain"][1] <= 0 for r in rows(key))
    lrs = sorted({r["lr"] for r in context["logits"]["Pre-LN"]})
    return {
        "no trained-heads variant uses its context on every seed, and no seed gains "
        "0.05 nats over the bigram table at late positions":
            all(barely(f"trained_heads/{m}") for m in context["trained_heads"]),
        "in the logit-growth run every Pre-LN seed uses its context at lr 0.01 and 0.03, "
        "and none at the two highest rates":
            v["logits/Pre-LN/lr 0.01"]["uses_context"]
            and v["logits/Pre-LN/lr 0.03"]["uses_context"]
            and all(none(f"logits/Pre-LN/lr {lr:g}") for lr in lrs[-2:]),
        "every QK-norm seed uses its context at the second-highest rate, where no Pre-LN "
        "seed does":
            v[f"logits/QK-norm/lr {lrs[-2]:g}"]["uses_context"]
            and none(f"logits/Pre-LN/lr {lrs[-2]:g}"),
        "at lr 0.03 and above neither Peri-LN variant uses its context on every seed, and "
        "no seed gains 0.05 nats":
            all(barely(f"periln/{m}/lr {lr:g}") for m in ("Peri-LN", "Peri-LN-0.02")
                for lr in lrs if lr >= 0.03),
    }
