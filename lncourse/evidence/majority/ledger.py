"""Every number chapter 3 reports from its stored runs, and its ledger (chapter 3).

:func:`reported` recomputes, from the stored runs, each number the chapter prints or
states in a sentence: per model, its test accuracy at steps 1,000, 5,000 and the last,
its final training loss and its steps to 80% and 90%; per variant, the table cells (means,
standard deviations, how many seeds reach a threshold); the paired effects with their
intervals and equivalence bounds; the interventions' table; the sensitivity grid's
cells; the uniformity and 3-d tables; and the text of every claim of the verdict
(:func:`lncourse.evidence.majority.claims.claims`). The ledger
``results/majority/reported.json`` holds them, written by::

    python -m lncourse.evidence.majority.ledger

and ``tests/majority/test_ledger.py`` recomputes them and compares (see
:mod:`lncourse.evidence.claims`): editing a stored curve, or the ledger, fails that test.
"""

from __future__ import annotations


import numpy as np

from lncourse.majority import stats as ST
from lncourse.evidence.claims import ledger_main
from lncourse.majority.task import effective_queries, norm1, query_angles
from lncourse.evidence.majority.claims import claims, grid_cells, uniformity_stats
from lncourse.results import RESULTS_DIR, load_result

__all__ = ["METRICS", "COMPARISONS", "load_runs", "reported", "main"]

METRICS = ("steps_to_80", "steps_to_90", "mean_acc_to_5000", "acc_at_1000")
COMPARISONS = [("no_projection_released_value_scaled", "no_projection_released"),
               ("no_projection_released_gain", "no_projection_released"),
               ("no_projection_released_value_scaled", "layernorm"),
               ("no_projection_released_gain", "layernorm"),
               ("no_projection_sigma", "no_projection"),
               ("no_projection_sigma", "layernorm")]
LEDGER = "majority/reported"


def load_runs() -> dict:
    """The stored runs chapter 3 reads: paper, grids (batch -> run), three_d and the runs
    on other data (data seed -> run, those stored so far)."""
    data_seeds = {}
    for k in (1, 2):
        if (RESULTS_DIR / "majority" / f"data_seed{k}.json").exists():
            data_seeds[k] = load_result(f"majority/data_seed{k}")
    return {"paper": load_result("majority/paper_snapshots"),
            "grids": {500: load_result("majority/grid_b500"),
                      6000: load_result("majority/grid_b6000")},
            "three_d": load_result("majority/three_d"), "data_seeds": data_seeds}


def _per_model(run: dict) -> dict:
    """Per model (in the run's order): accuracy at 1,000, 5,000 and the last step, the
    last training loss, steps to 80% and 90% (censored at the last step)."""
    acc, steps = np.asarray(run["test_acc"]), list(run["step"])
    out = {f"acc_at_{s}": acc[steps.index(s)] for s in (1000, 5000, steps[-1]) if s in steps}
    out["final_train_loss"] = np.asarray(run["train_loss"])[-1]
    for th in (80, 90):
        out[f"steps_to_{th}"] = ST.steps_to_threshold(steps, acc.T, th / 100, censor=steps[-1])
    return out


def _tables(paper: dict) -> dict:
    curves = {v: ST.history_arrays(paper, v) for v in dict.fromkeys(paper["variant"])}
    per_seed = {m: ST.per_seed(paper, m) for m in METRICS}
    table = {}
    for v, c in curves.items():
        table[v] = {m: {"mean": per_seed[m][v].mean(), "std": per_seed[m][v].std()}
                    for m in METRICS}
        for th in (80, 90):
            table[v][f"steps_to_{th}"]["reached"] = int((c["test_acc"] >= th / 100).any(axis=1).sum())
        table[v]["query_angle"] = {"start": c["query_angle"][:, 0].mean(),
                                   "end": c["query_angle"][:, -1].mean()}
        table[v]["final_train_loss"] = c["train_loss"][:, -1].mean()
        table[v]["acc_at_500"] = ST.value_at(c["step"], c["test_acc"], 500).mean()
    effects, bounds = {}, {}
    for m in METRICS:
        cells = {v: per_seed[m][v] for v in ST.DESIGN}
        effects[m] = ST.factorial_effects(cells)
        bounds[m] = ST.equivalence_bound(((cells["layernorm"] - cells["no_projection"])
                                          + (cells["layernorm_released_scale"]
                                             - cells["no_projection_released"])) / 2)
    paired = {f"{a} - {b}": {m: ST.paired_interval(per_seed[m][a] - per_seed[m][b])
                             for m in ("steps_to_90", "mean_acc_to_5000")}
              for a, b in COMPARISONS}
    gains = np.asarray(paper["final_params"]["n1_gain"])[
        [m for m, v in enumerate(paper["variant"]) if v == "no_projection_released_gain"]]
    return {"per_variant": table, "effects": effects, "equivalence_bounds": bounds,
            "paired": paired, "reproduction": ST.reproduction_rows(paper),
            "learned_gain": {"mean": gains.mean(), "std": gains.std(), "min": gains.min(),
                             "max": gains.max()}}


def _grid(paper: dict, grids: dict) -> dict:
    out = {}
    for metric in ("steps_to_90", "steps_to_80"):
        for (batch, lr), (values, last) in grid_cells(paper, grids, metric).items():
            e = ST.factorial_effects(values)
            cell = out.setdefault(f"batch {batch}, lr {lr:g}", {"last_step": last})
            cell[metric] = {"order": " < ".join(sorted(values, key=lambda v: values[v].mean())),
                            "projection": e["projection"], "scale": e["scale"]}
    return out


def _three_d(run: dict) -> dict:
    import torch

    params = {k: torch.tensor(v) for k, v in run["final_params"].items()}
    out = {}
    for v in dict.fromkeys(run["variant"]):
        ms = [m for m, name in enumerate(run["variant"]) if name == v]
        acc = np.asarray(run["test_acc"])[-1, ms]
        angles = [query_angles(effective_queries(params["W_E"][m], params["W_in"][m], v))
                  for m in ms]
        out[v] = {"final_acc_mean": acc.mean(), "final_acc_std": acc.std(),
                  "mean_angle": np.mean([float(a.mean()) for a in angles]),
                  "max_angle": np.mean([float(a.max()) for a in angles]),
                  "max_key_sum": max(float(norm1(params["W_E"][m], v).sum(-1).abs().max())
                                     for m in ms)}
    c = ST.history_arrays(run, "layernorm")
    out["layernorm_angle_by_step"] = {
        str(s): ST.value_at(c["step"], c["query_angle"], s).mean()
        for s in (0, 1000, 2000, 5000, run["step"][-1])}
    return out


def reported(paper: dict, grids: dict, three_d: dict, data_seeds: dict | None = None) -> dict:
    """Every number chapter 3 reports from these stored runs (nested; see the module's
    docstring), the claims' texts and verdicts included."""
    uniformity = uniformity_stats(paper)
    return {"paper": {"last_step": paper["step"][-1], "per_model": _per_model(paper),
                      **_tables(paper),
                      "uniformity": {v: {"tv_start": s[0], "score_std_start": s[1],
                                         "tv_end": s[2], "score_std_end": s[3]}
                                     for v, s in uniformity.items()}},
            "grid": _grid(paper, grids),
            "three_d": _three_d(three_d),
            "data_seeds": {str(k): {"last_step": r["step"][-1], "per_model": _per_model(r)}
                           for k, r in sorted((data_seeds or {}).items())},
            "claims": {c.key: c for c in claims(paper, grids, three_d, data_seeds, uniformity)}}


def _computed() -> tuple[dict, dict]:
    runs = load_runs()
    sources = {"paper": "majority/paper_snapshots.json", "grids": ["majority/grid_b500.json",
               "majority/grid_b6000.json"], "three_d": "majority/three_d.json",
               "data_seeds": [f"majority/data_seed{k}.json" for k in runs["data_seeds"]]}
    return reported(**runs), sources


def main(argv: list[str] | None = None):
    """``python -m lncourse.evidence.majority.ledger``: write the ledger of chapter 3's numbers."""
    return ledger_main("lncourse.evidence.majority.ledger", __doc__.split("\n\n")[0],
                       RESULTS_DIR / f"{LEDGER}.json", _computed, argv)


if __name__ == "__main__":
    main()
