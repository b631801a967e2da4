"""The comparative sentences of chapter 2 about its stored Table 1/2 runs, as claims
checked against them (chapter 2).

Each sentence of the chapter that compares or orders numbers of
``selectability/lm_paper.json`` and ``selectability/lm_quick_bpe.json`` is a
:class:`lncourse.claims.Claim` built here: the chapter glues the text (or states the
sentence beside the glued numbers), the ledger (:mod:`lncourse.selectability.ledger`)
holds text and verdict, and ``tests/selectability/test_ledger.py`` asserts that each holds
and that each fails on contrary numbers. The seeded runs' claims are
:func:`lncourse.selectability.seeds_measure.claims`.
"""

from __future__ import annotations

import numpy as np

from lncourse.claims import Claim
from lncourse.selectability.report import FULL, NO_SCALING, gap_summary, sweep_curves

__all__ = ["lm_claims"]


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
