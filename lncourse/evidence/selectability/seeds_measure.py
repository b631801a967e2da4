"""The measurements of chapter 2's seeded Table 1 runs, from their stored weights.

:func:`result_of` turns a checkpoint of :mod:`lncourse.evidence.selectability.seeds` into a
stored result: each model's loss history, its weights at every snapshot step reached
(float32, base64) and, measured from those weights, the unselectable fraction per layer
at n = T (the whole context), before the LayerNorm (``resid_pre``) and after it
(``ln1``): on ``contexts`` held-out contexts at the last snapshot, and on
``curve_contexts`` of them at every snapshot (the fraction against the step).
:func:`measure_cached` keeps each model's measurement at a step in a directory of small
files, keyed by its weights and contexts, so that an export can reuse what an earlier
process measured (the curve's snapshots while the run still trains; the last step split
between processes, ``--warm``). :func:`layer_rows` gives the per-layer means with intervals
over seeds (Student-t, which judges the paper's values and trends) or over seeds and
contexts (the percentile bootstrap, about the range of three seeds);
:func:`claims` the chapter's checked statements about them.
Shapes: fractions [model][layer][context].
"""

from __future__ import annotations

import base64
import dataclasses
import hashlib
import json
import os
from pathlib import Path


import numpy as np
import torch

from lncourse.evidence.claims import Claim
from lncourse.selectability.experiments import PAPER_TABLE1, PAPER_TABLE2, prefix_fractions
from lncourse.selectability.lm import (VARIANTS, KeysLMConfig, build_model, held_out_contexts,
                               layer_vectors, stored_models as models_at, tokenized)
from lncourse.summary import paired_interval

__all__ = ["Claim", "result_of", "models_at", "measure", "measure_cached", "late_change", "layer_rows", "overall", "curve",
           "claims", "seeds_table", "PAPER"]


def _encode(params: dict[str, torch.Tensor], m: int) -> dict:
    return {k: base64.b64encode(p[m].detach().float().contiguous().numpy().tobytes())
            .decode() for k, p in params.items()}


def measure(models: list, contexts: torch.Tensor) -> dict[str, list]:
    """Fractions at n = T per model, layer and context: {"before": ..., "after": ...}."""
    T = contexts.shape[1]
    out = {"before": [], "after": []}
    for model in models:
        vec = layer_vectors(model, contexts)
        for key, name in (("resid_pre", "before"), ("ln1", "after")):
            out[name].append([prefix_fractions(v, [T])[:, 0].tolist() for v in vec[key]])
    return out


# bump when measure() changes what it returns: cached measurements of another version
# are not reused
MEASURE_VERSION = 1


def _key(label: str, weights: dict, contexts: torch.Tensor) -> str:
    """The variant is part of the key: at step 0 a seed's two variants share weights."""
    h = hashlib.sha256(f"v{MEASURE_VERSION}:{label}".encode())
    for k in sorted(weights):
        h.update(k.encode() + weights[k].encode())
    h.update(str(tuple(contexts.shape)).encode() + contexts.numpy().tobytes())
    return h.hexdigest()[:32]


def measure_cached(result: dict, step: int, contexts: torch.Tensor,
                   cache: Path | None, models=None) -> dict[str, list]:
    """:func:`measure` of the models of ``result`` at snapshot ``step``, each model read
    from ``cache`` (a directory) when a file for its weights and ``contexts`` is there,
    else measured and written there (atomically); ``models`` limits it to some indices
    (what a ``--warm`` process takes on)."""
    out = {"before": [], "after": []}
    nets = models_at(result, step)
    for m in range(len(nets)) if models is None else models:
        path = None if cache is None else \
            Path(cache) / f"{_key(result['labels'][m], result['weights'][str(step)][m], contexts)}.json"
        if path is not None and path.exists():
            got = json.loads(path.read_text())
        else:
            got = {k: v[0] for k, v in measure([nets[m]], contexts).items()}
            if path is not None:
                path.parent.mkdir(parents=True, exist_ok=True)
                tmp = path.with_name(f"{path.name}.{os.getpid()}.tmp")
                tmp.write_text(json.dumps(got))
                os.replace(tmp, path)
        for k in out:
            out[k].append(got[k])
    return out


def result_of(cfg, state: dict, contexts: int | None = None,
              curve_contexts: int = 4, cache: Path | None = None,
              warm_models=None) -> dict:
    """The stored result of a checkpoint ``state`` of ``cfg`` (see the module docstring);
    ``contexts`` overrides ``cfg.contexts`` (a partial export may measure fewer);
    ``cache``: see :func:`measure_cached`; with ``warm_models`` (model indices) only
    those models are measured, into the cache, and the result is not whole."""
    tok, _, test_ids = tokenized(cfg.lm)
    seeds = [seed for seed in cfg.seeds for _ in VARIANTS]     # as models_of orders them
    labels = [label for _ in cfg.seeds for label in VARIANTS]
    n_ctx = cfg.contexts if contexts is None else contexts
    ctx = held_out_contexts(test_ids, dataclasses.replace(
        cfg.lm, contexts=n_ctx, track_contexts=min(cfg.lm.track_contexts, n_ctx)))
    snaps = {int(k): v for k, v in state["snapshots"].items()}
    snaps[state["step"]] = state["params"]        # the last step, snapshot or not
    # config["steps"]: the run's length, which lncourse.results.describe compares with
    # the last step reached (INCOMPLETE when short of it)
    out = {"config": {**dataclasses.asdict(cfg), "steps": cfg.lm.steps},
           "seeds": seeds, "labels": labels,
           "tokenizer": {"kind": cfg.lm.tokenizer, "vocab_size": tok.vocab_size,
                         "fingerprint": getattr(tok, "fingerprint", None)},
           "step": state["histories"][0]["step"], "steps_done": state["step"],
           "histories": state["histories"], "snapshot_steps_done": sorted(snaps),
           "shapes": {k: list(p.shape[1:]) for k, p in state["params"].items()},
           "weights": {str(s): [_encode(snaps[s], m) for m in range(len(seeds))]
                       for s in sorted(snaps)},
           "contexts": ctx.tolist(), "measured_contexts": n_ctx,
           "curve_contexts": min(curve_contexts, n_ctx)}
    out["curve"] = {str(s): measure_cached(out, s, ctx[:curve_contexts], cache, warm_models)
                    for s in sorted(snaps)}
    if warm_models is None or state["step"] == cfg.lm.steps:   # warm the last step
        out["final"] = measure_cached(out, max(snaps), ctx, cache, warm_models)  # at the end
    return out


def _bootstrap(values: np.ndarray, reps: int = 2000, seed: int = 0) -> tuple:
    """Mean of values (seeds, contexts) and a 95% interval from resampling seeds, then
    contexts within each seed: (mean, low, high), in %."""
    rng = np.random.default_rng(seed)
    S, C = values.shape
    s = rng.integers(0, S, (reps, S))
    c = rng.integers(0, C, (reps, S, C))
    boot = values[s[..., None], c].mean(axis=(1, 2))
    lo, hi = np.percentile(boot, [2.5, 97.5])
    return 100 * values.mean(), 100 * lo, 100 * hi


def _student_t(values: np.ndarray) -> tuple:
    """Mean of values (seeds, contexts) and the 95% Student-t interval of the mean over
    seeds, each seed's mean over its contexts one observation: (mean, low, high), in %.
    With three seeds the bootstrap above is about their range; this is the interval
    for judging a paper's value or a trend."""
    return tuple(100 * v for v in paired_interval(np.asarray(values).mean(axis=1)))


INTERVALS = {"bootstrap": _bootstrap, "t": _student_t}


def layer_rows(result: dict, which: str = "final", step: int | None = None,
               interval: str = "bootstrap") -> dict:
    """{(label, "before"/"after"): [(mean, low, high) per layer]} in %, over the seeds
    and contexts measured (``which``: "final", or "curve" at ``step``); ``interval``:
    "bootstrap" (:func:`_bootstrap`) or "t" (:func:`_student_t`)."""
    ci = INTERVALS[interval]
    data = result["final"] if which == "final" else result["curve"][str(step)]
    rows = {}
    for label in VARIANTS:
        idx = [m for m, lab in enumerate(result["labels"]) if lab == label]
        for q in ("before", "after"):
            arr = np.asarray([data[q][m] for m in idx])          # (seeds, layers, contexts)
            rows[label, q] = [ci(arr[:, L]) for L in range(arr.shape[1])]
    return rows


def overall(result: dict, label: str, q: str = "after") -> tuple:
    """The mean over layers at the last measured step, in %, with a 95% interval that
    resamples seeds and, within each, contexts (as :func:`layer_rows`): (mean, low, high).
    """
    idx = [m for m, lab in enumerate(result["labels"]) if lab == label]
    arr = np.asarray([result["final"][q][m] for m in idx])   # (seeds, layers, contexts)
    return _bootstrap(arr.mean(axis=1))


def curve(result: dict, label: str, q: str = "after") -> tuple[list[int], np.ndarray]:
    """The fraction against the step: steps, and (steps, layers) means over seeds and the
    curve's contexts, in %."""
    steps = [int(s) for s in result["curve"]]
    idx = [m for m, lab in enumerate(result["labels"]) if lab == label]
    vals = np.asarray([[np.mean([result["curve"][str(s)][q][m][L] for m in idx])
                        for L in range(len(result["curve"][str(s)][q][idx[0]]))]
                       for s in steps])
    return steps, 100 * vals


# The "has it settled?" prediction: from this step on, the fraction without scaling (mean
# over layers) stays within this many points of its value there. Set at the 6,000-step
# export, after its curve was seen; the 14,000-step export found it broken after step
# 6,000, and the claim now states that (see claims()).
PLATEAU_FROM, PLATEAU_BAND, PLATEAU_SET_AT = 1000, 3.0, 6000
# The test of convergence for the finished run, written down on 2026-11-27 while the run
# was at step 21,700 and before any export past step 14,000: Table 1's quantity has
# settled if its change over the last 10,000 steps (paired by model and curve context)
# has a 95% interval inside +-2 points.
SETTLE_SINCE, SETTLE_BAND = 24000, 2.0


def late_change(result: dict, label: str, q: str = "after", since: int | None = None,
                interval: str = "t") -> tuple:
    """The change of the fraction (mean over layers) from step ``since`` to the last
    stored step (``since`` defaults to ``SETTLE_SINCE``), on the curve's contexts, paired
    by model and context, in points, with the interval ``interval`` ("t": Student-t over
    seeds, :func:`_student_t`; "bootstrap": :func:`_bootstrap`): (mean, low, high)."""
    since = SETTLE_SINCE if since is None else since
    last = str(result["snapshot_steps_done"][-1])
    idx = [m for m, lab in enumerate(result["labels"]) if lab == label]
    a = np.asarray([result["curve"][str(since)][q][m] for m in idx]).mean(axis=1)
    b = np.asarray([result["curve"][last][q][m] for m in idx]).mean(axis=1)
    return INTERVALS[interval](b - a)


PAPER = {("no scaling before attention", "after"): PAPER_TABLE1["without scaling"],
         ("full LayerNorm", "after"): PAPER_TABLE1["with scaling"],
         ("full LayerNorm", "before"): PAPER_TABLE2["before LayerNorm"]}
# What the replication page says of each row, per layer against the Student-t
# interval: Table 1's profile (and the zeros with scaling) within it in every layer,
# Table 2's not (its mean over layers is below the paper's, seeds_stats.stats_claims).
PAPER_INSIDE = {("no scaling before attention", "after"): True,
                ("full LayerNorm", "after"): True, ("full LayerNorm", "before"): False}


def _fmt(e) -> str:
    return f"{e[0]:.1f}% [{e[1]:.1f}, {e[2]:.1f}]"


def claims(result: dict) -> list[Claim]:
    """The chapter's statements about the seeded runs, checked against ``result``."""
    done, total = result["steps_done"], result["config"]["lm"]["steps"]
    last = result["snapshot_steps_done"][-1]
    rows = layer_rows(result, interval="t")      # judging: Student-t over seeds
    full, nos = "full LayerNorm", "no scaling before attention"
    n_seeds = len(set(result["seeds"]))
    out = [Claim("steps", f"The runs reached step {done:,} of {total:,} "
                 f"({'complete' if done == total else 'INCOMPLETE'}); the fractions are "
                 f"measured on the weights of step {last:,}, {n_seeds} seeds x "
                 f"{result['measured_contexts']} contexts per model.", done <= total)]
    full_idx = [m for m, lab in enumerate(result["labels"]) if lab == full]
    after_full = np.asarray(result["final"]["after"])[full_idx]
    out.append(Claim("full_ln_zero", "With full LayerNorm no key after the norm is "
                     f"unselectable: the largest fraction over its {after_full.size} "
                     f"(seed, layer, context) cells is {100 * after_full.max():.1f}%.",
                     bool(after_full.max() == 0)))
    low = [r[1] for r in rows[nos, "after"]]
    out.append(Claim("no_scaling_positive", "Without scaling every layer has unselectable "
                     "keys after the norm: per layer " + ", ".join(
                         _fmt(r) for r in rows[nos, "after"]) + " (95% Student-t over "
                     "seeds).", bool(min(low) > 0)))
    steps, vals = curve(result, nos)
    first, final = vals[0].mean(), vals[-1].mean()
    if len(steps) > 1:   # a trend needs two measured steps
        out.append(Claim("fraction_falls", f"Without scaling, the fraction after the norm "
                         f"(mean over layers, {result['curve_contexts']} contexts) fell "
                         f"from {first:.1f}% at step {steps[0]:,} to {final:.1f}% at "
                         f"step {steps[-1]:,}.", bool(final < first)))
    later = [i for i, s in enumerate(steps) if s >= PLATEAU_FROM]
    seen = [i for i in later if steps[i] <= PLATEAU_SET_AT]
    if len(later) > len(seen) > 1:     # steps beyond those the prediction was set on
        level = vals[later].mean(axis=1)
        band = np.abs(level - level[0]) <= PLATEAU_BAND
        left = next(steps[later[i]] for i in range(len(later)) if not band[i]) \
            if not band.all() else None
        out.append(Claim(
            "plateau", f"The prediction made at the step-{PLATEAU_SET_AT:,} export, that "
            f"from step {PLATEAU_FROM:,} on that fraction stays within "
            f"{PLATEAU_BAND:.0f} points of its value there ({level[0]:.1f}%), fails: it "
            f"held up to step {PLATEAU_SET_AT:,} "
            f"({level[len(seen) - 1]:.1f}%), left the band at step "
            f"{left if left is None else format(left, ',')} and is {level[-1]:.1f}% at "
            f"step {steps[-1]:,}.",
            bool(band[:len(seen)].all() and not band.all() and level[-1] < level[0])))
    if done == total and str(SETTLE_SINCE) in result["curve"]:
        d = late_change(result, nos)
        out.append(Claim(
            "settled", f"Over its last {done - SETTLE_SINCE:,} steps, Table 1's quantity "
            f"changed by {d[0]:+.1f} points [{d[1]:+.1f}, {d[2]:+.1f}] (paired by model "
            f"and context, 95% Student-t over seeds): {'inside' if -SETTLE_BAND < d[1] and d[2] < SETTLE_BAND else 'not inside'} "
            f"the ±{SETTLE_BAND:.0f} points set in advance for a settled count.",
            bool(-SETTLE_BAND < d[1] and d[2] < SETTLE_BAND), {"change": d}))
    for key, paper in PAPER.items():
        ours = rows[key]
        gaps = [o[0] - p for o, p in zip(ours, paper)]
        inside = [o[1] <= p <= o[2] for o, p in zip(ours, paper)]
        where = ", ".join(f"L{i + 1}" for i, v in enumerate(inside) if not v)
        out.append(Claim(f"paper_{key[0].split()[0]}_{key[1]}",
                         f"{key[0]}, {key[1]} the norm: ours " + ", ".join(
                             f"L{i + 1} {_fmt(o)} (paper {p:.1f})"
                             for i, (o, p) in enumerate(zip(ours, paper)))
                         + f" (95% Student-t over seeds); largest difference "
                         f"{max(gaps, key=abs):+.1f} points; the paper's value is "
                         + (f"outside the interval in {where}" if where else
                            "inside the interval in every layer") + ".",
                         bool(all(inside)) == PAPER_INSIDE[key],
                         {"inside": inside, "gaps": gaps, "paper": list(paper)}))
    return out


def seeds_table(result: dict, width: int | None = None) -> str:
    """Tables 1 and 2 from the seeded runs: per layer, mean [95% Student-t interval over
    seeds] (each seed's mean over its contexts one observation), each beside the paper's
    row; ``width`` defaults to the book's column."""
    from lncourse.paper import format_table
    from lncourse.results import COLUMN_CHARS
    rows = layer_rows(result, interval="t")
    out = []
    for (label, q), paper in PAPER.items():   # the interval on a row of its own (column)
        out.append([f"ours: {label}, {q} ln1", *[float(m) for m, _, _ in rows[label, q]]])
        out.append(["  95% Student-t",
                    *[f"[{lo:.1f}, {hi:.1f}]" for _, lo, hi in rows[label, q]]])
        out.append(["  paper", *[float(p) for p in paper]])
    n_layers = len(next(iter(rows.values())))
    header = ["% unselectable", *[f"L{i + 1}" for i in range(n_layers)]]
    return format_table(header, out, width=width or COLUMN_CHARS)
