"""Every number chapter 4 reports from its stored files, and its ledger (chapter 4).

:func:`reported` recomputes, from ``nope/probe_paper.json`` (the position probe at the
paper's size), ``nope/ablation_cpu.json`` (what each choice of the probe does) and
``nope/features_benchmark.json`` (labelled positions per CPU-hour),
``nope/decode_cpu.json`` (the ablation's classifier read by argmax, median and mean),
``nope/stream_paper.json`` with its held-out predictions (the all-positions probe at the
paper's size) and ``nope/trained_lm.json`` (the trained NoPE language model), each number the
chapter prints, plots or glues from them: the line that says what ran
(:func:`lncourse.results.describe`); per model of the probe run its error at every depth
and its baseline, per kind the means, standard deviations and 95% intervals per depth,
the slope and the mean over depths 1 ... K with their intervals, and the text and
verdict of each claim on Figure 2; per seed and row of the ablation its errors, the
table's cells (mean and interval over seeds), the claims, the glued deepest means, the
baselines; the chapter's own sentences on them (:func:`claims.page_claims`); the
benchmark's speed-ups and bfloat16's feature error per depth; per seed and reading of
the classifier its errors, the table's cells and the sentences on them
(:func:`claims.decode_claims`); per model of the all-positions run its errors, and per
kind, probe and depth the error, the correlation of the answer with the position and the
recalibrated error (from the stored readings, which a test recomputes from the
predictions) with their intervals, and the
sentences on them (:func:`stream_read.claims`); the trained model's loss
curve, its per-layer slopes and uniformities before and after training (recomputed from
its stored curves) and the sentences on them (:func:`claims.trained_claims`); from
``nope/stream_gpu.json`` (the probe on a lent GPU) the sentences of
:func:`stream_read.device_claims` and the paper-budget readings the replication page glues, and
the exploratory depth trend (:func:`stream_read.trend_claim`); from
``nope/trained_lm_stall.json``, ``nope/trained_recipe_cpu.json`` and
``nope/trained_recipe_wide.json`` (the stalled run, and the recipe that learns at two
sizes, with a learned-position control) the losses beside their
references, the gains at late positions, the per-layer slopes and the sentences
(:func:`retrained_report.report`, :func:`retrained_report.claims`). The ledger
``results/nope/reported.json`` holds them, written by::

    python -m lncourse.evidence.nope.ledger

and ``tests/nope/test_ledger.py`` recomputes them and compares (:mod:`lncourse.evidence.claims`):
editing any stored value they depend on, or the ledger, fails. The ablation's errors are
recomputed from their stored held-out predictions as well
(``tests/nope/test_stream_run.py``), and so are the all-positions run's; the first probe run stores neither predictions nor probe
weights, so its errors are guarded by the ledger and the replay of its first steps.
"""

from __future__ import annotations


import numpy as np

from lncourse.evidence.claims import ledger_main
from lncourse.evidence.nope import claims as nope_claims, probe, retrained_report, stream_read
from lncourse.results import RESULTS_DIR, describe, load_result
from lncourse.summary import paired_interval

__all__ = ["SOURCES", "load_runs", "reported", "main"]

SOURCES = {"probe": "nope/probe_paper", "ablation": "nope/ablation_cpu",
           "features": "nope/features_benchmark", "decode": "nope/decode_cpu",
           "trained": "nope/trained_lm", "stream": "nope/stream_paper",
           "gpu": "nope/stream_gpu", "stall": "nope/trained_lm_stall",
           "recipe": "nope/trained_recipe_cpu", "recipe_wide": "nope/trained_recipe_wide"}
LEDGER = "nope/reported"


def load_runs() -> dict:
    """The stored files chapter 4 reads: {"probe", "ablation", "features", "decode",
    "trained", "stream"} -> result, and "stream_readings" (what the all-positions run's
    answers carry, :func:`stream_read.load_readings`)."""
    runs = {key: load_result(name) for key, name in SOURCES.items()}
    return {**runs, "stream_readings": stream_read.load_readings(runs["stream"])}


def _probe(stored: dict) -> dict:
    return {"describe": describe(stored),
            "config": {k: stored["config"][k] for k in ("train_seqs", "positions_per_seq",
                                                        "n_layers", "seq_len")},
            "per_model": {kind: {str(r["seed"]): {"mae": r["mae"], "baseline": r["baseline"]}
                                 for r in runs} for kind, runs in stored["results"].items()},
            "summarize": probe.summarize(stored["results"]),
            "summary": {k: {kk: vv for kk, vv in v.items() if kk != "per_seed"}
                        for k, v in nope_claims.summary(stored, key="mae").items()},
            "claims": {c.key: c for c in nope_claims.claims(stored, key="mae")}}


def _ablation(abl: dict) -> dict:
    runs, cfg = abl["runs"], abl["config"]
    table = {}
    for row in runs[0]["mae"]:
        cells = []
        for i in range(len(cfg["depths"])):
            v = np.array([r["mae"][row][i] for r in runs])
            cells.append({"mean": v.mean(), "interval": paired_interval(v) if len(v) > 1
                          else None})
        table[row] = cells
    return {"describe": describe(abl), "complete": abl["complete"],
            "config": {k: cfg[k] for k in ("depths", "seeds", "train_seqs", "eval_seqs",
                                           "updates", "update_positions", "hidden",
                                           "seq_len")},
            "baseline": abl["baseline"],
            "uniform_guess": nope_claims.uniform_guess(cfg["seq_len"]),
            "per_seed": {str(r["seed"]): r["mae"] for r in runs}, "table": table,
            "deepest_mean": {row: float(np.mean([r["mae"][row][-1] for r in runs]))
                             for row in runs[0]["mae"]},
            "claims": {c.key: c for c in nope_claims.ablation_claims(abl)
                       + nope_claims.below_baseline_claims(abl)}}


def _page(probe: dict, abl: dict) -> dict:
    return {c.key: c for c in nope_claims.page_claims(probe, abl)}


def _trained(stored: dict) -> dict:
    """The trained NoPE model: what ran, its loss curve, per layer the slopes and
    uniformities before and after training (recomputed from the stored curves), and the
    chapter's sentences on them."""
    from lncourse.evidence.nope.trained import summary as layer_summary

    after = layer_summary(stored["after"])
    return {"describe": describe(stored), "config": stored["config"],
            "wall_hours": stored["provenance"]["wall_seconds"] / 3600,
            "test_loss": stored["history"]["test_loss"],
            "before": layer_summary(stored["before"]),
            "after": after,
            "after_range": {  # over the layers, after training
                "slope_min": min(r["slope"] for r in after),
                "slope_max": max(r["slope"] for r in after),
                "uniformity_min": min(r["uniformity"] for r in after),
                "uniformity_max": max(r["uniformity"] for r in after)},
            "claims": {c.key: c for c in nope_claims.trained_claims(stored)}}


def _decode(decode: dict) -> dict:
    """The classifier read three ways: what ran, per seed the errors, the table and the
    chapter's sentences on it."""
    return {"describe": describe(decode), "readings": decode["readings"],
            "config": {k: decode["config"][k] for k in ("depths", "seeds", "seq_len")},
            "baseline": decode["baseline"],
            "per_seed": {str(r["seed"]): r["mae"] for r in decode["runs"]},
            "table": nope_claims.decode_table(decode),
            "claims": {c.key: c for c in nope_claims.decode_claims(decode)}}


def _stream(stored: dict, reads: dict, ablation: dict) -> dict:
    """The all-positions probe run: what ran, per model its stored errors, the summary
    over seeds recomputed from the predictions, and the chapter's sentences on it."""
    summary = stream_read.summary(stored, reads)
    return {"describe": describe(stored), "complete": stored["complete"],
            "models_done": stored["models_done"],
            "config": {k: stored["config"][k] for k in (
                "train_seqs", "eval_seqs", "updates", "update_positions", "hidden", "lr",
                "dtype", "seeds", "bidirectional_seeds", "seq_len", "n_layers")},
            "baseline": stored["baseline"],
            "per_model": {kind: {str(r["seed"]): {k: v for k, v in r.items()
                                                  if k.startswith("mae_")}
                                 for r in runs} for kind, runs in stored["results"].items()},
            "summary": summary,
            "page": _stream_page(stored, summary),
            "claims": {c.key: c for c in stream_read.claims(stored, reads, ablation)}}


def _stream_page(stored: dict, summary: dict) -> dict:
    """What the replication page says of the all-positions run in one number each: the
    causal answers' correlation with the position, averaged over depths 1 ... K (per
    probe and over both), the largest |correlation| where there is nothing to read (the
    causal models at depth 0, the bidirectional control at every depth), and how much
    recalibration brings the error below the middle's, averaged over depths 1 ... K."""
    causal = summary["causal"]
    probes = stream_read.PROBES
    return {
        "corr_1_to_K": {p: float(np.mean([e[0] for e in causal[p]["corr"][1:]]))
                        for p in probes},
        "corr_1_to_K_both": float(np.mean([e[0] for p in probes
                                           for e in causal[p]["corr"][1:]])),
        "null_corr_max": max(abs(e[0]) for kind, depths in (
            ("causal", slice(0, 1)), ("bidirectional", slice(None))) if kind in summary
            for p in probes for e in summary[kind][p]["corr"][depths]),
        "recal_gain_1_to_K": stored["baseline"] - float(np.mean(
            [e[0] for p in probes for e in causal[p]["recal"][1:]]))}


def _device_runs(gpu: dict, stream: dict, reads: dict) -> dict:
    """The probe on a lent GPU (its sentences and the paper-budget readings) and the
    exploratory depth trend of the recalibrated read-out."""
    paper = gpu["readings"]["phases"]["paper"]
    return {"describe": describe(gpu), "baseline_middle": gpu["readings"]["baseline_middle"],
            "profile": {**stream_read.paper_profile(gpu),
                        "claim": stream_read.shape_claim(gpu)},
            "protocols": _protocols(gpu["config"]),
            "recency": stream_read.recency(gpu),
            "claims": {c.key: c for c in stream_read.device_claims(gpu)},
            "paper": {"causal_models": paper["causal_models"],
                      "seqs_per_s": paper["seqs_per_s"],
                      **{p: {**{k: paper[p][k] for k in ("mean_1_to_K_each", "corr_1_to_K",
                                                          "minus_stored_1_to_K")},
                             # the same models at the stored size
                             "at_stored_each": [
                                 a - d for a, d in zip(paper[p]["mean_1_to_K_each"],
                                                       paper[p]["minus_stored_1_to_K"]["each"])]}
                         for p in ("classifier", "regression")}},
            "trend": {p: stream_read.trend_claim(stream, reads, p)
                      for p in ("classifier", "regression")}}


def _protocols(config: dict) -> dict:
    """What the stored protocol and the paper's budget change at once: sequences per
    model, consecutive updates on one batch of sequences (the stored protocol trains on
    each batch ``updates / batches`` times in a row and never again; the paper's draws
    fresh sequences for every update), and positions per update."""
    def one(c: dict) -> dict:
        reuse = c["updates"] // (c["train_seqs"] // c["seqs_per_batch"]) \
            if c["inputs"] == "stream" else 1
        return {"sequences": c["train_seqs"], "updates_per_batch": reuse,
                "positions_per_update": c["update_positions"]}
    stored, paper = one(config["stored"]), one(config["paper"])
    return {"stored": stored, "paper": paper,
            "factor": {k: paper[k] / stored[k] for k in ("sequences", "positions_per_update")}}


def _retrained(stall: dict, *recipes: dict) -> dict:
    """The stalled run's losses beside its references and its late-position gain; each
    recipe run's report and sentences (the ``cpu`` preset, then ``wide``)."""
    def run(r: dict) -> dict:
        report = retrained_report.report(r)
        return {"describe": describe(r), "report": report,
                "claims": retrained_report.claims(r),
                "slope_claims": retrained_report.slope_claims(r),
                # layer 0's uniformity after training, mean over seeds, per variant
                "uniformity_after_0": {v: float(np.mean([s["uniformity_after"][0][0]
                                                         for s in report[v]["seeds"]]))
                                       for v in ("NoPE", "learned")}}
    return {"stall": {k: stall[k] for k in ("references", "history", "late")},
            **{key: run(r) for key, r in zip(("recipe", "recipe_wide"), recipes)}}


def reported(probe: dict, ablation: dict, features: dict, decode: dict,
             trained: dict, stream: dict, stream_readings: dict, gpu: dict,
             stall: dict, recipe: dict, recipe_wide: dict) -> dict:
    """Every number chapter 4 reports from these stored files (see the module's
    docstring)."""
    return {"probe_paper": _probe(probe), "ablation_cpu": _ablation(ablation),
            "page_claims": _page(probe, ablation), "trained_lm": _trained(trained),
            "decode_cpu": _decode(decode),
            "stream_paper": _stream(stream, stream_readings, ablation),
            "stream_gpu": _device_runs(gpu, stream, stream_readings),
            "trained_recipe": _retrained(stall, recipe, recipe_wide),
            "features_benchmark": {
                "describe": describe(features),
                "speedup_per_cpu_hour": features["speedup_per_cpu_hour"],
                "bfloat16_relative_feature_error_per_depth":
                    features["bfloat16_relative_feature_error_per_depth"]}}


def main(argv: list[str] | None = None):
    """``python -m lncourse.evidence.nope.ledger``: write the ledger of chapter 4."""
    return ledger_main("lncourse.evidence.nope.ledger", __doc__.split("\n\n")[0],
                       RESULTS_DIR / f"{LEDGER}.json",
                       lambda: (reported(**load_runs()),
                                {**{k: f"{v}.json" for k, v in SOURCES.items()},
                                 "stream_readings": f"{stream_read.READINGS}.json"}),
                       argv)


if __name__ == "__main__":
    main()
