"""Training the small language models of chapters 2 and 4 on Shakespeare.

:func:`train_lm` trains one model with AdamW on random windows of a token stream and
returns its loss history. With a checkpoint path it saves its state (including its
configuration) at every evaluation and resumes an interrupted run to the same history;
a checkpoint of a different run (another learning rate, batch, seed, number of steps,
data or model) is refused rather than mixed in. The recipe it can train with (warm-up,
cosine decay, clipping, the sweep's rule) and the reference losses every loss is printed
beside are in :mod:`lncourse.lm_recipe`.
Shapes: token streams (N,); windows (B, T).
"""

from __future__ import annotations

import dataclasses
import hashlib
import math
import numbers
import os
import time
from collections.abc import Callable

import torch
from torch import Tensor, nn

from lncourse.checkpoint import load_checkpoint, save_checkpoint
# the chapters import the references from here (``from lncourse.lm import ...``)
from lncourse.lm_recipe import positive_int, lr_at, reference_losses, with_references
from lncourse.progress import progress as progress_bar
from lncourse.rng import check_seed
from lncourse.text import sample_batch

__all__ = ["TRACE_STEPS", "train_lm", "evaluate_lm", "data_fingerprint", "describe_model",
           "slim_checkpoint", "reference_losses", "with_references", "LEARNED_MARGIN",
           "learned"]

TRACE_STEPS = 5   # the loss of each of the first steps is kept (the tests replay them)

# The course's one bar for "the model learned": a test loss at least this many nats below
# its data's bigram table (counts of the next token given the current one). A model that
# reads only the current token can reach the table and no further, so a claim "after
# training" about the use of context needs a model clearly past it: 0.3 nats, a
# likelihood e^0.3 = 1.35 times the table's per token. Every chapter applies this bar.
LEARNED_MARGIN = 0.3


def learned(loss: float, bigram: float, margin: float = LEARNED_MARGIN) -> bool:
    """Whether a test loss clears the course's bar: at least ``margin`` nats below the
    bigram table's loss on the same data. A non-finite loss is an error, not a verdict."""
    if not (math.isfinite(loss) and math.isfinite(bigram)):
        raise ValueError(f"losses must be finite, got {loss} and {bigram}")
    return bigram - loss >= margin


@torch.no_grad()
def evaluate_lm(model: nn.Module, ids: Tensor, *, batches: int, batch_size: int,
                block_size: int, seed: int, device: torch.device | str) -> float:
    """Mean next-token loss on ``batches`` windows (batch_size, block_size) drawn with a
    fixed seed from the stream ``ids`` (N,)."""
    if batches < 1:
        raise ValueError(f"batches must be at least 1, got {batches}")
    was_training = model.training
    model.eval()
    gen = torch.Generator().manual_seed(check_seed(seed))
    total = 0.0
    for _ in range(batches):
        x, y = sample_batch(ids, batch_size, block_size, gen, device)
        total += float(model(x, y)[1])
    model.train(was_training)
    return total / batches


def data_fingerprint(*streams: Tensor) -> str:
    """SHA-256 (first 16 hex digits) of token streams: identifies the data of a run."""
    h = hashlib.sha256()
    for ids in streams:
        h.update(str(len(ids)).encode())
        h.update(ids.detach().to("cpu", torch.int64).numpy().tobytes())
    return h.hexdigest()[:16]


def describe_model(model: nn.Module) -> dict:
    """The model's class, configuration (if it has a dataclass ``cfg``) and parameter
    shapes, as plain data: two models with the same description are the same variant."""
    cfg = getattr(model, "cfg", None)
    return {"class": type(model).__name__,
            "cfg": dataclasses.asdict(cfg) if dataclasses.is_dataclass(cfg) else repr(cfg),
            "shapes": {k: list(v.shape) for k, v in model.state_dict().items()}}


def _fill_new_fields(stored: dict, model: nn.Module) -> None:
    """Give a checkpoint's stored model configuration the default of every configuration
    field added since it was written (as ``TransformerConfig.qk_norm``), so a run resumes
    after a compatible addition; a stored value, or a field left off the defaults, still
    differs."""
    cfg, old = getattr(model, "cfg", None), stored.get("model", {}).get("cfg")
    if not (dataclasses.is_dataclass(cfg) and isinstance(old, dict)):
        return
    for field in dataclasses.fields(cfg):
        default = field.default
        if field.name not in old and default is not dataclasses.MISSING \
                and getattr(cfg, field.name) == default:
            old[field.name] = default


@torch.enable_grad()   # a notebook that only measures may have turned gradients off
def train_lm(model: nn.Module, train_ids: Tensor, test_ids: Tensor, *, steps: int,
             batch_size: int, block_size: int, lr: float = 3e-3, eval_every: int = 50,
             eval_batches: int = 8, seed: int = 0, device: torch.device | str = "cpu",
             checkpoint_path: str | os.PathLike | None = None, progress: bool = True,
             measure: Callable[[nn.Module], dict] | None = None,
             timing: dict | None = None, warmup: int = 0, min_lr: float | None = None,
             clip: float | None = None,
             _on_step: Callable[[int], None] | None = None) -> dict[str, list]:
    """Train ``model`` with AdamW on random windows (batch_size, block_size) of
    ``train_ids`` (N,); return the loss history.

    History: ``step``, ``train_loss`` (mean over the steps since the last evaluation; at
    step 0 the loss on fixed training windows), ``test_loss`` (on the same fixed test
    windows every time), ``trace`` (the loss of each of the first :data:`TRACE_STEPS`
    steps) and, with ``measure``, ``measure``: what ``measure(model)`` returned at each
    evaluation (plain data). With ``checkpoint_path`` the state and the run's
    configuration are saved at every evaluation, and an interrupted run resumes from it.
    ``timing``, a dict, receives ``seconds`` (wall time of the whole run, earlier sessions
    included), ``session_seconds`` (this call's) and ``sessions`` (one entry per call
    that trained: device, first and last step, seconds); wall times stay out of the
    history, which is the same whether or not the run was interrupted.

    The recipe: by default a constant learning rate ``lr`` (the course's first runs). With
    ``warmup`` > 0 the rate rises linearly over the first ``warmup`` steps; with ``min_lr``
    it then decays along a cosine to ``min_lr`` at the last step
    (:func:`lncourse.lm_recipe.lr_at`); with ``clip`` the gradient's global norm is
    clipped to it before every step.
    """
    for name, value in (("steps", steps), ("batch_size", batch_size),
                        ("block_size", block_size), ("eval_every", eval_every),
                        ("eval_batches", eval_batches)):
        positive_int(name, value)
    if isinstance(lr, bool) or not isinstance(lr, numbers.Real) or not math.isfinite(lr) \
            or lr <= 0:
        raise ValueError(f"lr must be a finite positive number, got {lr!r}")
    check_seed(seed, offset=2)   # seed, seed + 1 and seed + 2 are used
    if isinstance(warmup, bool) or not isinstance(warmup, numbers.Integral) \
            or not 0 <= warmup < steps:
        raise ValueError(f"warmup must be an integer in [0, steps), got {warmup!r}")
    for name, value in (("min_lr", min_lr), ("clip", clip)):
        if value is not None and (isinstance(value, bool)
                                  or not isinstance(value, numbers.Real)
                                  or not math.isfinite(value) or value <= 0):
            raise ValueError(f"{name} must be None or a finite positive number, "
                             f"got {value!r}")
    if min_lr is not None and min_lr > lr:
        raise ValueError(f"min_lr ({min_lr}) must not exceed lr ({lr})")
    config = {"lr": float(lr), "batch_size": int(batch_size), "block_size": int(block_size),
              "steps": int(steps), "eval_every": int(eval_every),
              "eval_batches": int(eval_batches), "seed": int(seed),
              "data": data_fingerprint(train_ids, test_ids), "model": describe_model(model),
              "measure": getattr(measure, "__qualname__", None)}
    recipe = {"warmup": int(warmup), "min_lr": None if min_lr is None else float(min_lr),
              "clip": None if clip is None else float(clip)}
    if recipe != {"warmup": 0, "min_lr": None, "clip": None}:
        config["recipe"] = recipe          # absent for the constant rate: old runs resume
    model.to(device).train()
    opt = torch.optim.AdamW(model.parameters(), lr=lr, weight_decay=0.0)
    gen = torch.Generator().manual_seed(seed)
    history: dict[str, list] = {"step": [], "train_loss": [], "test_loss": [], "trace": []}
    if measure is not None:
        history["measure"] = []
    start, elapsed, t0 = 0, 0.0, time.perf_counter()
    sessions: list[dict] = []
    state = load_checkpoint(checkpoint_path) if checkpoint_path else None
    if state is not None:
        if state.get("kind") != "lm":
            raise ValueError(f"{checkpoint_path} is not a train_lm checkpoint; delete it or "
                             "choose another path")
        _fill_new_fields(state["config"], model)
        differ = sorted(k for k in config.keys() | state["config"].keys()
                        if config.get(k) != state["config"].get(k))
        if differ:
            raise ValueError(f"{checkpoint_path} holds another run (it differs in "
                             f"{', '.join(differ)}); delete it or choose another path")
        if state.get("slim") and state["step"] < steps:
            raise ValueError(f"{checkpoint_path} is a slimmed checkpoint of an unfinished "
                             "run (no optimizer state): it cannot resume")
        model.load_state_dict(state["model"])      # bfloat16 (slimmed) -> float32 exactly
        if not state.get("slim"):
            opt.load_state_dict(state["optimizer"])
        gen.set_state(state["generator"])
        history, start, elapsed = state["history"], state["step"], state["elapsed"]
        sessions = state.get("sessions", [])
    session = {"device": _device_label(device), "from_step": start, "to_step": start,
               "seconds": 0.0}

    def evaluate() -> float:
        return evaluate_lm(model, test_ids, batches=eval_batches, batch_size=batch_size,
                           block_size=block_size, seed=seed + 1, device=device)

    def record(step: int, train_loss: float) -> None:
        history["step"].append(step)
        history["train_loss"].append(train_loss)
        history["test_loss"].append(evaluate())
        if measure is not None:
            history["measure"].append(measure(model))
            model.train()

    def save(step: int) -> None:
        session.update(to_step=step, seconds=round(time.perf_counter() - t0, 3))
        if checkpoint_path:
            save_checkpoint(checkpoint_path, {
                "kind": "lm", "config": config, "model": model.state_dict(),
                "optimizer": opt.state_dict(), "generator": gen.get_state(),
                "history": history, "step": step,
                "elapsed": elapsed + time.perf_counter() - t0,
                "sessions": sessions + [session]})

    if start == 0 and not history["step"]:
        record(0, evaluate_lm(model, train_ids, batches=eval_batches, batch_size=batch_size,
                              block_size=block_size, seed=seed + 2, device=device))
        save(0)
    running, count = 0.0, 0
    bar = progress_bar(range(start, steps), total=steps, initial=start, desc="training",
                       disable=not progress)
    for step in bar:
        if _on_step is not None:
            _on_step(step)
        x, y = sample_batch(train_ids, batch_size, block_size, gen, device)
        if "recipe" in config:
            for group in opt.param_groups:
                group["lr"] = lr_at(step, steps, lr, warmup, min_lr)
        _, loss, _ = model(x, y)
        if not torch.isfinite(loss.detach()):
            raise FloatingPointError(f"the loss became {float(loss)} at step {step}; "
                                     "lower the learning rate")
        opt.zero_grad(set_to_none=True)
        loss.backward()
        if clip is not None:
            torch.nn.utils.clip_grad_norm_(model.parameters(), clip)
        opt.step()
        running, count = running + loss.item(), count + 1
        if step < TRACE_STEPS:
            history["trace"].append(loss.item())
        if (step + 1) % eval_every == 0 or step + 1 == steps:
            record(step + 1, running / count)
            running, count = 0.0, 0
            bar.set_postfix(train=f"{history['train_loss'][-1]:.3f}",
                            test=f"{history['test_loss'][-1]:.3f}")
            save(step + 1)
    if timing is not None:
        timing["session_seconds"] = time.perf_counter() - t0
        timing["seconds"] = elapsed + timing["session_seconds"]
        timing["sessions"] = sessions + ([session] if session["to_step"] > start else [])
    return history


def _device_label(device: torch.device | str) -> str:
    device = torch.device(device)
    if device.type == "cuda" and torch.cuda.is_available():
        return f"cuda: {torch.cuda.get_device_name(device)}"
    if device.type == "cpu":
        return f"cpu, {torch.get_num_threads()} threads"
    return str(device)


def slim_checkpoint(path: str | os.PathLike) -> None:
    """Shrink the checkpoint of a *finished* :func:`train_lm` run to what measuring needs:
    the optimizer state dropped, the weights rounded to bfloat16 (what the stored runs
    keep anyway), the history and sessions kept. :func:`train_lm` given it returns the
    history and loads the rounded weights; it refuses to resume a slimmed unfinished run.
    """
    state = load_checkpoint(path)
    if state is None or state.get("kind") != "lm":
        raise ValueError(f"{path} is not a train_lm checkpoint")
    if state["step"] < state["config"]["steps"]:
        raise ValueError(f"{path} holds an unfinished run (step {state['step']} of "
                         f"{state['config']['steps']}): only a finished one is slimmed")
    state["model"] = {k: v.to(torch.bfloat16) if v.is_floating_point() else v
                      for k, v in state["model"].items()}
    state.pop("optimizer", None)
    state["slim"] = True
    save_checkpoint(path, state)
