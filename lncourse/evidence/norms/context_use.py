"""Did chapter 5's stored models use their context? Attention's contribution, measured by
the per-position loss against the bigram table (issue 35 item 8).

A model that reads only the current character can at best match the bigram table of its
training split. Its attention adds what the earlier characters tell it: so, on the same
held-out tokens, the model's loss at later positions minus the bigram's measures what
attention contributes (:func:`lncourse.lm_recipe.position_losses`,
:func:`lncourse.lm_recipe.context_gain`).
This module measures it for every stored model of chapter 5 that is read "after
training", from the stored weights, on the CPU:

* ``trained_heads``: the per-head models (Pre-LN, RMSNorm, QK-norm, DyT; 3 seeds);
* ``logits`` and ``periln``: the logit-growth grid (Pre-LN, QK-norm, Peri-LN and its
  γ = 0.02 control; 6 learning rates, 3 seeds)::

    python -m lncourse.evidence.norms.context_use

stores ``results/norms/context_use.json``. Shapes: windows (S, T).
"""

from __future__ import annotations

import time
from pathlib import Path

import numpy as np
import torch

from lncourse.lm import LEARNED_MARGIN
from lncourse.lm_recipe import context_gain, position_losses, reference_losses
from lncourse.evidence.norms import logits as L
from lncourse.evidence.norms import periln, trained
from lncourse.results import (RESULTS_DIR, command_line, load_result, run_arguments,
                              run_started, store_run)
from lncourse.summary import paired_interval

__all__ = ["WINDOWS", "measure_model", "measure_all", "verdicts", "claims", "main"]

WINDOWS = 32          # held-out windows per model (seed 100 + the model's seed)


def measure_model(model, train_ids, test_ids, block_size: int, vocab_size: int,
                  seed: int, late_start: int) -> dict:
    """The held-out loss over all positions (model and bigram on the same tokens, and
    their difference, 95% t intervals over windows) and the late-position gain."""
    pos = position_losses(model, train_ids, test_ids, windows=WINDOWS,
                          block_size=block_size, seed=100 + seed, vocab_size=vocab_size)
    m = np.asarray(pos["model"]).mean(1)
    b = np.asarray(pos["bigram"]).mean(1)
    gain = context_gain(pos, late_start)
    return {"model": list(paired_interval(m)), "bigram": list(paired_interval(b)),
            "below_bigram": list(paired_interval(b - m)), "late": gain}


def measure_all(progress: bool = False) -> dict:
    """Every stored model of chapter 5 read "after training"."""
    out: dict = {}
    heads = load_result("norms/trained_heads")
    hcfg = trained.HeadsConfig(**{k: tuple(v) if isinstance(v, list) else v
                                  for k, v in heads["config"].items() if k != "vocab_size"})
    tok, train_ids, test_ids = trained.token_streams(hcfg)
    out["references"] = reference_losses(train_ids, test_ids, tok.vocab_size)
    out["trained_heads"] = {
        v: [{"seed": r["seed"], "test_loss": r["history"]["test_loss"][-1],
             **measure_model(trained.load_model(heads, v, r["seed"]), train_ids, test_ids,
                             hcfg.block_size, tok.vocab_size, r["seed"],
                             hcfg.block_size // 2)}
            for r in runs] for v, runs in heads["models"].items()}
    if progress:
        print("trained_heads done")
    grid = {"logits": (load_result("norms/logits"), L.load_model),
            "periln": (load_result("norms/periln"), periln.load_model)}
    for name, (result, load) in grid.items():
        weights = torch.load(RESULTS_DIR / "norms" / f"{name}.pt", weights_only=True)
        cfg = L.LogitsConfig.from_dict(result["config"])
        tok, train_ids, test_ids = L.token_streams(cfg)
        out[name] = {}
        for variant, runs in result["models"].items():
            out[name][variant] = []
            for r in runs:
                if r["test_loss"] is None:       # diverged: nothing to measure
                    out[name][variant].append({"seed": r["seed"], "lr": r["lr"],
                                               "test_loss": None, "late": None})
                    continue
                model = load(result, weights, variant, r["lr_index"], r["seed"])
                out[name][variant].append({
                    "seed": r["seed"], "lr": r["lr"], "test_loss": r["test_loss"],
                    **measure_model(model, train_ids, test_ids, cfg.block_size,
                                    tok.vocab_size, r["seed"], cfg.block_size // 2)})
        if progress:
            print(f"{name} done")
    return out


def verdicts(result: dict, margin: float = LEARNED_MARGIN) -> dict[str, dict]:
    """Per stored group of models (``trained_heads/<variant>`` or
    ``<grid>/<variant>/lr <lr>``): the seeds' test losses, and two words, each True or
    False on every seed: ``learned`` (the trainer's test loss at least ``margin`` nats
    below the bigram's) and ``uses_context`` (the late-position gain's 95% interval
    above 0)."""
    bigram = result["references"]["bigram"]
    out = {}

    def judge(key, rows):
        out[key] = {"test_loss": [r["test_loss"] for r in rows],
                    "late_gain": [r["late"] and r["late"]["gain"][0] for r in rows],
                    "learned": all(r["test_loss"] is not None
                                   and bigram - r["test_loss"] >= margin for r in rows),
                    "uses_context": all(r["late"] is not None and r["late"]["gain"][1] > 0
                                        for r in rows)}
    for v, rows in result["trained_heads"].items():
        judge(f"trained_heads/{v}", rows)
    for name in ("logits", "periln"):
        for v, rows in result[name].items():
            for lr in sorted({r["lr"] for r in rows}):
                judge(f"{name}/{v}/lr {lr:g}", [r for r in rows if r["lr"] == lr])
    return out


def claims(result: dict) -> dict[str, bool]:
    """The sentences the replication page states, each True or False on ``result``:

    * ``no trained-heads model learned``: none of the 12 per-head models is 0.3 nats
      below the bigram, and no variant's seeds all use their context;
    * ``DyT heads at the unigram level``: every DyT model's loss is within 0.05 nats of
      the unigram's and far above the bigram's (its late gain below -0.5);
    * ``Peri-LN at lr >= 0.03 uses no context``: for both Peri-LN variants at every lr >=
      0.03 and every seed, the late gain lies within 0.03 nats of 0 and the loss within
      0.05 of the bigram's: bigram-level models, whatever their logits;
    * ``Pre-LN and QK-norm learned at lr 0.01``: every Pre-LN seed's test loss 0.3 nats
      below the bigram's, and every QK-norm seed's late gain above 0.2 (interval);
    * ``Pre-LN at lr >= 0.1 worse than the bigram``: every seed's held-out loss above
      the bigram's on the same tokens (interval of the difference below 0)."""
    v = verdicts(result)
    refs = result["references"]
    heads = [k for k in v if k.startswith("trained_heads/")]
    peri = [r for name in ("Peri-LN", "Peri-LN-0.02") for r in result["periln"][name]
            if r["lr"] >= 0.03]
    pre = result["logits"]["Pre-LN"]
    qk = result["logits"]["QK-norm"]
    return {
        "no trained-heads model learned": not any(v[k]["learned"] or v[k]["uses_context"]
                                                  for k in heads),
        "DyT heads at the unigram level": all(
            abs(r["test_loss"] - refs["unigram"]) < 0.05 and r["late"]["gain"][0] < -0.5
            for r in result["trained_heads"]["DyT"]),
        "Peri-LN at lr >= 0.03 uses no context": bool(peri) and all(
            abs(r["late"]["gain"][0]) < 0.03 and abs(r["test_loss"] - refs["bigram"]) < 0.05
            for r in peri),
        "Pre-LN and QK-norm learned at lr 0.01": v["logits/Pre-LN/lr 0.01"]["learned"]
        and all(r["late"]["gain"][1] > 0.2 for r in qk if r["lr"] == 0.01),
        "Pre-LN at lr >= 0.1 worse than the bigram": all(
            r["below_bigram"][2] < 0 for r in pre if r["lr"] >= 0.1),
    }


def main(argv: list[str] | None = None) -> Path:
    args = run_arguments("lncourse.evidence.norms.context_use", "Attention's contribution in "
                         "chapter 5's stored models: per-position loss against the bigram.",
                         {"paper": None}).parse_args(argv)
    ck = RESULTS_DIR / "checkpoints" / "norms_context_use"
    started = run_started(ck, command_line("lncourse.evidence.norms.context_use", argv))
    t0 = time.perf_counter()
    payload = {"config": {"windows": WINDOWS, "late_start": "block_size // 2",
                          "window_seed": "100 + the model's seed"},
               **measure_all(not args.quiet)}
    payload["verdicts"] = verdicts(payload)
    return store_run(RESULTS_DIR / "norms" / "context_use.json", payload, "cpu",
                     time.perf_counter() - t0, started)


if __name__ == "__main__":
    main()
