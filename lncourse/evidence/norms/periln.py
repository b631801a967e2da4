"""Peri-LN in the logit-growth sweep: what a norm on each sublayer's output does (chapter 5).

Peri-LN (Kim et al. 2025, arXiv 2502.02732) keeps Pre-LN's norm on each sublayer's input
and adds one on its output: x <- x + N_out(F(N_in(x))). The lens reading is exact: what a
sublayer adds to the residual stream is a LayerNorm output, γ ⊙ ẑ + β with ‖ẑ‖ = √d (eps
aside), so its norm is at most √d · max|γ| + ‖β‖, whatever the sublayer's weights do.
Pre-LN has no such bound: what it adds grows with W_O and the MLP's weights. The
attention still reads N_in(x), as in Pre-LN, so the lens predicts nothing new for the
attention logits.

This run trains the Peri-LN models of :mod:`lncourse.evidence.norms.logits`'s grid: the same
configuration, learning rates, seeds, batches and initial weights (the output norms draw
no random numbers), so each Peri-LN model is paired with the stored Pre-LN and QK-norm
models of its seed and lr. Two variants (:data:`VARIANTS`) differ only in the output
norms' γ at initialisation: 1, as a LayerNorm starts, and 0.02, the scale of the other
weights (``init_std``), so that at initialisation a sublayer adds a vector as long as a
token's embedding rather than √d: the control that measures what the first costs. Measured per model, as there (the weights rounded to bfloat16
before the final measurements): the training loss and largest attention logit every
``eval_every`` steps, the test loss and the largest logits; and here also the residual
stream on the held-out windows (:func:`stream`): its mean norm / √d at every depth, and
the largest norm of what each sublayer adds, beside Peri-LN's bound
(:func:`increment_bound`)::

    python -m lncourse.evidence.norms.periln --preset paper
"""

from __future__ import annotations

import dataclasses
import math
import time
from pathlib import Path

import numpy as np
import torch

from lncourse.checkpoint import load_checkpoint, save_checkpoint
from lncourse.evidence.norms import logits as L
from lncourse.norms.heads import mean_interval
from lncourse.evidence.norms.logits_summary import loss_or_inf, sensitivity
from lncourse.progress import progress
from lncourse.rng import seeded
from lncourse.summary import paired_interval
from lncourse.transformer import GPT, TransformerConfig

__all__ = ["VARIANTS", "MODEL", "build", "stream", "increment_bound", "run", "load_model",
           "summary", "pre_ln_streams", "initial_streams", "main"]

MODEL = {"norm": "layernorm", "placement": "peri"}
# variant -> the output norms' γ at initialisation (their β starts at 0)
VARIANTS = {"Peri-LN": 1.0, "Peri-LN-0.02": 0.02}


def build(cfg: L.LogitsConfig, vocab_size: int, seed: int, variant: str = "Peri-LN") -> GPT:
    """A fresh Peri-LN model: every weight equal to the Pre-LN model of ``seed`` in
    :func:`lncourse.evidence.norms.logits.build`, plus output norms at γ = ``VARIANTS[variant]``,
    β = 0."""
    if variant not in VARIANTS:
        raise ValueError(f"unknown variant {variant!r}; choose from {list(VARIANTS)}")
    with seeded(seed):
        model = GPT(TransformerConfig(vocab_size, d_model=cfg.d_model, n_heads=cfg.n_heads,
                                      n_layers=cfg.n_layers, block_size=cfg.block_size,
                                      **MODEL))
    with torch.no_grad():
        for block in model.blocks:
            block.ln1_out.weight.fill_(VARIANTS[variant])
            block.ln2_out.weight.fill_(VARIANTS[variant])
    return model


@torch.no_grad()
def stream(model: GPT, windows: torch.Tensor) -> dict:
    """The residual stream on ``windows`` (B, T): ``norm`` the mean over tokens of
    ‖x‖ / √d at each depth (the embedding, then after each sublayer: 2L + 1 values) and,
    per sublayer (2L), ``added_max`` and ``added_mean``, the largest and the mean norm of
    what it adds to the stream."""
    model.eval()
    _, _, cache = model(windows, return_cache=True)
    d = model.cfg.d_model if hasattr(model, "cfg") else cache["embed"].shape[-1]
    xs = [cache["embed"]]
    added = []
    for i in range(len(model.blocks)):
        for key, after in (("attn_out", "resid_mid"), ("mlp_out", "resid_post")):
            added.append(cache[f"blocks.{i}.{key}"].norm(dim=-1))
            xs.append(cache[f"blocks.{i}.{after}"])
    return {"norm": [float(x.norm(dim=-1).mean() / math.sqrt(d)) for x in xs],
            "added_max": [float(a.max()) for a in added],
            "added_mean": [float(a.mean()) for a in added]}


@torch.no_grad()
def increment_bound(model: GPT) -> list[float]:
    """Per sublayer of a Peri-LN model, √d · max|γ| + ‖β‖ of its output norm: no token's
    increment can be longer (a LayerNorm output's normalised part has norm √d, less with
    its eps)."""
    if not hasattr(model.blocks[0], "ln1_out"):
        raise ValueError("the model is not Peri-LN (no output norms)")
    out = []
    for block in model.blocks:
        for norm in (block.ln1_out, block.ln2_out):
            d = norm.weight.numel()
            out.append(float(math.sqrt(d) * norm.weight.abs().max() + norm.bias.norm()))
    return out


def run(cfg: L.LogitsConfig, show_progress: bool = True, checkpoint: Path | None = None,
        device: str = "cpu") -> tuple[dict, dict]:
    """Train the model of every (variant, lr, seed) of ``cfg`` as
    :func:`lncourse.evidence.norms.logits.run` trains its variants; returns the payload (with
    ``seconds``) and the rounded weights {"<variant>/<lr index>/<seed>": state_dict}.
    Resumes model by model from ``checkpoint``."""
    tok, train_ids, test_ids = L.token_streams(cfg)
    windows = L.probe_and_test_windows(cfg, train_ids, test_ids)
    probe, test_x, test_y = (t.to(device) for t in windows)
    state = (load_checkpoint(checkpoint, kind="norms_periln") if checkpoint else None) \
        or {"config": dataclasses.asdict(cfg), "records": {}, "weights": {}, "seconds": 0.0}
    if state["config"] != dataclasses.asdict(cfg):
        raise ValueError(f"{checkpoint} holds another configuration; delete it to start "
                         "afresh")
    cells = [(v, i, s) for v in VARIANTS for i in range(len(cfg.lrs)) for s in cfg.seeds]
    for variant, i, seed in progress(cells, desc="Peri-LN", disable=not show_progress):
        key = f"{variant}/{i}/{seed}"
        if key in state["records"]:
            continue
        start = time.perf_counter()
        model = build(cfg, tok.vocab_size, seed, variant).to(device)
        initial = L.test_loss(model, test_x, test_y)
        hist = L.train_one(cfg, model, cfg.lrs[i], seed, train_ids, probe)
        L.round_weights(model)
        state["weights"][key] = {k: v.detach().cpu().to(torch.bfloat16)
                                 for k, v in model.state_dict().items()}
        state["records"][key] = {"seed": seed, "lr_index": i, "lr": cfg.lrs[i],
                                 "initial_loss": initial, "history": hist,
                                 "test_loss": L.test_loss(model, test_x, test_y),
                                 "final_max_logit": L.max_logits(model, probe),
                                 "stream": stream(model, test_x),
                                 "bound": increment_bound(model),
                                 "device": L.device_label(device)}
        state["seconds"] += time.perf_counter() - start
        if checkpoint:
            save_checkpoint(checkpoint, state, kind="norms_periln")
    models = {v: [state["records"][f"{v}/{i}/{s}"] for i in range(len(cfg.lrs))
                  for s in cfg.seeds] for v in VARIANTS}
    payload = {"config": {**dataclasses.asdict(cfg), "vocab_size": tok.vocab_size},
               "model": MODEL, "variants": VARIANTS, "models": models,
               "seconds": state["seconds"]}
    return payload, state["weights"]


def load_model(result: dict, weights: dict, variant: str, lr_index: int, seed: int) -> GPT:
    """The stored (bfloat16-rounded) model of one cell, as float32."""
    cfg = L.LogitsConfig.from_dict(result["config"])
    model = build(cfg, result["config"]["vocab_size"], seed, variant)
    model.load_state_dict({k: v.float() for k, v in
                           weights[f"{variant}/{lr_index}/{seed}"].items()})
    return model.eval()


def pre_ln_streams(logits_result: dict, logits_weights: dict) -> list[dict]:
    """:func:`stream` of every stored Pre-LN model of the logit-growth run (in the order of
    its records), measured on its held-out windows."""
    _, test_x, _ = L.windows_of(logits_result)
    return [stream(L.load_model(logits_result, logits_weights, "Pre-LN", r["lr_index"],
                                r["seed"]), test_x)
            for r in logits_result["models"]["Pre-LN"]]


@torch.no_grad()
def initial_streams(result: dict) -> dict:
    """:func:`stream` at initialisation, per variant (Pre-LN and each Peri-LN variant) the
    mean over the run's seeds of each depth's norm / √d, on its held-out windows: how
    much of the stream the embedding is before training."""
    cfg = L.LogitsConfig.from_dict(result["config"])
    _, test_x, _ = L.windows_of(result)
    vocab = result["config"]["vocab_size"]
    out = {}
    for name in ("Pre-LN", *VARIANTS):
        norms = [stream(L.build(cfg, vocab, "Pre-LN", s) if name == "Pre-LN"
                        else build(cfg, vocab, s, name), test_x)["norm"] for s in cfg.seeds]
        out[name] = np.mean(norms, axis=0).tolist()
    return out


def _cell(records: list[dict], i: int, seed: int) -> dict:
    return next(r for r in records if r["lr_index"] == i and r["seed"] == seed)


def summary(peri: dict, logits_result: dict, pre_streams: list[dict]) -> dict:
    """What chapter 5 reports, each Peri-LN variant against the stored Pre-LN (and
    QK-norm) models of the same seeds and lrs: per lr the mean test loss of each with 95%
    t intervals, the paired difference of each Peri-LN variant minus Pre-LN, the largest
    final logits (min and max over seeds), the stream's last-depth norm / √d (mean and
    interval) and the largest increment (over seeds); each variant's LR sensitivity and
    its paired difference from Pre-LN; the largest ratio of a Peri-LN increment to its
    bound."""
    cfg = L.LogitsConfig.from_dict(peri["config"])
    if L.LogitsConfig.from_dict(logits_result["config"]) != cfg:
        raise ValueError("the Peri-LN run and the logit-growth run differ in configuration")
    recs = {"Pre-LN": logits_result["models"]["Pre-LN"],
            "QK-norm": logits_result["models"]["QK-norm"], **peri["models"]}
    streams = {"Pre-LN": {(r["lr_index"], r["seed"]): x
                          for r, x in zip(recs["Pre-LN"], pre_streams)},
               **{v: {(r["lr_index"], r["seed"]): r["stream"] for r in runs}
                  for v, runs in peri["models"].items()}}
    per_lr = []
    for i, lr in enumerate(cfg.lrs):
        row = {"lr": lr}
        for name, runs in recs.items():
            cells = [_cell(runs, i, s) for s in cfg.seeds]
            loss = [c["test_loss"] for c in cells]
            row[name] = {"test_loss": None if None in loss else list(mean_interval(loss)),
                         "max_logit": [min(max(c["final_max_logit"]) for c in cells),
                                       max(max(c["final_max_logit"]) for c in cells)]}
            if name in streams:
                st = [streams[name][(i, s)] for s in cfg.seeds]
                row[name]["last_norm"] = list(mean_interval([x["norm"][-1] for x in st]))
                row[name]["added_max"] = max(max(x["added_max"]) for x in st)
            if name in peri["models"]:
                pairs = [(_cell(runs, i, s)["test_loss"],
                          _cell(recs["Pre-LN"], i, s)["test_loss"]) for s in cfg.seeds]
                row[name]["minus_pre_ln"] = None if any(None in p for p in pairs) else \
                    list(paired_interval(np.array([a - b for a, b in pairs])))
        per_lr.append(row)

    def sens(runs):
        losses = np.array([[loss_or_inf(_cell(runs, i, s)["test_loss"])
                            for i in range(len(cfg.lrs))] for s in cfg.seeds])
        initial = np.array([_cell(runs, 0, s)["initial_loss"] for s in cfg.seeds])
        return sensitivity(losses, initial)
    s = {name: sens(runs) for name, runs in recs.items()}
    ratios = [a / b for runs in peri["models"].values() for r in runs
              for a, b in zip(r["stream"]["added_max"], r["bound"])]
    return {"per_lr": per_lr,
            "sensitivity": {name: list(mean_interval(v)) for name, v in s.items()},
            "sensitivity_minus_pre_ln": {v: list(paired_interval(s[v] - s["Pre-LN"]))
                                         for v in peri["models"]},
            "bound_ratio_max": max(ratios),
            "diverged": sum(r["test_loss"] is None for runs in peri["models"].values()
                            for r in runs)}


def main(argv: list[str] | None = None) -> Path:
    """Train the Peri-LN models of the grid; store ``results/norms/periln.json`` and the
    weights beside it (``periln.pt``)."""
    return L.grid_main("lncourse.evidence.norms.periln", "Peri-LN in chapter 5's logit-growth "
                       "sweep.", "periln", run, argv)


if __name__ == "__main__":
    main()
