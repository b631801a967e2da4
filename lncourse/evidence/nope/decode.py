"""How the paper's classifier probe is read: argmax, median or mean of its posterior
(chapter 4, the probe's null result).

The paper's probe is a classifier over the T positions, and the chapter reports its mean
absolute error (MAE). Its answer is the argmax of the predicted distribution. When that
distribution is nearly flat, as it is where the probe has learned little, the argmax
lands almost anywhere: its error approaches that of a uniform random guess,
(T² - 1) / 3T (170.7 at T = 512), well above the T/4 = 128 of guessing the middle. The
median of the same distribution is the answer that minimises the expected absolute
error; the mean, the expected squared error. So the same trained probe, read three ways,
separates what the probe knows from how its answer is read.

For each seed, this trains the ablation's ``base`` probe (:mod:`lncourse.evidence.nope.ablation`:
the paper's classifier on every position, after the final LayerNorm) exactly as the
ablation does, with the same features, generator and updates, so its argmax predictions
are the stored ablation's, and stores the held-out predictions of the three readings::

    python -m lncourse.evidence.nope.decode --preset cpu

Shapes: D depths, n held-out positions, T ``seq_len``.
"""

from __future__ import annotations

import dataclasses
import time
from pathlib import Path

import numpy as np
import torch
from torch import Tensor

from lncourse.evidence.nope.ablation import PRESETS, AblationConfig, features, fit_row
from lncourse.evidence.nope.probe import middle_baseline
from lncourse.evidence.nope.stream_run import errors
from lncourse.results import RESULTS_DIR, command_line, run_arguments, run_started, store_run

__all__ = ["READINGS", "read_posterior", "decode_seed", "main"]

READINGS = ("argmax", "median", "mean")


def read_posterior(probs: Tensor) -> dict[str, Tensor]:
    """The three readings of posteriors (..., T) over positions 0..T-1, as positions
    (...,) (long): the argmax; the median (the smallest position whose cumulative
    probability reaches 1/2); the mean, rounded to the nearest position."""
    if probs.ndim == 0 or probs.shape[-1] < 1:
        raise ValueError(f"posteriors need a last axis of positions, got {tuple(probs.shape)}")
    if not torch.isfinite(probs).all() or (probs < 0).any():
        raise ValueError("posteriors must be finite and non-negative")
    total = probs.sum(-1, keepdim=True)
    if not torch.allclose(total, torch.ones_like(total), atol=1e-3):
        raise ValueError("posteriors must sum to 1 over the last axis")
    T = probs.shape[-1]
    p = probs.double() / total.double()
    median = (p.cumsum(-1) < 0.5).sum(-1).clamp(max=T - 1)
    mean = (p * torch.arange(T, dtype=p.dtype)).sum(-1).round().long()
    return {"argmax": probs.argmax(-1), "median": median, "mean": mean}


def decode_seed(cfg: AblationConfig, seed: int) -> dict:
    """The ablation's base probe of ``seed``, trained again, read three ways on the
    held-out positions: predictions (D, n) per reading (int16) and their errors."""
    t0 = time.perf_counter()
    train, held = features(cfg, seed, bfloat16=False)
    probes, mu, sd = fit_row(cfg, seed, "base", train)
    with torch.no_grad():
        probs = probes((held["ln_final"] - mu) / sd).softmax(-1)      # (D, n, T)
    preds = {k: v.to(torch.int16).numpy() for k, v in read_posterior(probs).items()}
    return {"seed": seed, "predictions": preds,
            "mae": {k: errors(p, cfg.seq_len) for k, p in preds.items()},
            "seconds": time.perf_counter() - t0}


def main(argv: list[str] | None = None) -> Path:
    """Every seed of the preset, then store the errors, the configuration and the held-out
    predictions (``decode_<preset>_predictions.npz``) with provenance."""
    parser = run_arguments("lncourse.evidence.nope.decode",
                           "The classifier probe read by argmax, median and mean.", PRESETS)
    args = parser.parse_args(argv)
    cfg = PRESETS[args.preset]()
    out = RESULTS_DIR / "nope" / f"decode_{args.preset}.json"
    ck = RESULTS_DIR / "checkpoints" / f"nope_decode_{args.preset}"   # no checkpoint: a
    started = run_started(ck, command_line("lncourse.evidence.nope.decode", argv))   # few minutes
    runs = [decode_seed(cfg, s) for s in cfg.seeds]
    npz = out.with_name(out.stem + "_predictions.npz")
    npz.parent.mkdir(parents=True, exist_ok=True)
    np.savez_compressed(npz, **{f"{r['seed']}_{k}": p for r in runs
                                for k, p in r["predictions"].items()})
    payload = {"config": dataclasses.asdict(cfg), "readings": list(READINGS),
               "runs": [{k: v for k, v in r.items() if k != "predictions"} for r in runs],
               "baseline": middle_baseline(cfg.seq_len), "predictions": npz.name}
    path = store_run(out, payload, args.device, sum(r["seconds"] for r in runs), started)
    Path(str(ck) + ".start.json").unlink(missing_ok=True)
    return path


if __name__ == "__main__":
    main()
