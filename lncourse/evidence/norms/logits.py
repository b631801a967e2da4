"""Attention-logit growth at high learning rates, with and without QK-norm (chapter 5).

Wortsman et al. (arXiv 2309.14322, §3.1) report that at high learning rates the largest
attention logit q·k/√dh grows without bound, attention collapses onto single keys, and
the final loss rises; a norm on each head's queries and keys (QK-norm) bounds the logits
and keeps the loss low, and the effect is visible in small models. This module repeats
that sweep on chapter 5's small character model:

* the variants: ``Pre-LN`` and ``QK-norm`` (Pre-LN plus an RMSNorm with a learned gain on
  each head's queries and keys; :class:`lncourse.transformer.HeadRMSNorm`);
* a learning-rate grid, the same seeds, initial weights (for the parts both variants
  have) and batches for every cell;
* their recipe at small scale: AdamW (β = 0.9, 0.95), global gradient clipping at 1,
  linear warm-up then cosine decay to 1e-5, independent weight decay 1e-4 and z-loss 1e-4
  on the output logits.

Measured per model: the largest attention logit of each layer on fixed training windows
every ``eval_every`` steps, the training loss, and at the end the test loss (cross-entropy
only) and the largest logits. A loss that is not finite stops that model and marks it
diverged. The stored weights are rounded to bfloat16 *before* the final measurement, so
the stored final numbers are those of the stored weights exactly and a test recomputes
them. LR sensitivity (Wortsman et al., eq. 1), per seed: the mean over the grid of
min(test loss, loss at initialisation) minus the grid's best test loss::

    python -m lncourse.evidence.norms.logits --preset paper

The variants, the configuration and the presets are in
:mod:`lncourse.evidence.norms.logits_config`, the sensitivity and the summary in
:mod:`lncourse.evidence.norms.logits_summary`; both are re-exported here, where the chapters and
:mod:`lncourse.evidence.norms.periln` read them.
Shapes: windows (B, T); attention scores (B, H, T, T).
"""

from __future__ import annotations

import dataclasses
import math
import time
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F

from lncourse.evidence.norms.logits_config import PRESETS, VARIANTS, LogitsConfig
from lncourse.evidence.norms.logits_summary import sensitivity, summarize
from lncourse.checkpoint import load_checkpoint, save_checkpoint
from lncourse.progress import progress
from lncourse.results import (RESULTS_DIR, command_line, run_arguments, run_started,
                              store_run)
from lncourse.rng import generator, seeded
from lncourse.text import char_streams, sample_batch
from lncourse.transformer import GPT, TransformerConfig

__all__ = ["VARIANTS", "LogitsConfig", "PRESETS", "lr_at", "build", "max_logits",
           "test_loss", "train_one", "round_weights", "qk_bound", "sensitivity",
           "summarize", "run", "load_model", "windows_of", "grid_main", "main"]


def token_streams(cfg: LogitsConfig):
    """The tokenizer and the training and test ids (read-only: shared between calls)."""
    return char_streams(cfg.text_chars)


def lr_at(step: int, cfg: LogitsConfig, peak: float) -> float:
    """The learning rate of ``step`` (0-based): linear warm-up to ``peak`` over
    ``cfg.warmup`` steps, then cosine decay to ``cfg.min_lr`` at the last step."""
    if step < cfg.warmup:
        return peak * (step + 1) / cfg.warmup
    t = (step - cfg.warmup) / max(cfg.steps - 1 - cfg.warmup, 1)
    return cfg.min_lr + 0.5 * (peak - cfg.min_lr) * (1 + math.cos(math.pi * t))


def build(cfg: LogitsConfig, vocab_size: int, variant: str, seed: int) -> GPT:
    """A freshly initialised model of ``variant``: the same weights for the same seed in
    both variants (QK-norm's gains start at 1 and draw nothing)."""
    if variant not in VARIANTS:
        raise ValueError(f"unknown variant {variant!r}; choose from {list(VARIANTS)}")
    with seeded(seed):
        return GPT(TransformerConfig(vocab_size, d_model=cfg.d_model, n_heads=cfg.n_heads,
                                     n_layers=cfg.n_layers, block_size=cfg.block_size,
                                     **VARIANTS[variant]))


@torch.no_grad()
def max_logits(model: GPT, windows: torch.Tensor) -> list[float]:
    """The largest attention logit q·k/√dh of each layer over ``windows`` (B, T), every
    head and every pair a causal head may read (masked pairs excluded)."""
    model.eval()
    _, _, cache = model(windows, return_cache=True)
    out = []
    for layer in range(len(model.blocks)):
        s = cache[f"blocks.{layer}.attn_scores"]                          # (B, H, T, T)
        top = float(s.amax())                  # masked pairs are -inf, never the max
        out.append(top if math.isfinite(top) else None)
    return out


@torch.no_grad()
def test_loss(model: GPT, x: torch.Tensor, y: torch.Tensor) -> float:
    """Mean next-token cross-entropy (nats) on held-out windows; None if not finite (a
    diverged model: JSON has no infinity)."""
    model.eval()
    loss = float(model(x, y)[1])
    return loss if math.isfinite(loss) else None


def _loss(model: GPT, x: torch.Tensor, y: torch.Tensor, z_loss: float) -> torch.Tensor:
    logits = model(x)[0]
    ce = F.cross_entropy(logits.flatten(0, 1), y.flatten())
    return ce + z_loss * logits.logsumexp(-1).pow(2).mean()


def round_weights(model: GPT) -> GPT:
    """Round every parameter to bfloat16 (kept as float32) in place: what is stored."""
    with torch.no_grad():
        for p in model.parameters():
            p.copy_(p.to(torch.bfloat16).float())
    return model


def train_one(cfg: LogitsConfig, model: GPT, peak_lr: float, seed: int,
              train_ids: torch.Tensor, probe: torch.Tensor, until: int | None = None
              ) -> dict:
    """Train ``model`` in place at peak learning rate ``peak_lr`` on batches drawn from
    ``seed`` (the same for every variant and lr); ``until`` stops early (the schedule
    stays that of ``cfg.steps``: a replay of a stored run's first records). Returns the
    history: ``step``,
    ``train_loss`` (mean of the steps since the last record, cross-entropy + z-loss),
    ``max_logit`` [record][layer] and ``diverged_at`` (the first step whose loss was not
    finite, or None)."""
    decay = [p for n, p in model.named_parameters() if p.dim() >= 2]
    other = [p for n, p in model.named_parameters() if p.dim() < 2]
    # torch's AdamW multiplies the decay by the current lr; dividing by the peak makes
    # it independent of the peak (Wortsman et al.'s "independent" weight decay)
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": cfg.weight_decay / peak_lr},
                             {"params": other, "weight_decay": 0.0}],
                            lr=peak_lr, betas=(0.9, 0.95), eps=1e-8)
    gen = generator(seed + 1)                # on the CPU, so any device draws the same
    device = next(model.parameters()).device
    hist = {"step": [0], "train_loss": [None], "max_logit": [max_logits(model, probe)],
            "diverged_at": None}
    running = []
    for step in range(cfg.steps if until is None else min(until, cfg.steps)):
        for group in opt.param_groups:
            group["lr"] = lr_at(step, cfg, peak_lr)
        x, y = sample_batch(train_ids, cfg.batch_size, cfg.block_size, gen, device)
        model.train()
        with torch.enable_grad():     # also where the caller turned gradients off
            loss = _loss(model, x, y, cfg.z_loss)
            if not torch.isfinite(loss):
                hist["diverged_at"] = step
                break
            opt.zero_grad(set_to_none=True)
            loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), cfg.clip)
        opt.step()
        running.append(float(loss.detach()))
        if (step + 1) % cfg.eval_every == 0:
            hist["step"].append(step + 1)
            hist["train_loss"].append(float(np.mean(running)))
            hist["max_logit"].append(max_logits(model, probe))
            running = []
    return hist


@torch.no_grad()
def qk_bound(model: GPT) -> list[float]:
    """For a QK-norm model, the bound on every attention logit that the sphere gives, per
    layer: a head's q and k have RMS 1 (norm √dh) before the gains g_q, g_k, so
    |q·k|/√dh ≤ √dh · max_i |g_q,i g_k,i| (up to the norms' eps)."""
    if not hasattr(model.blocks[0].attn, "k_norm"):
        raise ValueError("the model has no QK-norm")
    out = []
    for block in model.blocks:
        a = block.attn
        g = (a.q_norm.weight * a.k_norm.weight).abs().max()
        out.append(float(math.sqrt(a.q_norm.weight.numel()) * g))
    return out


def probe_and_test_windows(cfg: LogitsConfig, train_ids, test_ids):
    probe, _ = sample_batch(train_ids, cfg.probe_windows, cfg.block_size, generator(777))
    test_x, test_y = sample_batch(test_ids, cfg.test_windows, cfg.block_size,
                                  generator(12345))
    return probe, test_x, test_y


def run(cfg: LogitsConfig, show_progress: bool = True, checkpoint: Path | None = None,
        device: str = "cpu") -> tuple[dict, dict]:
    """Train every (variant, lr, seed) of ``cfg``; returns the stored payload (without
    provenance, with ``seconds``) and the rounded weights {key: state_dict}. With
    ``checkpoint``, every finished model is saved there and a run started again skips
    the models it holds (each model's history depends only on its own seed)."""
    tok, train_ids, test_ids = token_streams(cfg)
    windows = probe_and_test_windows(cfg, train_ids, test_ids)
    probe, test_x, test_y = (t.to(device) for t in windows)
    state = (load_checkpoint(checkpoint, kind="norms_logits") if checkpoint else None) \
        or {"config": dataclasses.asdict(cfg), "records": {}, "weights": {},
            "seconds": 0.0}
    if state["config"] != dataclasses.asdict(cfg):
        raise ValueError(f"{checkpoint} holds another configuration; delete it to start "
                         "afresh")
    cells = [(v, i, s) for v in VARIANTS for i in range(len(cfg.lrs)) for s in cfg.seeds]
    for variant, i, seed in progress(cells, desc="logit growth",
                                     disable=not show_progress):
        key = f"{variant}/{i}/{seed}"
        if key in state["records"]:
            continue
        start = time.perf_counter()
        model = build(cfg, tok.vocab_size, variant, seed).to(device)
        initial = test_loss(model, test_x, test_y)
        hist = train_one(cfg, model, cfg.lrs[i], seed, train_ids, probe)
        round_weights(model)
        state["weights"][key] = {k: v.detach().cpu().to(torch.bfloat16)
                                 for k, v in model.state_dict().items()}
        state["records"][key] = {"seed": seed, "lr_index": i, "lr": cfg.lrs[i],
                                 "initial_loss": initial, "history": hist,
                                 "test_loss": test_loss(model, test_x, test_y),
                                 "final_max_logit": max_logits(model, probe),
                                 "device": device_label(device)}
        state["seconds"] += time.perf_counter() - start
        if checkpoint:
            save_checkpoint(checkpoint, state, kind="norms_logits")
    models = {v: [state["records"][f"{v}/{i}/{s}"] for i in range(len(cfg.lrs))
                  for s in cfg.seeds] for v in VARIANTS}
    return {"config": {**dataclasses.asdict(cfg), "vocab_size": tok.vocab_size},
            "variants": VARIANTS, "models": models, "summary": summarize(models, cfg),
            "seconds": state["seconds"]}, state["weights"]


def load_model(result: dict, weights: dict, variant: str, lr_index: int, seed: int) -> GPT:
    """The stored (bfloat16-rounded) model of one cell, as float32."""
    cfg = LogitsConfig.from_dict(result["config"])
    model = build(cfg, result["config"]["vocab_size"], variant, seed)
    model.load_state_dict({k: v.float() for k, v in
                           weights[f"{variant}/{lr_index}/{seed}"].items()})
    return model.eval()


def windows_of(result: dict) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """The probe windows and held-out windows a stored run measured on."""
    cfg = LogitsConfig.from_dict(result["config"])
    _, train_ids, test_ids = token_streams(cfg)
    return probe_and_test_windows(cfg, train_ids, test_ids)


def grid_main(module: str, description: str, stem: str, train, argv=None) -> Path:
    """A grid run's command line (here and in :mod:`lncourse.evidence.norms.periln`): ``train(cfg,
    progress, checkpoint, device)`` -> (payload, weights); stores
    ``results/norms/<stem>[_<preset>].json`` and the weights beside it."""
    args = run_arguments(module, description, PRESETS).parse_args(argv)
    cfg = PRESETS[args.preset]()
    name = stem if args.preset == "paper" else f"{stem}_{args.preset}"
    ck = RESULTS_DIR / "checkpoints" / f"norms_{name}.ckpt"
    started = run_started(ck, command_line(module, argv))
    payload, weights = train(cfg, not args.quiet, ck, args.device)
    seconds, out = payload.pop("seconds"), RESULTS_DIR / "norms" / f"{name}.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    torch.save(weights, out.with_suffix(".pt"))
    # the models may have been trained elsewhere (a GPU) and the run stored here
    devices = sorted({r["device"] for runs in payload["models"].values() for r in runs
                      if r.get("device")})
    note = (f"trained on {', '.join(devices)}"
            if devices and devices != [device_label(args.device)] else None)
    return store_run(out, payload, args.device, seconds, started, device_note=note)


def device_label(device) -> str:
    """The hardware a model trained on, as stored beside it."""
    from lncourse.results import device_name
    return device_name(device)


def main(argv: list[str] | None = None) -> Path:
    """Train the grid, store the result and the weights beside it."""
    return grid_main("lncourse.evidence.norms.logits", "Attention-logit growth with and without "
                     "QK-norm over a learning-rate grid.", "logits", run, argv)


if __name__ == "__main__":
    main()
