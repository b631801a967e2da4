"""Training the small language models of chapters 2 and 4 on Shakespeare.

:func:`train_lm` trains one model with AdamW on random windows of a token stream and
returns its loss history. With a checkpoint path it saves its state (including its
configuration) at every evaluation and resumes an interrupted run to the same history;
a checkpoint of a different run (another learning rate, batch, seed, number of steps,
data or model) is refused rather than mixed in.
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
from lncourse.progress import progress as progress_bar
from lncourse.rng import check_seed
from lncourse.text import sample_batch

__all__ = ["TRACE_STEPS", "train_lm", "evaluate_lm", "data_fingerprint", "describe_model"]

TRACE_STEPS = 5   # the loss of each of the first steps is kept (the tests replay them)


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


def _positive_int(name: str, value) -> None:
    if isinstance(value, bool) or not isinstance(value, numbers.Integral) or value < 1:
        raise ValueError(f"{name} must be a positive integer, got {value!r}")


@torch.enable_grad()   # a notebook that only measures may have turned gradients off
def train_lm(model: nn.Module, train_ids: Tensor, test_ids: Tensor, *, steps: int,
             batch_size: int, block_size: int, lr: float = 3e-3, eval_every: int = 50,
             eval_batches: int = 8, seed: int = 0, device: torch.device | str = "cpu",
             checkpoint_path: str | os.PathLike | None = None, progress: bool = True,
             measure: Callable[[nn.Module], dict] | None = None,
             timing: dict | None = None,
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
    included) and ``session_seconds`` (this call's); wall times stay out of the history,
    which is the same whether or not the run was interrupted.
    """
    for name, value in (("steps", steps), ("batch_size", batch_size),
                        ("block_size", block_size), ("eval_every", eval_every),
                        ("eval_batches", eval_batches)):
        _positive_int(name, value)
    if isinstance(lr, bool) or not isinstance(lr, numbers.Real) or not math.isfinite(lr) \
            or lr <= 0:
        raise ValueError(f"lr must be a finite positive number, got {lr!r}")
    check_seed(seed, offset=2)   # seed, seed + 1 and seed + 2 are used
    config = {"lr": float(lr), "batch_size": int(batch_size), "block_size": int(block_size),
              "steps": int(steps), "eval_every": int(eval_every),
              "eval_batches": int(eval_batches), "seed": int(seed),
              "data": data_fingerprint(train_ids, test_ids), "model": describe_model(model),
              "measure": getattr(measure, "__qualname__", None)}
    model.to(device).train()
    opt = torch.optim.AdamW(model.parameters(), lr=lr, weight_decay=0.0)
    gen = torch.Generator().manual_seed(seed)
    history: dict[str, list] = {"step": [], "train_loss": [], "test_loss": [], "trace": []}
    if measure is not None:
        history["measure"] = []
    start, elapsed, t0 = 0, 0.0, time.perf_counter()
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
        model.load_state_dict(state["model"])
        opt.load_state_dict(state["optimizer"])
        gen.set_state(state["generator"])
        history, start, elapsed = state["history"], state["step"], state["elapsed"]

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
        if checkpoint_path:
            save_checkpoint(checkpoint_path, {
                "kind": "lm", "config": config, "model": model.state_dict(),
                "optimizer": opt.state_dict(), "generator": gen.get_state(),
                "history": history, "step": step,
                "elapsed": elapsed + time.perf_counter() - t0})

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
        _, loss, _ = model(x, y)
        if not torch.isfinite(loss.detach()):
            raise FloatingPointError(f"the loss became {float(loss)} at step {step}; "
                                     "lower the learning rate")
        opt.zero_grad(set_to_none=True)
        loss.backward()
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
    return history
