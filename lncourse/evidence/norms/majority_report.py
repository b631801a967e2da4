"""What chapter 5 reports from the majority arms' run: each arm at its tuned learning
rate, paired against LayerNorm (chapter 5).

The learning rate of each arm is chosen by :data:`SELECTION_RULE`, written down (and
committed) before the stored run started. Everything here is recomputed from a stored
history (:func:`lncourse.evidence.norms.majority_run.train`): its evaluation curves and its final
weights, with the test set rebuilt from the stored configuration.
"""

from __future__ import annotations

import hashlib
import math

import numpy as np
import torch

from lncourse.majority.stats import steps_to_threshold
from lncourse.summary import paired_interval

__all__ = ["SELECTION_RULE", "RUNS", "per_seed_steps", "select_lr", "summary",
           "verdict", "table", "reported", "main"]

SELECTION_RULE = (
    "For each arm, the learning rate with the smallest mean over the 10 seeds of steps to "
    "90% test accuracy, where a seed that never reaches 90% (or diverges first) counts as "
    "the run's last step plus one evaluation interval (a penalty, and a lower bound on its "
    "true value); an exact tie goes to the smaller learning rate. A learning rate at which "
    "any seed diverged (non-finite loss) is chosen only if every learning rate has one.")


def per_seed_steps(history: dict, arm: str, lr: float, threshold: float) -> np.ndarray:
    """Steps to ``threshold`` test accuracy for each seed of (arm, lr), in the run's seed
    order; NaN where the seed never reaches it (or only after diverging)."""
    cols = _columns(history, arm, lr)
    acc = np.asarray(history["test_acc"], dtype=float)[:, cols].T        # (seeds, evals)
    steps = np.asarray(history["step"], dtype=float)
    for row, m in enumerate(cols):       # a diverged model's curve ends at its divergence
        at = history["diverged_at"][m]
        if at is not None:
            acc[row, steps >= at] = -np.inf
    return steps_to_threshold(steps, acc, threshold)


def _columns(history: dict, arm: str, lr: float) -> list[int]:
    cols = [m for m, (a, r) in enumerate(zip(history["arm"], history["lr"]))
            if a == arm and math.isclose(r, lr)]
    if not cols:
        raise ValueError(f"arm {arm!r} at lr {lr:g} is not in this history")
    return cols


def _penalised(history: dict, values: np.ndarray) -> np.ndarray:
    last = history["step"][-1] + history["config"]["eval_every"]
    return np.where(np.isnan(values), last, values)


def select_lr(history: dict, arm: str) -> tuple[float, dict[float, float]]:
    """The learning rate :data:`SELECTION_RULE` picks for ``arm``, and each lr's score
    (mean penalised steps to 90%)."""
    lrs = sorted(set(history["config"]["lrs"]))
    score, diverged = {}, {}
    for lr in lrs:
        score[lr] = float(_penalised(history, per_seed_steps(history, arm, lr, 0.9)).mean())
        diverged[lr] = any(history["diverged_at"][m] is not None
                           for m in _columns(history, arm, lr))
    allowed = [lr for lr in lrs if not diverged[lr]] or lrs
    best = min(allowed, key=lambda lr: (score[lr], lr))
    return best, score


def _finite_or_none(values: np.ndarray) -> list:
    return [None if np.isnan(v) else float(v) for v in values]


def _censored(history: dict, arm: str, lr: float, threshold: float) -> np.ndarray:
    """Steps to ``threshold`` with never-reached seeds at the run's last step (chapter 3's
    convention: a lower bound for those seeds)."""
    values = per_seed_steps(history, arm, lr, threshold)
    return np.where(np.isnan(values), float(history["step"][-1]), values)


# (arm, the model's final weights, the test set) -> its geometry: a model measured once
# per process (a ledger's test recomputes the summary of edited copies of a run)
_GEOMETRY_CACHE: dict[tuple, tuple] = {}


def _digest(obj) -> str:
    return hashlib.sha256(repr(obj).encode()).hexdigest()


def _geometry(history: dict, arm: str, lr: float, data: dict) -> dict:
    """Final query angle (degrees, weighted over the test tokens) and attention's distance
    to uniform (chapter 3's measures) of each seed of (arm, lr), from its final weights."""
    from lncourse.norms import majority as arms_mod
    weight = data["test_counts"].sum(dim=0).double()
    counts = hashlib.sha256(data["test_counts"].cpu().numpy().tobytes()).hexdigest()
    angle, tv, score_std = [], [], []
    for m in _columns(history, arm, lr):
        rows = {k: v[m] for k, v in history["final_params"].items()}
        key = (arm, _digest(rows), counts)
        if key not in _GEOMETRY_CACHE:
            p = {k: torch.tensor(v, dtype=torch.float64) for k, v in rows.items()}
            a = arms_mod.query_angles(p, arm)  # NaN for an arm without a query in h's space
            u = arms_mod.uniformity(p, arm, data["test_counts"])
            _GEOMETRY_CACHE[key] = (
                None if a.isnan().any() else float((a * weight).sum() / weight.sum()),
                u[0], u[1])
        a_, t_, s_ = _GEOMETRY_CACHE[key]
        angle.append(a_)
        tv.append(t_)
        score_std.append(s_)
    return {"query_angle": angle, "attention_tv": tv, "score_std": score_std}


def summary(history: dict, data: dict | None = None) -> dict:
    """Every number chapter 5 reports from a run (see the module's docstring): per arm the
    lr scores and the chosen lr; at it, steps to 80% and 90% per seed (None: never reached),
    their means censored at the last step with the count reached, the paired difference
    from LayerNorm at its own chosen lr (mean and 95% t interval over seeds), and at the
    lr the rule would choose without its divergence clause (``fastest_lr``), the same
    with both arms at each single lr of the grid (untuned), and the final geometry. ``data``: the test set
    (:func:`lncourse.evidence.norms.majority_run.test_data`; rebuilt from the config if None)."""
    from lncourse.evidence.norms.majority_run import ArmsConfig, test_data
    config = ArmsConfig.from_dict(history["config"])
    data = data if data is not None else test_data(config)
    cols = {a: {} for a in config.arms}
    best, scores_of = {}, {}
    for arm in config.arms:
        best[arm], scores = select_lr(history, arm)
        scores_of[arm] = scores
        cols[arm]["lr_scores"] = {f"{lr:g}": s for lr, s in scores.items()}
        cols[arm]["best_lr"] = best[arm]
    for arm in config.arms:
        out = cols[arm]
        for th in (80, 90):
            raw = per_seed_steps(history, arm, best[arm], th / 100)
            out[f"steps_to_{th}"] = _finite_or_none(raw)
            out[f"reached_{th}"] = int((~np.isnan(raw)).sum())
            out[f"mean_steps_to_{th}"] = float(_censored(history, arm, best[arm], th / 100).mean())
            if arm != "layernorm" and "layernorm" in config.arms:
                diff = _censored(history, arm, best[arm], th / 100) - \
                    _censored(history, "layernorm", best["layernorm"], th / 100)
                out[f"vs_layernorm_{th}"] = list(paired_interval(diff))
                if th == 90:      # the rule without its divergence clause: the lr with
                    # the smallest score, against LayerNorm at its chosen lr
                    fastest = min(sorted(config.lrs), key=lambda lr: scores_of[arm][lr])
                    out["fastest_lr"] = fastest
                    out["vs_layernorm_90_fastest_lr"] = list(paired_interval(
                        _censored(history, arm, fastest, 0.9)
                        - _censored(history, "layernorm", best["layernorm"], 0.9)))
                out[f"vs_layernorm_{th}_same_lr"] = {   # both arms at one lr, untuned
                    f"{lr:g}": list(paired_interval(
                        _censored(history, arm, lr, th / 100)
                        - _censored(history, "layernorm", lr, th / 100)))
                    for lr in config.lrs}
        last = np.asarray(history["test_acc"][-1])[_columns(history, arm, best[arm])]
        out["final_acc"] = float(last.mean())
        geo = _geometry(history, arm, best[arm], data)
        out.update({f"{k}_per_seed": v for k, v in geo.items()})
        out.update({f"mean_{k}": None if None in v else float(np.mean(v))
                    for k, v in geo.items()})
    ran = {k: history["config"][k] for k in ("batch_size", "lrs", "seeds", "arms", "eval_every",
                                             "eval_size")}
    ran.update(steps=history["config"]["steps"], last_step=history["step"][-1],
               complete=history["step"][-1] == history["config"]["steps"],
               diverged=sum(a is not None for a in history["diverged_at"]))
    return {"ran": ran, "rule": SELECTION_RULE, "arms": cols, "verdict": verdict(cols)}


def verdict(cols: dict) -> dict:
    """Whether each arm reaches 90% sooner than LayerNorm, both at their tuned lrs and
    both at each single lr of the grid: "faster", "slower" (the 95% interval of the paired
    difference in steps below or above 0) or "not resolved"."""
    def word(ci):
        return "faster" if ci[2] < 0 else "slower" if ci[1] > 0 else "not resolved"
    return {arm: {"tuned": word(c["vs_layernorm_90"]),
                  **{f"lr {lr}": word(ci) for lr, ci in c["vs_layernorm_90_same_lr"].items()}}
            for arm, c in cols.items() if "vs_layernorm_90" in c}


def table(summary_: dict) -> list[tuple[str, ...]]:
    """Rows for the chapter: arm, chosen lr, mean steps to 80% and 90% (seeds reached),
    the paired difference from LayerNorm with its interval, query angle, distance to
    uniform attention."""
    rows = []
    for arm, c in summary_["arms"].items():
        def ci(key):
            return "—" if key not in c else "{:+.0f} [{:+.0f}, {:+.0f}]".format(*c[key])
        n = len(c["steps_to_90"])
        angle = "n/a" if c["mean_query_angle"] is None else f"{c['mean_query_angle']:.0f}°"
        rows.append((arm, f"{c['best_lr']:g}",
                     f"{c['mean_steps_to_80']:.0f} ({c['reached_80']}/{n})", ci("vs_layernorm_80"),
                     f"{c['mean_steps_to_90']:.0f} ({c['reached_90']}/{n})", ci("vs_layernorm_90"),
                     angle, f"{c['mean_attention_tv']:.3f}"))
    return rows


# The stored runs chapter 5 reports: the reduced run (batch 500, 300 steps) and the
# paper's batch (6,000) for the first 600 of its steps. One ledger holds both.
RUNS = {"reduced": "norms/majority_reduced", "paper_batch": "norms/majority_paper_batch"}
SOURCE, LEDGER = RUNS["reduced"], "norms/majority_reported"


def reported(stored: dict, data: dict | None = None, run: str = "reduced") -> dict:
    """Every number chapter 5 reports from the stored run ``run`` (a key of :data:`RUNS`):
    what ran, :func:`summary` and the run's claims."""
    from lncourse.evidence.norms import claims
    from lncourse.results import describe
    if run not in RUNS:
        raise ValueError(f"run must be one of {sorted(RUNS)}, got {run!r}")
    out = summary(stored, data)
    checked = claims.arms_claims(out) if run == "reduced" else claims.arms_batch_claims(out)
    return {"describe": describe(stored), **out, "claims": checked}


def main(argv: list[str] | None = None):
    """``python -m lncourse.evidence.norms.majority_report``: write the ledger of the stored runs of
    the majority arms (one entry per run of :data:`RUNS`)."""
    from lncourse.evidence.claims import ledger_main
    from lncourse.results import RESULTS_DIR, load_result
    return ledger_main(
        "lncourse.evidence.norms.majority_report", "Write the ledger of chapter 5's majority arms.",
        RESULTS_DIR / f"{LEDGER}.json",
        lambda: ({run: reported(load_result(src), run=run) for run, src in RUNS.items()},
                 {run: f"{src}.json" for run, src in RUNS.items()}), argv)


if __name__ == "__main__":
    main()
