"""What chapter 4 reads from the stored all-positions probe run (``nope/stream_paper.json``
and its held-out predictions, :mod:`lncourse.evidence.nope.stream`).

The error of a probe (mean absolute error in positions) mixes two things: how much of the
position its answer carries, and how well that answer is scaled. So beside the stored
error, per model, probe and depth, this module measures from the held-out predictions:

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

    python -m lncourse.evidence.nope.stream_report

and ``tests/nope/test_stream_report.py`` recomputes them from the predictions. The
lesson's exercise reads a slice of them, :func:`lesson_answers`, stored apart by ``python
-m lncourse.evidence.nope.stream_report --lesson`` (a test holds it equal to the full ones). The
chapter reads the stored run and its readings: :func:`summary` gives each over seeds
(mean and 95% t interval per depth); :func:`claims` are the chapter's sentences on the
run, each checked. Shapes: a
prediction array is (K + 1 depths, N * T), the N held-out sequences of T positions one
after another, as :func:`lncourse.evidence.nope.stream.errors` reads it.
"""

from __future__ import annotations

import numpy as np

from lncourse.evidence.claims import Claim
from lncourse.evidence.nope.verdict import format_ci, t_interval, claims as figure2_claims
from lncourse.results import RESULTS_DIR
from lncourse.summary import paired_interval

__all__ = ["PROBES", "STATED_HOLDS", "STATED_FAILS", "READINGS", "load_predictions",
           "readings", "load_readings", "main", "correlation", "spread", "recalibrated", "model_arrays", "summary", "claims",
           "BF16_TOLERANCE", "depth_trend", "trend_claim", "LESSON", "LESSON_DEPTHS",
           "lesson_answers"]

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
    from lncourse.results import load_result

    got = load_result(READINGS)
    if got["source_written"] != stored["provenance"]["written"]:
        raise ValueError(f"{READINGS}.json was computed from another stored run "
                         "(rewrite it: python -m lncourse.evidence.nope.stream_report)")
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
    :func:`lncourse.evidence.nope.verdict.summary`'s ``mean_1_to_K``)."""
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


def main(argv: list[str] | None = None):
    """``python -m lncourse.evidence.nope.stream_report``: store the readings of the stored run."""
    import argparse
    import time

    from lncourse.results import git_commit, command_line, load_result, store_run

    parser = argparse.ArgumentParser(prog="python -m lncourse.evidence.nope.stream_report", description=
                                     "Store the readings of chapter 4's probe run.")
    parser.add_argument("--lesson", action="store_true", help="store lesson_answers")
    args = parser.parse_args(argv)
    t0 = time.perf_counter()
    stored = load_result("nope/stream_paper")
    started = {"command": command_line("lncourse.evidence.nope.stream_report", argv),
               "git_commit": git_commit()}
    if args.lesson:
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


if __name__ == "__main__":
    main()
