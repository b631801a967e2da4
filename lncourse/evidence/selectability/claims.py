"""The comparative sentences of chapter 2 about its stored Table 1/2 runs, as claims
checked against them (chapter 2).

Each sentence of the chapter that compares or orders numbers of
``selectability/lm_paper.json``, ``selectability/lm_quick_bpe.json`` and
``selectability/lm_paper_bpe.json`` is a
:class:`lncourse.evidence.claims.Claim` built here: the chapter glues the text (or states the
sentence beside the glued numbers), the ledger (:mod:`lncourse.evidence.selectability.ledger`)
holds text and verdict, and ``tests/selectability/test_ledger.py`` asserts that each holds
and that each fails on contrary numbers. The seeded runs' claims are
:func:`lncourse.evidence.selectability.seeds_measure.claims`.
"""

from __future__ import annotations

import numpy as np

from lncourse.evidence.claims import Claim
from lncourse.evidence.selectability.measure import (FULL, NO_SCALING, PAPER_TABLE1, PAPER_TABLE2,
                                           gap_summary, sweep_curves)

__all__ = ["lm_claims", "tokenisation_at_paper_length", "tokenisation_claims",
           "bpe_references", "bpe_learning_claim"]


def lm_claims(stored: dict, stored_bpe: dict) -> list[Claim]:
    """The claims on the stored character run (contexts of 1,024) and the BPE run."""
    runs = {"characters": stored, "BPE": stored_bpe}
    worst = max(float(np.max(r["models"][FULL]["sweep"]["after"])) for r in runs.values())
    out = [Claim("full_ln_zero", "After the LayerNorm of the full model no vector is "
                 f"unselectable, in every layer, context and n of both stored runs (largest "
                 f"fraction {100 * worst:.1f}%).", worst == 0.0, {"largest": worst})]
    grows = {}
    for name, r in runs.items():
        t1 = sweep_curves(r)[NO_SCALING]["after"]
        grows[name] = (list(r["config"]["sweep"]), t1)
    ok = all(bool(np.all(np.diff(v) > 0)) for _, v in grows.values())
    out.append(Claim("grows_with_context", "Without scaling, the share of unselectable "
                     "vectors after the norm grows with every doubling of n: " + "; ".join(
                         f"{name} " + ", ".join(f"{v:.1f}%" for v in t1) + " at n = "
                         + ", ".join(f"{n:,}" for n in ns)
                         for name, (ns, t1) in grows.items()) + ".", ok,
                     {name: t1 for name, (_, t1) in grows.items()}))
    g = gap_summary(stored, stored_bpe, stored_bpe)
    n = stored["config"]["sweep"][-1]
    if g["gap_at_longest"] > 0:
        text = (f"Of the {g['gap_at_128']:.1f} points between Table 1's average and our "
                f"model at n = 128, the longer contexts close {g['context_gain']:.1f}; "
                f"{g['gap_at_longest']:.1f} remain at n = {n:,}.")
    else:
        text = (f"The longer contexts close all of the {g['gap_at_128']:.1f} points between "
                f"Table 1's average and our model at n = 128, and more: at n = {n:,} our "
                f"model is {-g['gap_at_longest']:.1f} points above that average "
                f"({g[f't1_{n}']:.1f}% against {g['paper_t1']:.1f}%).")
    out.append(Claim("context_closes_gap", text, g["context_gain"] > 0,
                     {k: g[k] for k in ("gap_at_128", "context_gain", "gap_at_longest")}))
    below = {q: (g[f"{q}_{n}"], g[f"proxy{d}_{n}"]) for q, d in (("t1", 7), ("t2", 8))}
    out.append(Claim("below_gaussian", f"At n = {n:,} the model's vectors have fewer "
                     f"unselectable than Gaussian points of their dimension: "
                     f"{below['t1'][0]:.1f}% against {below['t1'][1]:.1f}% (Table 1's "
                     f"quantity, 7-D), {below['t2'][0]:.1f}% against {below['t2'][1]:.1f}% "
                     "(Table 2's, 8-D).", all(a < b for a, b in below.values()),
                     {q: list(v) for q, v in below.items()}))
    return out


def _t1_t2(res: dict) -> dict[str, float]:
    """Table 1's quantity (ln1 without scaling) and Table 2's (resid_pre, full LN) at a
    run's largest n, in %, averaged over layers and contexts."""
    curves = sweep_curves(res)
    return {"t1": curves[NO_SCALING]["after"][-1], "t2": curves[FULL]["before"][-1]}


def tokenisation_at_paper_length(stored: dict, paper_bpe: dict, seeds: dict) -> dict:
    """The numbers of the tokenisation comparison at n = 1,024, in %: Table 1's and
    Table 2's quantities of the BPE run and of the character run (one seed each, the same
    configuration but the tokens), and of each character seed of the seeded runs at the
    BPE run's step (the mean over layers and the curve's contexts), with the paper's
    averages and the mean number of distinct tokens in a context."""
    step = paper_bpe["config"]["steps"]
    out = {"step": step, "bpe": _t1_t2(paper_bpe), "chars": _t1_t2(stored),
           "paper": {"t1": float(np.mean(PAPER_TABLE1["without scaling"])),
                     "t2": float(np.mean(PAPER_TABLE2["before LayerNorm"]))},
           "seeds": {}}
    at = seeds["curve"][str(step)]
    for key, label, q in (("t1", NO_SCALING, "after"), ("t2", FULL, "before")):
        idx = [m for m, lab in enumerate(seeds["labels"]) if lab == label]
        out["seeds"][key] = [100 * float(np.mean(at[q][m])) for m in idx]
    for name, res in (("bpe", paper_bpe), ("chars", stored)):
        sweep = res["models"][NO_SCALING]["sweep"]
        out[f"{name}_distinct"] = float(np.mean([c[-1] for c in sweep["distinct"]]))
    return out


def tokenisation_claims(stored: dict, paper_bpe: dict, seeds: dict) -> list[Claim]:
    """The claims on tokens at the paper's context length: the BPE run (n = 1,024, batch
    16, 400 steps) against the character run of the same configuration and against the
    three character seeds at the same step."""
    t = tokenisation_at_paper_length(stored, paper_bpe, seeds)
    b, c, p, s = t["bpe"], t["chars"], t["paper"], t["seeds"]
    n, k = paper_bpe["config"]["sweep"][-1], seeds["curve_contexts"]
    farther = all(abs(b[q] - p[q]) >= abs(c[q] - p[q]) for q in ("t1", "t2"))
    out = [Claim("bpe_not_closer", f"At n = {n:,}, BPE tokens bring neither table closer "
                 f"to the paper's: Table 1's quantity is {b['t1']:.1f}% with BPE against "
                 f"{c['t1']:.1f}% with characters (paper {p['t1']:.1f}%), Table 2's "
                 f"{b['t2']:.1f}% against {c['t2']:.1f}% (paper {p['t2']:.1f}%).", farther,
                 {"bpe": b, "chars": c, "paper": p})]
    g = {q: 100 * float(np.mean(paper_bpe["proxy"][str(d)][-1]))
         for q, d in (("t1", 7), ("t2", 8))}
    out.append(Claim("bpe_nearer_gaussian", f"With BPE both counts lie nearer those of "
                     f"Gaussian points, whose vectors are all distinct ({g['t1']:.1f}% in "
                     f"7-D, {g['t2']:.1f}% in 8-D).",
                     all(abs(b[q] - g[q]) < abs(c[q] - g[q]) for q in g), {"gaussian": g}))
    lo, hi = min(s["t2"]), max(s["t2"])
    out.append(Claim("bpe_t2_above_seeds", f"Table 2's {b['t2']:.1f}% with BPE lies "
                     f"{b['t2'] - hi:.1f} points above the highest of three character "
                     f"seeds at step {t['step']:,} ({lo:.1f} to {hi:.1f}%, {k} contexts each): "
                     "more than the "
                     "seeds differ from each other.",
                     b["t2"] - hi > hi - lo, {"bpe": b["t2"], "seeds": s["t2"]}))
    lo, hi = min(s["t1"]), max(s["t1"])
    out.append(Claim("bpe_t1_within_seeds", f"Table 1's {b['t1']:.1f}% with BPE lies "
                     f"{b['t1'] - hi:.1f} points above the highest character seed at step "
                     f"{t['step']:,} ({lo:.1f} to {hi:.1f}%): less than the seeds differ "
                     "from each other, so one BPE seed cannot separate this difference "
                     "from the seed's.", abs(b["t1"] - hi) < hi - lo,
                     {"bpe": b["t1"], "seeds": s["t1"]}))
    return out


def bpe_references(res: dict) -> dict:
    """The reference losses (nats per token) of a stored BPE run's data: the unigram and
    bigram tables with add-one smoothing (:func:`lncourse.lm.reference_losses`), and the
    bigram with its add-alpha constant chosen on the last tenth of the training stream,
    read on the test stream (:func:`lncourse.lm_recipe.tuned_bigram`): at V = 4,096
    add-one smoothing makes a weak bigram."""
    from lncourse.lm import reference_losses
    from lncourse.lm_recipe import tuned_bigram
    from lncourse.selectability.lm import KeysLMConfig, tokenized
    cfg = KeysLMConfig(**{k: tuple(v) if isinstance(v, list) else v
                          for k, v in res["config"].items()
                          if k in KeysLMConfig.__dataclass_fields__})
    tok, train_ids, test_ids = tokenized(cfg)
    tuned = tuned_bigram(train_ids, test_ids, tok.vocab_size)
    return {"add_one": reference_losses(train_ids, test_ids, tok.vocab_size),
            "tuned": {"alpha": tuned["alpha"], "bigram": tuned["bigram"],
                      "held_out": {f"{a:g}": v for a, v in tuned["held_out"].items()}}}


def bpe_learning_claim(res: dict, refs: dict) -> Claim:
    """Whether the BPE pair of ``res`` learned what its data's bigram table knows, against
    the fair bigram of :func:`bpe_references` (``refs``)."""
    losses = {label: m["history"]["test_loss"][-1] for label, m in res["models"].items()}
    t, one = refs["tuned"], refs["add_one"]
    above = min(losses.values()) > t["bigram"]
    return Claim(
        "bpe_above_bigram", f"The BPE pair at n = {res['config']['block_size']:,} ends at "
        + " and ".join(f"{v:.3f}" for v in losses.values()) + " nats per token, "
        f"{'above' if above else 'not above'} its data's bigram table with add-"
        f"{t['alpha']:g} smoothing ({t['bigram']:.3f}; the constant chosen on the last "
        f"tenth of the training text, not on the test text; add-one smoothing gives "
        f"{one['bigram']:.3f}, the unigram table {one['unigram']:.3f})"
        + (": these models have not learned what a bigram table knows." if above
           else "."), above, {"losses": losses})
