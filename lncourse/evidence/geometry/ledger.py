"""Every number chapter 1 and chapter 3's replication page quote from the real-model
measurement of LayerNorm's projection, its claims, and their ledger (chapter 1).

:func:`reported` recomputes them from ``geometry/projection_paper.json`` and its
per-token arrays (:mod:`lncourse.evidence.geometry.projection`): for MiniLM, the share of
each LayerNorm input along 1 (quantiles over every token of every passage and norm), the
fraction of squared length the projection removes at most, the relative output change
when the projection is dropped, the total-variation distance the next attention's rows
move (per layer, and against a random change of the same length), and the change of the
whole model with every LayerNorm swapped; for SmolLM2 the share along 1 of what its
RMSNorms read; the chance level of an isotropic vector in each dimension; and the text
and verdict of each claim (:func:`claims`). The ledger ``results/geometry/reported.json``
holds them, written by::

    python -m lncourse.evidence.geometry.ledger

and ``tests/geometry/test_projection.py`` recomputes them and compares.
"""

from __future__ import annotations

import math

import numpy as np

from lncourse.evidence.claims import Claim, ledger_main
from lncourse.results import RESULTS_DIR, describe, load_arrays, load_result

__all__ = ["SOURCE", "LEDGER", "load_run", "chance_abs_cos", "reported", "claims", "main"]

SOURCE = "geometry/projection_paper"
LEDGER = "geometry/reported"
QUANTILES = {"median": 0.5, "p90": 0.9, "p99": 0.99, "max": 1.0}


def load_run() -> tuple[dict, dict]:
    """The stored run and its per-token arrays."""
    return load_result(SOURCE), load_arrays(SOURCE, "tokens")


def chance_abs_cos(d: int) -> float:
    """E|cos(u, 1)| for u uniform on the sphere of R^d: Γ(d/2) / (√π Γ((d+1)/2))."""
    return math.exp(math.lgamma(d / 2) - math.lgamma((d + 1) / 2)) / math.sqrt(math.pi)


def _quantiles(a) -> dict[str, float]:
    a = np.asarray(a, dtype=np.float64).ravel()
    return {k: float(np.quantile(a, q)) for k, q in QUANTILES.items()}


def _where_max(a: np.ndarray, names: list[str]) -> str:
    """The norm (axis 1 of (passages, norms, tokens)) holding the largest value."""
    return names[int(np.unravel_index(np.argmax(a), a.shape)[1])]


def _attention(stored: dict) -> dict:
    m = stored["minilm"]
    mean = np.asarray(m["tv_mean"]).mean(axis=(0, 2))          # per attention layer
    random = np.asarray(m["tv_random_mean"]).mean(axis=(0, 2))
    top = int(np.argmax(mean))
    return {"by_layer": mean.tolist(), "random_by_layer": random.tolist(),
            "largest_layer": top, "largest_norm": m["attn_names"][top],
            "largest_mean": float(mean[top]), "largest_random": float(random[top]),
            "largest_ratio": float(mean[top] / random[top]),
            "other_layers_max_mean": float(np.delete(mean, top).max()),
            "max_row": float(np.max(m["tv_max"])), "mean": float(mean.mean())}


def reported(stored: dict, arrays: dict) -> dict:
    """Every number the two pages quote from the stored run (the module's docstring)."""
    cfg = stored["config"]
    mini, smol = stored["minilm"], stored["smollm2"]
    share, change = arrays["minilm_share"], arrays["minilm_change"]
    smol_share, final = arrays["smollm2_share"], arrays["minilm_final_change"]
    out = {
        "describe": describe(stored),
        "passages": cfg["n_passages"], "tokens": cfg["tokens"],
        "minilm": {
            "norms": len(mini["names"]), "d": mini["d"],
            "chance": chance_abs_cos(mini["d"]),
            "share": _quantiles(share),
            "share_max_norm": _where_max(share, mini["names"]),
            "removed_max_pct": 100 * float(np.max(share)) ** 2,
            "change": _quantiles(change),
            "change_max_norm": _where_max(change, mini["names"]),
            "attention": _attention(stored),
            "swapped": {"final_change": _quantiles(final),
                        "pooled_cos_min": float(np.min(mini["pooled_cos"])),
                        "pooled_cos_mean": float(np.mean(mini["pooled_cos"]))},
        },
        "smollm2": {
            "norms": len(smol["names"]), "d": smol["d"],
            "chance": chance_abs_cos(smol["d"]),
            "share": _quantiles(smol_share),
            "share_max_norm": _where_max(smol_share, smol["names"]),
            "removed_max_pct": 100 * float(np.max(smol_share)) ** 2,
        },
    }
    out["claims"] = {c.key: c for c in claims(out)}
    return out


def claims(numbers: dict) -> list[Claim]:
    """The comparative sentences of the two pages, from :func:`reported`'s numbers
    (less its claims): each holds or fails on them."""
    mini, smol = numbers["minilm"], numbers["smollm2"]
    att, swap = mini["attention"], mini["swapped"]
    removed = max(mini["removed_max_pct"], smol["removed_max_pct"])
    return [
        Claim("projection_removes_little",
              f"In both models the projection would remove at most {removed:.2f}% of any "
              f"input's squared length; the median share along 1 is "
              f"{mini['share']['median']:.3f} in MiniLM and "
              f"{smol['share']['median']:.3f} in SmolLM2, below an isotropic vector's "
              f"{mini['chance']:.3f} and {smol['chance']:.3f}.",
              removed < 5.0 and mini["share"]["median"] < mini["chance"]
              and smol["share"]["median"] < smol["chance"],
              {"removed_max_pct": removed, "minilm_median": mini["share"]["median"],
               "smollm2_median": smol["share"]["median"]}),
        Claim("attention_moves",
              f"Dropping the projection of the LayerNorm that layer {att['largest_layer']}'s "
              f"attention reads moves its rows by a mean total-variation distance of "
              f"{att['largest_mean']:.3f} ({att['largest_ratio']:.1f} times a random "
              f"change of the same length), one row by up to {att['max_row']:.2f}.",
              att["largest_mean"] >= 0.05 and att["largest_ratio"] >= 2,
              {"mean": att["largest_mean"], "ratio": att["largest_ratio"],
               "max_row": att["max_row"]}),
        Claim("not_rmsnorm_at_inference",
              f"With every LayerNorm of MiniLM replaced by the same γ and β on an RMSNorm, "
              f"its last hidden states move by a median {swap['final_change']['median']:.0%} "
              f"of their length, and its sentence embeddings keep a cosine of only "
              f"{swap['pooled_cos_mean']:.2f} on average (lowest "
              f"{swap['pooled_cos_min']:.2f}) with the model's own.",
              swap["final_change"]["median"] >= 0.1 and swap["pooled_cos_mean"] <= 0.95,
              {"median_change": swap["final_change"]["median"],
               "pooled_cos_mean": swap["pooled_cos_mean"]}),
    ]


def main(argv: list[str] | None = None):
    """``python -m lncourse.evidence.geometry.ledger``: write chapter 1's ledger."""
    return ledger_main("lncourse.evidence.geometry.ledger", __doc__.split("\n\n")[0],
                       RESULTS_DIR / f"{LEDGER}.json",
                       lambda: (reported(*load_run()), {"projection": f"{SOURCE}.json"}),
                       argv)


if __name__ == "__main__":
    main()
