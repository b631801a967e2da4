"""Reading the stored runs of chapter 4's all-positions probe (Chi et al.'s Figure 2):
the stored CPU run (``nope/stream_paper.json``, :mod:`lncourse.evidence.nope.stream_run`),
the lesson's slice of it, and the runs made on a lent GPU
(:mod:`lncourse.evidence.nope.stream_device`), imported here; with the chapter's
sentences on each. Shapes: a prediction array is (K + 1 depths, N * T), the N held-out
sequences of T positions one after another, as
:func:`lncourse.evidence.nope.stream_run.errors` reads it.

**What the stored run's answers carry.** The error of a probe (mean absolute error in
positions) mixes two things: how much of the position its answer carries, and how well
that answer is scaled. So beside the stored error, per model, probe and depth, this
module measures from the held-out predictions:

* :func:`correlation`: the Pearson correlation of the prediction with the true position
  (0 for a probe that reads nothing, 1 for one that reads it all, whatever its scale);
* :func:`spread`: the standard deviation of the answers. A linear answer that carries
  the position with correlation r errs least when its spread is r times the positions'
  (least squares); a wider spread adds error without adding information;
* :func:`recalibrated`: the error after a linear map ``a + b * prediction``, fitted by
  least squares on half of the held-out sequences and scored on the other half (both
  ways round, so every prediction is scored once, never by a map fitted to it), and
  clipped to the positions. It says how low the error would be if the probe's answer
  were scaled and centred well.

:func:`readings` computes the three for every finished model. The predictions are too
large for the installed package (and a Colab reader installs it), so the readings are
stored beside them, small, by::

    python -m lncourse.evidence.nope.stream_read

and ``tests/nope/test_stream_read.py`` recomputes them from the predictions. The
lesson's exercise reads a slice of them, :func:`lesson_answers`, stored apart by
``python -m lncourse.evidence.nope.stream_read --lesson`` (a test holds it equal to the
full ones). The chapter reads the stored run and its readings: :func:`summary` gives
each over seeds (mean and 95% t interval per depth); :func:`claims` are the chapter's
sentences on the run, each checked.

**A device run, imported.** :mod:`lncourse.evidence.nope.stream_device` writes a folder
(``stream_gpu.json`` and ``preds_<i>.npz``) on the machine that ran it. Here::

    python -m lncourse.evidence.nope.stream_read DIR [--name stream_gpu]

(:func:`store_device`) checks that every error in it is the error of its predictions,
names the commit whose code ran (the git blob ids it recorded), merges it with an earlier
import of the same configuration (a later session's models), and writes
``results/nope/<name>.json``, with the device's provenance, and
``results/nope/<name>_predictions.npz``. The readings (:func:`device_readings`) are
computed then and stored in the JSON; ``tests/nope/test_stream_read.py`` computes them
again. Each phase reads as a stored stream run (``{"results": {kind: [model, ...]},
"baseline": ...}``, :func:`phase_view`), so :mod:`lncourse.evidence.nope.claims` and
this module's readings read it as they read ``nope/stream_paper.json``.

**What chapter 4 says of the device runs** (issue 35, item 5). Two stored files, both
imported by :func:`store_device`:

* ``nope/stream_gpu.json``: on a lent GPU, the stored run's size again (with the
  training sequences read again after training) and the paper's budget, model by model
  as far as the budget went;
* ``nope/stream_overfit_cpu.json``: the stored size for one causal model on the CPU,
  with 200 training sequences read again.

:func:`load_device` returns a stored file (None while it does not exist),
:func:`device_claims` the sentences, each with ``holds`` (True, False, or None while too
few models have run). A page prints ``claim.text`` and states what ``holds`` says; every
number is in the text and in ``claim.values``.
"""

from __future__ import annotations

import argparse
import datetime
import json
import math
import subprocess
import time
from pathlib import Path

import numpy as np
from scipy import stats

from lncourse.evidence.claims import Claim
from lncourse.evidence.nope.probe import middle_baseline
from lncourse.evidence.nope.stream_run import errors
from lncourse.evidence.nope.claims import (claims as figure2_claims, depth_slope,
                                            format_ci, t_interval, uniform_guess)
from lncourse.results import (RESULTS_DIR, command_line, git_commit, load_result, store_run,
                              write_result)
from lncourse.summary import paired_interval

__all__ = ["PROBES", "STATED_HOLDS", "STATED_FAILS", "READINGS", "load_predictions",
           "readings", "load_readings", "main", "correlation", "spread", "recalibrated",
           "model_arrays", "summary", "claims", "BF16_TOLERANCE", "depth_trend",
           "trend_claim", "LESSON", "LESSON_DEPTHS", "lesson_answers",
           # a device run, imported
           "load_folder", "check", "find_commit", "phase_view", "welch_gap",
           "device_readings", "store_device", "store_readings",
           # the chapter's sentences on the device runs
           "GPU", "CPU", "MIN_SEQS_PER_S", "SAME_AS_STORED", "load_device", "device_claims",
           "cpu_hours_per_model", "paper_profile", "shape_claim", "recency"]

PROBES = ("classifier", "regression")
READINGS = "nope/stream_paper_readings"
LESSON = "nope/stream_paper_lesson"     # the lesson's slice of the predictions
LESSON_DEPTHS = (0, 6, 12)
MEASURES = ("corr", "spread", "recal")
# what chapter 4's prose states of the stored run: these claims hold, these do not
# (the chapter asserts both; tests/nope/test_ledger.py checks them on the stored run)
STATED_HOLDS = ("stream_reads_position", "stream_control_reads_nothing", "stream_too_wide",
                "stream_recalibrated_below", "stream_bfloat16")
STATED_FAILS = ("stream_classifier_below_baseline", "stream_regression_below_baseline",
                "stream_classifier_reproduces_figure2",
                "stream_regression_reproduces_figure2")
BF16_TOLERANCE = 2.0       # positions: what bfloat16 training features may move an error
STORED = "nope/stream_paper"      # the stored CPU run the device runs are set against
GPU, CPU = "nope/stream_gpu", "nope/stream_overfit_cpu"
MIN_SEQS_PER_S = 1000      # what the GPU path was asked to reach on an H100-class card
SAME_AS_STORED = 2.0       # positions: a rerun of the stored protocol within this (mean)


def load_predictions(stored: dict) -> dict[str, np.ndarray]:
    """The held-out predictions stored beside ``nope/stream_paper.json`` (its
    ``predictions`` file): "<kind>_<seed>_<probe>[_bfloat16]" -> (K + 1, N * T)."""
    with np.load(RESULTS_DIR / "nope" / stored["predictions"]) as f:
        return {k: f[k] for k in f.files}


def _check(pred, seq_len: int) -> np.ndarray:
    p = np.asarray(pred, dtype=float)
    if p.ndim != 2 or p.shape[1] == 0 or p.shape[1] % seq_len:
        raise ValueError(f"predictions must be (depths, N * {seq_len}), got {p.shape}")
    if not np.isfinite(p).all():
        raise ValueError("predictions must be finite")
    return p


def correlation(pred, seq_len: int) -> list[float]:
    """Per depth, the Pearson correlation of the predictions with the true positions; a
    depth whose predictions are all equal reads nothing and gets 0."""
    p = _check(pred, seq_len)
    y = np.tile(np.arange(seq_len, dtype=float), p.shape[1] // seq_len)
    pc, yc = p - p.mean(1, keepdims=True), y - y.mean()
    sp = np.sqrt((pc * pc).sum(1))
    r = (pc @ yc) / np.where(sp > 0, sp, 1.0) / np.sqrt(yc @ yc)
    return np.where(sp > 0, r, 0.0).tolist()


def spread(pred, seq_len: int) -> list[float]:
    """Per depth, the standard deviation of the predictions, in positions."""
    return _check(pred, seq_len).std(1).tolist()


def recalibrated(pred, seq_len: int) -> list[float]:
    """Per depth, the cross-fitted error of the linearly recalibrated predictions (see the
    module's docstring): sequences 0, 2, 4, ... fit the map scored on 1, 3, 5, ... and
    the other way round."""
    p = _check(pred, seq_len)
    n = p.shape[1] // seq_len
    if n < 2:
        raise ValueError("recalibration needs at least two held-out sequences")
    y = np.tile(np.arange(seq_len, dtype=float), n)
    seq = np.repeat(np.arange(n), seq_len)
    err = np.zeros(p.shape[0])
    for fit in (seq % 2 == 0, seq % 2 == 1):
        x, t = p[:, fit], y[fit]
        xc = x - x.mean(1, keepdims=True)
        var = (xc * xc).sum(1)
        b = np.where(var > 0, xc @ (t - t.mean()) / np.where(var > 0, var, 1.0), 0.0)
        a = t.mean() - b * x.mean(1)
        got = np.clip(a[:, None] + b[:, None] * p[:, ~fit], 0, seq_len - 1)
        err += np.abs(got - y[~fit]).sum(1)
    return (err / p.shape[1]).tolist()


def readings(stored: dict, predictions) -> dict:
    """kind -> probe -> {"seeds", "corr", "spread", "recal"}: per finished model (in the
    stored order) the correlation, spread and recalibrated error per depth, from its
    held-out predictions."""
    T = stored["config"]["seq_len"]
    out = {}
    for kind, runs in stored["results"].items():
        if runs:
            out[kind] = {probe: {"seeds": [r["seed"] for r in runs], **{
                q: [f(predictions[f"{kind}_{r['seed']}_{probe}"], T) for r in runs]
                for q, f in zip(MEASURES, (correlation, spread, recalibrated))}}
                for probe in PROBES}
    return out


def lesson_answers(stored: dict, predictions) -> dict[str, np.ndarray]:
    """"<kind>_<seed>_classifier" -> (len(LESSON_DEPTHS), N * T) int16: each finished
    model's classifier answers (0-based positions; the float32 runs, not the bfloat16
    copies) at the lesson's depths, as the full predictions hold them."""
    return {f"{kind}_{r['seed']}_classifier": np.asarray(
                predictions[f"{kind}_{r['seed']}_classifier"])[list(LESSON_DEPTHS)]
            .astype(np.int16) for kind, runs in stored["results"].items() for r in runs}


def load_readings(stored: dict) -> dict:
    """The stored readings of ``stored`` (``nope/stream_paper_readings.json``); refused
    if they were computed from another version of the run."""
    got = load_result(READINGS)
    if got["source_written"] != stored["provenance"]["written"]:
        raise ValueError(f"{READINGS}.json was computed from another stored run "
                         "(rewrite it: python -m lncourse.evidence.nope.stream_read)")
    return got["readings"]


def model_arrays(stored: dict, reads: dict) -> dict:
    """kind -> probe -> {"seeds", "mae", "mae_bfloat16", "corr", "spread", "recal"}, the
    last five (seeds, K + 1) arrays: the stored errors and the readings (:func:`readings`)
    of every finished model."""
    out = {}
    for kind, runs in stored["results"].items():
        if not runs:
            continue
        out[kind] = {}
        for probe in PROBES:
            r = reads[kind][probe]
            if r["seeds"] != [m["seed"] for m in runs]:
                raise ValueError(f"the readings of {kind} {probe} are of models "
                                 f"{r['seeds']}, the run's are {[m['seed'] for m in runs]}")
            out[kind][probe] = {
                "seeds": r["seeds"],
                "mae": np.array([m[f"mae_{probe}"] for m in runs]),
                "mae_bfloat16": np.array([m.get(f"mae_{probe}_bfloat16", m[f"mae_{probe}"])
                                          for m in runs]),
                **{q: np.array(r[q], dtype=float) for q in MEASURES}}
    return out


def _per_depth(a: np.ndarray) -> list:
    """Mean and 95% t interval over seeds per depth ((mean, low, high); with one seed the
    interval is None)."""
    return [(float(a[:, k].mean()), *(paired_interval(a[:, k])[1:] if len(a) > 1
                                      else (None, None))) for k in range(a.shape[1])]


def summary(stored: dict, reads: dict) -> dict:
    """kind -> probe -> {"mae", "corr", "spread", "recal": per depth (mean, low, high)}
    and ``seeds``."""
    return {kind: {probe: {"seeds": v["seeds"], **{q: _per_depth(v[q]) for q in
                                                   ("mae", "corr", "spread", "recal")}}
                   for probe, v in probes.items()}
            for kind, probes in model_arrays(stored, reads).items()}


def _mean_1_to_k(a: np.ndarray):
    """The mean over depths 1 ... K per model, then over models with its interval (as
    :func:`lncourse.evidence.nope.claims.summary`'s ``mean_1_to_K``)."""
    return t_interval(a[:, 1:].mean(1))


def claims(stored: dict, reads: dict, ablation: dict | None = None) -> list[Claim]:
    """The chapter's sentences on the stored run, checked (None while too few models have
    finished): the comparison with Figure 2 for each probe; that the causal probes'
    answers carry the position at every depth from 1 on and none at depth 0; that the
    bidirectional control's carry none; that recalibrated, the causal probes' error is
    below guessing the middle; what the data adds over the ablation's base probe (the
    same frozen models, paired by seed); and that bfloat16 training features move no
    error by as much as 2 positions."""
    arr = model_arrays(stored, reads)
    base = stored["baseline"]
    out = []
    for probe in PROBES:
        for c in figure2_claims(stored, key=f"mae_{probe}"):
            out.append(Claim(f"stream_{probe}_{c.key}", f"{probe.capitalize()}: {c.text}",
                             c.holds))
    causal, bi = arr.get("causal"), arr.get("bidirectional")
    if causal is None or len(causal["classifier"]["seeds"]) < 2:
        return out + [Claim("stream_reads", "Too few causal models have finished to say "
                            "what the probes read (INCOMPLETE).", None)]
    K = causal["classifier"]["corr"].shape[1] - 1
    lows, zero0 = {}, {}
    for probe in PROBES:
        ci = _per_depth(causal[probe]["corr"])
        lows[probe] = min(c[1] for c in ci[1:])
        zero0[probe] = ci[0]
    out.append(Claim(
        "stream_reads_position", "The causal probes' answers carry the position at every "
        f"depth from 1 to {K}: the lowest interval of their correlation with it starts at "
        f"{min(lows.values()):.3f}; after 0 layers the correlation is "
        + " and ".join(f"{format_ci(zero0[p], '{:+.3f}')} ({p})" for p in PROBES) + ".",
        min(lows.values()) > 0 and all(abs(z[0]) < 0.02 for z in zero0.values())))
    if bi is not None:
        top = max(float(np.abs(bi[p]["corr"].mean(0)).max()) for p in PROBES)
        n = len(bi["classifier"]["seeds"])
        out.append(Claim(
            "stream_control_reads_nothing", "The bidirectional control's answers carry "
            f"none of it: at no depth does the mean correlation over its {n} model(s) "
            f"exceed {top:.3f} in size.", top < 0.05))
    sd = float(np.arange(stored["config"]["seq_len"]).std())
    wide = {p: _mean_1_to_k(causal[p]["spread"] / np.maximum(causal[p]["corr"], 1e-3) / sd)
            for p in PROBES}
    out.append(Claim(
        "stream_too_wide", "Their answers are spread wider than what they carry warrants: "
        f"averaged over depths 1–{K}, each answer's spread is " + " and ".join(
            f"{format_ci(wide[p], '{:.1f}')} ({p})" for p in PROBES)
        + " times the least-squares spread (its correlation times the positions' "
        f"{sd:.0f}).", all(w[1] > 1 for w in wide.values())))
    recal = {p: _mean_1_to_k(causal[p]["recal"]) for p in PROBES}
    out.append(Claim(
        "stream_recalibrated_below", f"Recalibrated, averaged over depths 1–{K}, the same "
        "answers err by " + " and ".join(f"{format_ci(recal[p])} ({p})" for p in PROBES)
        + f", below the {base:.0f} of guessing the middle.",
        all(r[2] < base for r in recal.values())))
    if ablation is not None:
        out.append(_more_data(stored, causal, ablation))
    moved = max(float(np.abs(v[p]["mae_bfloat16"] - v[p]["mae"]).max())
                for v in arr.values() for p in PROBES)
    out.append(Claim(
        "stream_bfloat16", "Training features in bfloat16 leave every error within "
        f"{BF16_TOLERANCE:.0f} positions of float32's (the largest change: {moved:.2f}).",
        moved < BF16_TOLERANCE))
    return out


def depth_trend(stored: dict, reads: dict, probe: str = "classifier", mid: int = 4) -> dict:
    """EXPLORATORY (the recalibration was devised after the null result): over the causal
    models, how the recalibrated error falls and the correlation rises from depth 1 to
    depth K, and to depth ``mid``: each a paired (mean, low, high), 95% t over models."""
    c = model_arrays(stored, reads)["causal"][probe]
    r, k = c["recal"], c["corr"]
    K = r.shape[1] - 1
    return {"probe": probe, "K": K, "mid": mid, "models": len(r),
            "recal_drop": t_interval(r[:, 1] - r[:, K]),
            "recal_drop_to_mid": t_interval(r[:, 1] - r[:, mid]),
            "corr_rise": t_interval(k[:, K] - k[:, 1])}


def trend_claim(stored: dict, reads: dict, probe: str = "classifier") -> Claim:
    """The depth trend of :func:`depth_trend` as a sentence labelled exploratory; it
    holds when both intervals exclude 0 in the stated direction."""
    t = depth_trend(stored, reads, probe)
    K, m = t["K"], t["mid"]
    return Claim(
        f"stream_{probe}_recalibrated_depth_trend", f"Exploratory (the recalibration was "
        f"devised after the null result): recalibrated, the {probe}'s error falls by "
        f"{format_ci(t['recal_drop'])} positions from depth 1 to depth {K} "
        f"({format_ci(t['recal_drop_to_mid'])} of it by depth {m}), and the correlation of its "
        f"answers with the position rises by {format_ci(t['corr_rise'], '{:+.2f}')} "
        f"({t['models']} causal models).",
        t["recal_drop"][1] > 0 and t["corr_rise"][1] > 0, t)


def _more_data(stored: dict, causal: dict, ablation: dict) -> Claim:
    """The paper's classifier here against the ablation's base probe (the same classifier
    on the same frozen model, with 32 sequences and 400 updates), paired by seed at the
    ablation's depths."""
    depths = ablation["config"]["depths"]
    abl = {r["seed"]: r["mae"]["base"] for r in ablation["runs"]}
    c = causal["classifier"]
    both = [i for i, s in enumerate(c["seeds"]) if s in abl]
    if len(both) < 2:
        return Claim("stream_more_data", "Too few models shared with the ablation have "
                     "finished (INCOMPLETE).", None)
    d = [paired_interval(np.array([c["mae"][i][k] - abl[c["seeds"][i]][j]
                                   for i in both])) for j, k in enumerate(depths)]
    cfg, acfg = stored["config"], ablation["config"]
    return Claim(
        "stream_more_data", f"{cfg['train_seqs'] / acfg['train_seqs']:.0f} times the "
        f"ablation's sequences and {cfg['updates'] / acfg['updates']:.1f} times its "
        f"updates lower the classifier's error at depth {depths[-1]} (paired over "
        f"{len(both)} seeds: " + "; ".join(f"depth {k}: {format_ci(e, '{:+.1f}')}"
                                           for k, e in zip(depths, d)) + ").",
        bool(d[-1][2] < 0))


# A device run, imported: its folder checked and stored, with its readings.

def load_folder(folder: Path) -> tuple[dict, dict[str, np.ndarray]]:
    """The record and its arrays ("<phase>__<kind>_<seed>__<key>")."""
    folder = Path(folder)
    rec = json.loads((folder / "stream_gpu.json").read_text())
    if rec.get("format") != 1:
        raise ValueError(f"{folder}/stream_gpu.json is not a device record (format 1)")
    arrays = {}
    for name, file in rec["predictions"].items():
        with np.load(folder / file) as f:
            arrays[name] = f[name]
    return rec, arrays


def check(rec: dict, arrays: dict) -> int:
    """Every error the record states is that of its arrays (held-out and kept training
    predictions exactly, per-sequence errors to float32's rounding of their mean);
    returns how many were checked, raises ``ValueError`` at the first that is not."""
    n = 0
    for ph, p in rec["phases"].items():
        T = p["config"]["seq_len"]
        low = "" if p["config"]["dtype"] == "float32" else "_" + p["config"]["dtype"]
        for m in p["models"]:
            pre = f"{ph}__{m['kind']}_{m['seed']}__"
            for probe in PROBES:
                pairs = [(f"pred_{probe}", f"mae_{probe}", errors),
                         (f"pred_{probe}_train", f"mae_{probe}_train_subset", errors),
                         (f"seqerr_{probe}_held", f"mae_{probe}{low}", _mean),
                         (f"seqerr_{probe}_train", f"mae_{probe}_train", _mean)]
                for arr, key, f in pairs:
                    if pre + arr not in arrays:
                        if key in m and arr == f"pred_{probe}":
                            raise ValueError(f"{pre}{arr} is missing")
                        continue
                    got = f(arrays[pre + arr], T)
                    tol = 1e-12 if f is errors else 1e-4
                    if not np.allclose(got, m[key], rtol=0, atol=tol):
                        raise ValueError(f"{ph} {m['kind']} {m['seed']}: {key} is not the "
                                         f"error of {arr}")
                    n += 1
    return n


def _mean(seqerr, seq_len: int) -> list[float]:
    return np.asarray(seqerr, dtype=np.float64).mean(1).tolist()


def find_commit(code: dict[str, str], depth: int = 400) -> str:
    """The newest commit (of the last ``depth``) whose files have the blob ids ``code``
    records; "unknown: ..." if none has."""
    root = Path(__file__).resolve().parents[3]
    git = lambda *a: subprocess.run(["git", *a], cwd=root, capture_output=True,  # noqa
                                    text=True, timeout=60).stdout
    for commit in git("rev-list", f"-n{depth}", "HEAD").split():
        tree = dict(line.split("\t")[::-1] for line in
                    git("ls-tree", commit, "--", *code).splitlines())
        if all(tree.get(p, "").split()[-1:] == [b] for p, b in code.items()):
            return commit
    return "unknown: no commit of the last %d has this code" % depth


def phase_view(stored: dict, phase: str) -> dict:
    """A phase as a stored stream run: {"config", "results": {kind: [model]},
    "baseline"}."""
    p = stored["phases"][phase]
    res = {"causal": [], "bidirectional": []}
    for m in p["models"]:
        res[m["kind"]].append({k: v for k, v in m.items() if k != "kind"})
    return {"config": p["config"], "results": res,
            "baseline": middle_baseline(p["config"]["seq_len"])}


def welch_gap(held: np.ndarray, train: np.ndarray, level: float = 0.95):
    """Mean held-out minus mean training error per sequence, with the Welch t interval
    (two independent samples of sequences): (difference, low, high)."""
    a, b = np.asarray(held, float), np.asarray(train, float)
    va, vb = a.var(ddof=1) / len(a), b.var(ddof=1) / len(b)
    dof = (va + vb) ** 2 / (va ** 2 / (len(a) - 1) + vb ** 2 / (len(b) - 1))
    half = stats.t.ppf(0.5 + level / 2, dof) * math.sqrt(va + vb)
    d = float(a.mean() - b.mean())
    return d, d - half, d + half


def _depths(a: np.ndarray) -> list:
    """Per depth over models: (mean, low, high), the interval None for one model."""
    return [[float(a[:, k].mean()), *((t_interval(a[:, k]) or (0, None, None))[1:])]
            for k in range(a.shape[1])]


def _width(pred: np.ndarray, T: int) -> float:
    """How much wider the answers are spread than what they carry warrants, averaged over
    depths 1 ... K: spread / (correlation x the positions' standard deviation), as
    :func:`claims` reads it (1: least squares)."""
    r = np.maximum(np.asarray(correlation(pred, T)[1:]), 1e-3)
    return float(np.mean(np.asarray(spread(pred, T)[1:]) / r / np.arange(T).std()))


def device_readings(stored: dict, arrays: dict, reference: dict | None = None) -> dict:
    """Per phase and probe, over the causal models (intervals: 95% Student t over
    models): the held-out error per depth, averaged over depths 1 ... K and its slope;
    the bidirectional control's mean; the correlation of the answers with the position
    and the recalibrated error, averaged over depths 1 ... K; with training sequences read
    again, their error, the gap (held-out minus training, both in the training
    precision) per depth and averaged over 1 ... K, and per model that average with a
    Welch interval over sequences; with kept training predictions, how much too wide
    the answers are (:func:`_width`) on those training sequences and on the held-out
    ones; against ``reference`` (the stored CPU run), the
    paired difference of the depth-averaged error over the seeds both have."""
    out = {"baseline_middle": None, "baseline_uniform": None, "phases": {}}
    for ph, p in stored["phases"].items():
        view, T = phase_view(stored, ph), p["config"]["seq_len"]
        out["baseline_middle"], out["baseline_uniform"] = middle_baseline(T), uniform_guess(T)
        low = "" if p["config"]["dtype"] == "float32" else "_" + p["config"]["dtype"]
        causal = view["results"]["causal"]
        r = {"causal_models": [m["seed"] for m in causal],
             "bidirectional_models": [m["seed"] for m in view["results"]["bidirectional"]],
             "seqs_per_s": [m["seqs_per_s"] for m in p["models"]]}
        for probe in PROBES if causal else ():
            mae = np.array([m[f"mae_{probe}"] for m in causal])
            pre = [f"{ph}__causal_{m['seed']}__" for m in causal]
            preds = [arrays[s + f"pred_{probe}"] for s in pre]
            q = {"mae": _depths(mae), "mean_1_to_K": t_interval(mae[:, 1:].mean(1)),
                 "mean_1_to_K_each": mae[:, 1:].mean(1).tolist(),
                 "slope": t_interval([depth_slope(x) for x in mae]),
                 "corr_1_to_K": [float(np.mean(correlation(x, T)[1:])) for x in preds],
                 "recal_1_to_K": [float(np.mean(recalibrated(x, T)[1:])) for x in preds]}
            bi = view["results"]["bidirectional"]
            if bi:
                q["bidirectional_mae"] = np.mean([m[f"mae_{probe}"] for m in bi], 0).tolist()
            if f"mae_{probe}_train" in causal[0]:
                train = np.array([m[f"mae_{probe}_train"] for m in causal])
                gap = np.array([m[f"mae_{probe}{low}"] for m in causal]) - train
                q.update(train=_depths(train), gap=_depths(gap),
                         gap_1_to_K=t_interval(gap[:, 1:].mean(1)),
                         gap_1_to_K_each=[welch_gap(
                             arrays[s + f"seqerr_{probe}_held"][1:].mean(0),
                             arrays[s + f"seqerr_{probe}_train"][1:].mean(0)) for s in pre])
            if pre and pre[0] + f"pred_{probe}_train" in arrays:
                q["width_train"] = t_interval([_width(arrays[x + f"pred_{probe}_train"], T)
                                              for x in pre]) or [None] * 3
                q["width_held"] = t_interval([_width(x, T) for x in preds]) or [None] * 3
            if reference is not None and all(reference["config"][k] == p["config"][k]
                                              for k in ("seq_len", "n_layers", "d_model")):
                ref = {m["seed"]: m[f"mae_{probe}"] for m in reference["results"]["causal"]}
                d = [float(np.mean(m[f"mae_{probe}"][1:]) - np.mean(ref[m["seed"]][1:]))
                     for m in causal if m["seed"] in ref]
                q["minus_stored_1_to_K"] = {"each": d, "interval": t_interval(d)}
            r[probe] = q
        out["phases"][ph] = r
    return out


def _merge(old: dict, rec: dict) -> dict:
    """An earlier import and a new record of the same phases' configurations: the
    models of both (a model in both is refused)."""
    for ph, p in rec["phases"].items():
        if ph not in old["phases"]:
            old["phases"][ph] = p
            continue
        if old["phases"][ph]["config"] != p["config"]:
            raise ValueError(f"phase {ph}: the new record has another configuration")
        have = {(m["kind"], m["seed"]) for m in old["phases"][ph]["models"]}
        for m in p["models"]:
            if (m["kind"], m["seed"]) in have:
                raise ValueError(f"phase {ph}: {m['kind']} {m['seed']} is in both")
            old["phases"][ph]["models"].append(m)
        old["phases"][ph]["partial"] = p["partial"]
    return old


def store_device(folder: Path, name: str = "stream_gpu", argv=None) -> Path:
    """Store a device run's folder (see the module's docstring): ``results/nope/<name>.json``
    and ``<name>_predictions.npz``, merged with an earlier import of the same phases."""
    rec, arrays = load_folder(folder)
    n = check(rec, arrays)
    prov = dict(rec["provenance"])
    commit = find_commit(prov["code"])
    out = RESULTS_DIR / "nope" / f"{name}.json"
    npz = out.with_name(f"{name}_predictions.npz")
    runs = []
    if out.exists():
        old = load_result(out)
        runs = old["provenance"].get("runs", []) + [
            {k: v for k, v in old["provenance"].items() if k != "runs"}]
        with np.load(npz) as f:
            arrays = {**{k: f[k] for k in f.files}, **arrays}
        rec = _merge({"phases": old["phases"]}, rec)
    ref = load_result(STORED)
    stored = {"config": {ph: p["config"] for ph, p in rec["phases"].items()},
              "phases": rec["phases"], "predictions": npz.name}
    stored["readings"] = device_readings(stored, arrays, ref)
    stored["provenance"] = {
        **prov, "git_commit": commit, "runs": runs, "checked_errors": n,
        "written": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "imported": {"command": "python -m lncourse.evidence.nope.stream_read " + " ".join(
            argv if argv is not None else [str(folder)]), "git_commit": git_commit()}}
    npz.parent.mkdir(parents=True, exist_ok=True)
    np.savez_compressed(npz, **arrays)
    write_result(out, stored)
    print(f"wrote {out} ({n} errors checked; code of commit {commit[:12]}; "
          f"{prov['wall_seconds']:.0f} s on {prov['device']})")
    return out


# What chapter 4 says of the device runs.

def load_device(name: str = GPU) -> dict | None:
    """The stored file ``name`` (``GPU`` or ``CPU``), or None if it was not stored."""
    if not (RESULTS_DIR / f"{name}.json").exists():
        return None
    return load_result(name)


def cpu_hours_per_model(seqs: int = 160_000) -> float:
    """CPU-hours of the frozen model's forward passes for ``seqs`` sequences, at the
    bfloat16 rate of ``nope/features_benchmark.json`` (every position, all depths)."""
    b = load_result("nope/features_benchmark")
    path = b["paths"]["new_all_positions_bfloat16"]
    per_seq = path["cpu_s"] / (path["positions"] / b["config"]["model"]["seq_len"])
    return seqs * per_seq / 3600


def _n(stored: dict, phase: str) -> int:
    return len(stored["readings"]["phases"].get(phase, {}).get("causal_models", []))


def device_claims(stored: dict | None, label: str = "the GPU") -> list[Claim]:
    """The sentences on one stored device run (None: the run was not stored)."""
    if stored is None:
        h = cpu_hours_per_model()
        return [Claim("stream_device_not_run", f"The run on {label} has not been stored "
                      f"yet. The paper's budget needs a GPU: its 160,000 sequences per "
                      f"model take about {h:.0f} CPU-hours of forward passes alone (the "
                      "stored benchmark's bfloat16 rate on one core).", None,
                      {"cpu_hours_per_model": h})]
    out, R = [], stored["readings"]["phases"]
    K = next(iter(stored["config"].values()))["n_layers"]
    dev = stored["provenance"]["device"]
    if "paper" in R and R["paper"]["seqs_per_s"]:
        s = R["paper"]["seqs_per_s"]
        out.append(Claim(
            "stream_gpu_throughput", "At the paper's budget the probes trained at "
            + (f"{s[0]:,.0f} sequences per second on {dev} (1 model), " if len(s) == 1 else
               f"{min(s):,.0f}–{max(s):,.0f} sequences per second on {dev} ({len(s)} "
               "models), ") +
            f"against the {MIN_SEQS_PER_S:,} asked for.", min(s) >= MIN_SEQS_PER_S,
            {"min": min(s), "max": max(s)}))
    if "stored" in R and _n(stored, "stored"):
        out += _overfit(R["stored"], K)
        out += _rerun(R["stored"])
    if _n(stored, "paper") >= 2:
        view = phase_view(stored, "paper")
        for probe in PROBES:
            for c in figure2_claims(view, key=f"mae_{probe}"):
                out.append(Claim(f"paper_budget_{probe}_{c.key}", f"At the paper's budget, "
                                 f"{probe}: {c.text}", c.holds))
        out += _against_stored(R["paper"])
    elif "paper" in R:
        P, n = R["paper"], _n(stored, "paper")
        each = ""
        if n:
            each = ": averaged over depths 1–%d, its errors are " % K + " and ".join(
                f"{P[p]['mean_1_to_K_each'][0]:.1f} ({p}"
                + (f", {P[p]['minus_stored_1_to_K']['each'][0]:+.1f} against the stored "
                   "run's same model" if P[p].get("minus_stored_1_to_K", {}).get("each")
                   else "") + ")" for p in PROBES)
        out.append(Claim("paper_budget_incomplete", f"At the paper's budget {n} causal "
                         f"model(s) have finished{each}; too few to compare with Figure 2 "
                         "(INCOMPLETE).", None,
                         {p: P[p]["mean_1_to_K_each"] for p in PROBES if n}))
    return out


def _gap(r: dict):
    """(mean, low, high) of the held-out minus training error averaged over depths 1..K:
    over models with two or more, else the one model's Welch interval over sequences."""
    return r["gap_1_to_K"] or r["gap_1_to_K_each"][0]


def _overfit(r: dict, K: int) -> list[Claim]:
    n = len(r["causal_models"])
    over = "models" if n > 1 else "sequences (one model)"
    g = {p: _gap(r[p]) for p in PROBES}
    train = {p: float(np.mean([d[0] for d in r[p]["train"][1:]])) for p in PROBES}
    text = (f"At the stored size, averaged over depths 1–{K}, the held-out error exceeds "
            "the error on the training sequences read again by " + " and ".join(
                f"{format_ci(g[p])} positions ({p}; training error {train[p]:.1f})"
                for p in PROBES) + f"; 95% t intervals over {over}.")
    values = {p: list(g[p]) for p in PROBES}
    out = []
    w = {p: (r[p].get("width_train"), r[p].get("width_held")) for p in PROBES}
    if all(v[0] and v[0][1] is not None for v in w.values()):
        wide = all(w[p][0][1] > 1 for p in PROBES)
        out.append(Claim(
            "stored_size_wide_on_training_too", "On sequences they trained on, the "
            "answers are spread " + " and ".join(f"{format_ci(w[p][0])} ({p})" for p in PROBES)
            + " times wider than what they carry warrants, against " + " and ".join(
                format_ci(w[p][1]) for p in PROBES) + " on held-out ones: the too-wide spread "
            + ("is not a matter of over-fitting." if wide else
               "may be over-fitting, at least in part."), wide, w))
    return out + [
        Claim("stored_size_overfits", text, all(g[p][1] > 0 for p in PROBES), values),
        Claim("stored_size_overfitting_small", "Over-fitting accounts for less than "
              f"{SAME_AS_STORED:.0f} positions of either probe's error.",
              all(g[p][2] < SAME_AS_STORED for p in PROBES), values)]


def _rerun(r: dict) -> list[Claim]:
    d = {p: r[p].get("minus_stored_1_to_K") for p in PROBES}
    if any(v is None or not v["each"] for v in d.values()):
        return []
    show = {p: v["interval"] or (v["each"][0], None, None) for p, v in d.items()}
    text = ("The rerun of the stored protocol differs from the stored CPU run by " + " and ".join(
        (format_ci(show[p], "{:+.1f}") if show[p][1] is not None else f"{show[p][0]:+.1f}")
        + f" ({p})" for p in PROBES) + f" positions averaged over depths, paired by seed "
        f"({len(d['classifier']['each'])} model(s)).")
    holds = all(abs(v[0]) < SAME_AS_STORED for v in show.values())
    return [Claim("rerun_matches_stored", text, holds, {p: show[p] for p in PROBES})]


def _against_stored(r: dict) -> list[Claim]:
    d = {p: r[p].get("minus_stored_1_to_K") for p in PROBES}
    if any(v is None or v["interval"] is None for v in d.values()):
        return []
    iv = {p: v["interval"] for p, v in d.items()}
    return [Claim(
        "paper_budget_lowers_error", "A hundred times the stored run's sequences change "
        "the error averaged over depths by " + " and ".join(
            f"{format_ci(iv[p], '{:+.1f}')} ({p})" for p in PROBES)
        + " positions (paired by seed).", all(v[2] < 0 for v in iv.values()),
        {p: iv[p] for p in PROBES})]


def paper_profile(stored: dict) -> dict:
    """The first model at the paper's budget, depth by depth (Figure 2's shape, which the
    mean over depths hides): per probe its error at every depth 0 ... K, the depth of its
    lowest error among 1 ... K, and the least-squares slope of the error over depths
    1 ... K, in positions per layer."""
    paper = stored["readings"]["phases"]["paper"]
    out = {}
    for probe in PROBES:
        mae = [row[0] for row in paper[probe]["mae"]]
        depths = np.arange(1, len(mae))
        out[probe] = {"mae": mae, "lowest_depth": int(depths[np.argmin(mae[1:])]),
                      "slope_1_to_K": float(np.polyfit(depths, mae[1:], 1)[0])}
    return out


def shape_claim(stored: dict) -> Claim:
    """Figure 2 has the error falling as layers are added (Chi et al. 2023, section 2: "an
    increase in the number of layers resulting in higher probing performance"). The
    claim: the paper-budget model has the opposite shape, its error rising with depth
    over depths 1 ... K for both probes (a positive slope); n = 1 model."""
    prof = paper_profile(stored)
    c, r = prof["classifier"], prof["regression"]
    K = len(c["mae"]) - 1
    holds = c["slope_1_to_K"] > 0 and r["slope_1_to_K"] > 0
    return Claim(
        "paper_budget_shape",
        f"Depth by depth, the paper-budget model does not have Figure 2's shape: the "
        f"classifier's error is lowest at depth {c['lowest_depth']} "
        f"({c['mae'][c['lowest_depth']]:.1f}) and rises after it, "
        f"{c['slope_1_to_K']:+.1f} positions per layer over depths 1 to {K} "
        f"({c['mae'][K]:.1f} at depth {K}); the regression probe's rises "
        f"{r['slope_1_to_K']:+.1f} per layer, from {r['mae'][1]:.1f} to {r['mae'][K]:.1f}. "
        f"Figure 2's error falls with depth. One model: no interval.", holds,
        {p: {k: v for k, v in prof[p].items() if k != "mae"} for p in PROBES})


def recency(stored: dict) -> dict:
    """Whether the stored protocol's probes fit their training sequences by recency: the
    rerun at the stored size reads every training sequence again after training. Per
    probe, the error on the training sequences by quarter of the training stream (in the
    order they were trained on), on its last batch, and on the held-out sequences; each a
    mean over the causal models and depths 1 ... K. Each batch is trained on
    ``updates / batches`` times in a row and never again, so a probe that remembers what
    it saw last errs less on the last quarter than on the first."""
    with np.load(RESULTS_DIR / "nope" / stored["predictions"]) as f:
        arrays = {k: f[k] for k in f.files}
    cfg = stored["config"]["stored"]
    batch = cfg["seqs_per_batch"]
    out = {}
    for probe in PROBES:
        train = np.stack([arrays[f"stored__causal_{s}__seqerr_{probe}_train"]
                          for s in cfg["seeds"]
                          if f"stored__causal_{s}__seqerr_{probe}_train" in arrays])
        held = np.stack([arrays[f"stored__causal_{s}__seqerr_{probe}_held"]
                         for s in cfg["seeds"]
                         if f"stored__causal_{s}__seqerr_{probe}_held" in arrays])
        per_seq = train[:, 1:, :].mean(axis=(0, 1))        # (sequences,), in training order
        quarters = np.array_split(per_seq, 4)
        out[probe] = {"models": int(train.shape[0]),
                      "train_by_quarter": [float(q.mean()) for q in quarters],
                      "train_last_batch": float(per_seq[-batch:].mean()),
                      "held_out": float(held[:, 1:, :].mean())}
    return out


def store_readings(lesson: bool = False, argv=None) -> Path:
    """Store the readings of the stored run (``nope/stream_paper_readings.json``); with
    ``lesson``, the lesson's slice of its predictions (``nope/stream_paper_lesson``)."""
    t0 = time.perf_counter()
    stored = load_result(STORED)
    started = {"command": command_line("lncourse.evidence.nope.stream_read", argv),
               "git_commit": git_commit()}
    if lesson:
        npz = RESULTS_DIR / f"{LESSON}_predictions.npz"
        np.savez_compressed(npz, **lesson_answers(stored, load_predictions(stored)))
        payload = {"config": {"source": "nope/stream_paper.json", "depths": list(LESSON_DEPTHS),
                              **{k: stored["config"][k] for k in ("seq_len", "eval_seqs")}},
                   "source_written": stored["provenance"]["written"], "predictions": npz.name}
        return store_run(RESULTS_DIR / f"{LESSON}.json", payload, "cpu",
                         time.perf_counter() - t0, started,
                         device_note="sliced from stored predictions")
    payload = {"config": {"source": "nope/stream_paper.json", "measures": list(MEASURES),
                          "recalibration": "least-squares line, fitted on even held-out "
                          "sequences and scored on odd ones, and the other way round"},
               "source": "nope/stream_paper.json",
               "source_written": stored["provenance"]["written"],
               "readings": readings(stored, load_predictions(stored))}
    return store_run(RESULTS_DIR / f"{READINGS}.json", payload, "cpu",
                     time.perf_counter() - t0, started,
                     device_note="computed from stored predictions")


def main(argv: list[str] | None = None) -> Path:
    """``python -m lncourse.evidence.nope.stream_read [--lesson]``: store the readings of
    the stored run (:func:`store_readings`); ``... stream_read DIR [--name NAME]``: store
    a device run's folder (:func:`store_device`)."""
    p = argparse.ArgumentParser(prog="python -m lncourse.evidence.nope.stream_read",
                                description="Store the readings of chapter 4's probe run, "
                                "or a device run of it (a folder from stream_device).")
    p.add_argument("folder", type=Path, nargs="?",
                   help="a device run's folder to store (without: the stored run's readings)")
    p.add_argument("--name", default=None,
                   help="with a folder: results/nope/<name>.json (default stream_gpu)")
    p.add_argument("--lesson", action="store_true", help="store lesson_answers")
    a = p.parse_args(argv)
    if a.folder is not None:
        if a.lesson:
            p.error("--lesson slices the stored run's predictions; it takes no folder")
        return store_device(a.folder, a.name or "stream_gpu", argv)
    if a.name is not None:
        p.error("--name names where a device run's folder is stored; give the folder")
    return store_readings(a.lesson, argv)


if __name__ == "__main__":
    main()
