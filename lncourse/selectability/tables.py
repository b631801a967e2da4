"""Reading a Table 1/2 run of chapter 2 in numbers: per-layer tables at a context length,
curves over the context length, the Gaussian proxy, and all-MiniLM-L6-v2's layers.

Pure functions of the plain-data results of :func:`lncourse.selectability.lm.run`, the
lesson's own run or a stored one. Percentages throughout. Shapes: a result's ``sweep``
lists are indexed [layer][context][prefix length].
"""

from __future__ import annotations

import numpy as np

from lncourse.paper import format_table
from lncourse.results import COLUMN_CHARS
from lncourse.selectability.exact import selectability, selectability_batch
from lncourse.selectability.experiments import PAPER_TABLE1, PAPER_TABLE2

__all__ = ["FULL", "NO_SCALING", "layer_table", "sweep_curves", "proxy_curves",
           "tables_1_2", "minilm_fractions"]

FULL, NO_SCALING = "full LayerNorm", "no scaling before attention"


def _index(result: dict, n: int | None) -> int:
    ns = list(result["config"]["sweep"])
    if n is None:
        return len(ns) - 1
    if n not in ns:
        raise ValueError(f"n = {n} was not measured; the sweep has {ns}")
    return ns.index(n)


def layer_table(result: dict, n: int | None = None) -> dict[str, dict[str, list[float]]]:
    """% unselectable per layer at context length n (default: the largest), averaged over
    contexts: {model label: {"before": [L], "after": [L]}}."""
    j = _index(result, n)
    return {label: {q: [100 * float(np.mean([c[j] for c in layer])) for layer in m["sweep"][q]]
                    for q in ("before", "after")}
            for label, m in result["models"].items()}


def sweep_curves(result: dict) -> dict[str, dict[str, list[float]]]:
    """% unselectable against n, averaged over layers and contexts:
    {model label: {"before": (len(sweep),), "after": ...}}."""
    return {label: {q: (100 * np.asarray(m["sweep"][q]).mean(axis=(0, 1))).tolist()
                    for q in ("before", "after")}
            for label, m in result["models"].items()}


def proxy_curves(result: dict) -> dict[int, list[float]]:
    """The Gaussian proxy, % unselectable against n: {dimension: (len(sweep),)}."""
    return {int(d): (100 * np.asarray(f).mean(axis=1)).tolist()
            for d, f in result["proxy"].items()}


def tables_1_2(runs: dict[str, dict], n_by_run: dict[str, int | None] | None = None,
               width: int = COLUMN_CHARS) -> str:
    """Tables 1 and 2, ours (one row per run, each at its n) beside the paper's.

    runs: {row label: result}; n_by_run: {row label: n} (default: each run's largest).
    """
    n_by_run = n_by_run or {}
    header = ["% unselectable", "L1", "L2", "L3", "L4"]
    rows = []

    def block(title, model, q, paper):
        rows.append([title, None, None, None, None])
        for name, res in runs.items():
            rows.append([f"  ours, {name}", *layer_table(res, n_by_run.get(name))[model][q]])
        rows.append([f"  paper ({paper[0]})", *paper[1]])

    block("Table 1: ln1, no scaling", NO_SCALING, "after",
          (PAPER_TABLE1.source.split(", ")[-1], PAPER_TABLE1["without scaling"]))
    block("Table 1: ln1, full LayerNorm", FULL, "after",
          (PAPER_TABLE1.source.split(", ")[-1], PAPER_TABLE1["with scaling"]))
    block("Table 2: before the LN (resid_pre)", FULL, "before",
          (PAPER_TABLE2.source.split(", ")[-1], PAPER_TABLE2["before LayerNorm"]))
    return format_table(header, [[r[0], *[None if v is None else float(v) for v in r[1:]]]
                                 for r in rows], width=width)


def minilm_fractions(cache: dict, mask, n_layers: int) -> dict[str, list[float]]:
    """% unselectable per layer of all-MiniLM-L6-v2 in each passage (mean over passages):
    the d = 384 vectors before and after the LayerNorm that attention reads, and each
    head's keys (dh = 32). cache: MiniLM's ``return_cache`` dict; mask: (B, T) bool."""
    rows = {"before LN (d=384)": [], "after LN (d=384)": [], "per head (dh=32)": []}
    for i in range(n_layers):
        for name, x in (("before LN (d=384)", cache[f"layers.{i}.attn_norm_in"]),
                        ("after LN (d=384)", cache[f"layers.{i}.attn_in"])):
            rows[name].append(100 * float(np.mean(
                [selectability(x[b][mask[b]].double().cpu()).unselectable_fraction
                 for b in range(len(mask))])))
        rows["per head (dh=32)"].append(100 * float(np.mean(
            [selectability_batch(cache[f"layers.{i}.k"][b][:, mask[b]].double().cpu())
             .unselectable_fraction.mean() for b in range(len(mask))])))
    return rows
