"""What chapter 4 says of the device runs of the Figure 2 probe (issue 35, item 5).

Two stored files, both written by :mod:`lncourse.evidence.nope.stream_import` from a folder that
:mod:`lncourse.evidence.nope.stream_device` wrote, and read here:

* ``nope/stream_gpu.json``: on a lent GPU, the stored run's size again (with the
  training sequences read again after training) and the paper's budget, model by model
  as far as the budget went;
* ``nope/stream_overfit_cpu.json``: the stored size for one causal model on the CPU,
  with 200 training sequences read again.

:func:`load` returns a stored file (None while it does not exist), :func:`claims` the
sentences, each with ``holds`` (True, False, or None while too few models have run).
A page prints ``claim.text`` and states what ``holds`` says; every number is in the text
and in ``claim.values``.
"""

from __future__ import annotations

import numpy as np

from lncourse.evidence.claims import Claim
from lncourse.evidence.nope.stream_import import phase_view
from lncourse.evidence.nope.verdict import format_ci, claims as figure2_claims
from lncourse.results import RESULTS_DIR, load_result

__all__ = ["GPU", "CPU", "MIN_SEQS_PER_S", "SAME_AS_STORED", "load", "claims",
           "cpu_hours_per_model", "paper_profile", "shape_claim", "recency"]

GPU, CPU = "nope/stream_gpu", "nope/stream_overfit_cpu"
MIN_SEQS_PER_S = 1000      # what the GPU path was asked to reach on an H100-class card
SAME_AS_STORED = 2.0       # positions: a rerun of the stored protocol within this (mean)
PROBES = ("classifier", "regression")


def load(name: str = GPU) -> dict | None:
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


def claims(stored: dict | None, label: str = "the GPU") -> list[Claim]:
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
