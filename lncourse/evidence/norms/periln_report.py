"""What chapter 5 reports from the Peri-LN run, and its ledger (chapter 5).

:func:`reported` recomputes, from ``norms/periln.json`` (the Peri-LN models) and
``norms/logits.json`` with its weights (the Pre-LN and QK-norm models of the same seeds,
batches and lrs), every number the Peri-LN section prints or glues: what ran, the summary
of :func:`lncourse.evidence.norms.periln.summary` (the Pre-LN models' residual streams measured
again from their stored weights), every Peri-LN model's final numbers and the claims of
:func:`lncourse.evidence.norms.claims.periln_claims`. The ledger
``results/norms/periln_reported.json`` holds them::

    python -m lncourse.evidence.norms.periln_report

``tests/norms/test_periln.py`` recomputes them and compares, and recomputes the Peri-LN
models' own numbers from their stored weights.
"""

from __future__ import annotations

from lncourse.evidence.claims import ledger_main
from lncourse.results import RESULTS_DIR, describe, load_result

__all__ = ["SOURCE", "LOGITS", "LEDGER", "load", "reported", "main"]

SOURCE = "norms/periln"
LOGITS = "norms/logits"
LEDGER = "norms/periln_reported"


def load() -> tuple[dict, dict, dict]:
    """The stored Peri-LN run, the logit-growth run and the latter's weights."""
    import torch

    weights = torch.load(RESULTS_DIR / f"{LOGITS}.pt", weights_only=True)
    return load_result(SOURCE), load_result(LOGITS), weights


def reported(peri: dict, logits_result: dict, logits_weights: dict) -> dict:
    """Every number the chapter reports from the Peri-LN run (see the module's docstring)."""
    from lncourse.evidence.norms import claims, periln

    pre = periln.pre_ln_streams(logits_result, logits_weights)
    s = periln.summary(peri, logits_result, pre)
    init = periln.initial_streams(peri)
    keep = ("seed", "lr", "initial_loss", "test_loss", "final_max_logit", "stream", "bound")
    return {"describe": describe(peri), "config": peri["config"], "summary": s,
            "models": {v: [{k: r[k] for k in keep} for r in runs]
                       for v, runs in peri["models"].items()},
            "pre_ln_streams": pre, "initial_streams": init,
            "claims": claims.periln_claims(s, init)}


def main(argv: list[str] | None = None):
    """``python -m lncourse.evidence.norms.periln_report``: write the ledger of the Peri-LN run."""
    return ledger_main("lncourse.evidence.norms.periln_report", __doc__.split("\n\n")[0],
                       RESULTS_DIR / f"{LEDGER}.json",
                       lambda: (reported(*load()), {"stored": f"{SOURCE}.json",
                                                   "logits": f"{LOGITS}.json",
                                                   "logits_weights": f"{LOGITS}.pt"}),
                       argv)


if __name__ == "__main__":
    main()
