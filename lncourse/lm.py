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

import numpy as np

import torch
from torch import Tensor, nn

from lncourse.checkpoint import load_checkpoint, save_checkpoint
from lncourse.progress import progress as progress_bar
from lncourse.rng import check_seed
from lncourse.summary import paired_interval
from lncourse.text import sample_batch

__all__ = ["TRACE_STEPS", "train_lm", "evaluate_lm", "data_fingerprint", "describe_model",
           "lr_at", "reference_tables", "reference_losses", "position_losses",
           "context_gain", "with_references", "Recipe", "SWEEP_RULE", "choose_lr",
           "slim_checkpoint"]

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
    it then decays along a cosine to ``min_lr`` at the last step (:func:`lr_at`); with
    ``clip`` the gradient's global norm is clipped to it before every step.
    """
    for name, value in (("steps", steps), ("batch_size", batch_size),
                        ("block_size", block_size), ("eval_every", eval_every),
                        ("eval_batches", eval_batches)):
        _positive_int(name, value)
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


def lr_at(step: int, steps: int, peak: float, warmup: int = 0,
          min_lr: float | None = None) -> float:
    """The learning rate of 0-based ``step`` of ``steps``: linear warm-up to ``peak`` over
    ``warmup`` steps, then ``peak`` (``min_lr`` None) or a cosine decay from ``peak`` to
    ``min_lr``, reached at the last step."""
    if step < warmup:
        return peak * (step + 1) / warmup
    if min_lr is None:
        return peak
    t = (step - warmup) / max(steps - 1 - warmup, 1)
    return min_lr + 0.5 * (peak - min_lr) * (1 + math.cos(math.pi * t))


def reference_tables(train_ids: Tensor, vocab_size: int) -> tuple[Tensor, Tensor]:
    """Log-probabilities of the unigram (V,) and bigram (V, V) tables of the training
    stream (N,), with add-one smoothing: row a of the bigram is log p(next | a)."""
    ids = torch.as_tensor(train_ids).to("cpu", torch.int64)
    if ids.ndim != 1 or len(ids) < 2:
        raise ValueError(f"train_ids must be a stream (N,) with N >= 2, got {tuple(ids.shape)}")
    if int(ids.min()) < 0 or int(ids.max()) >= vocab_size:
        raise ValueError(f"token ids must lie in [0, {vocab_size})")
    uni = torch.ones(vocab_size, dtype=torch.float64).index_add_(
        0, ids, torch.ones(len(ids), dtype=torch.float64))
    bi = torch.ones(vocab_size, vocab_size, dtype=torch.float64)
    bi.index_put_((ids[:-1], ids[1:]), torch.ones(len(ids) - 1, dtype=torch.float64),
                  accumulate=True)
    return (uni / uni.sum()).log(), (bi / bi.sum(1, keepdim=True)).log()


def reference_losses(train_ids: Tensor, test_ids: Tensor, vocab_size: int) -> dict:
    """The test cross-entropies (nats per token) of the training split's unigram and bigram
    tables (add-one smoothing) over every next token of the test stream: what a model
    that ignores its input, and one that reads only the current token, reach. Every
    language-model loss of the course is printed beside them."""
    uni, bi = reference_tables(train_ids, vocab_size)
    test = torch.as_tensor(test_ids).to("cpu", torch.int64)
    return {"unigram": float(-uni[test[1:]].mean()),
            "bigram": float(-bi[test[:-1], test[1:]].mean())}


def with_references(loss: float | None, refs: dict) -> str:
    """A loss printed beside its data's references: '2.213 (bigram 2.510, unigram 3.318;
    0.297 below the bigram)'."""
    if loss is None:
        return f"diverged (bigram {refs['bigram']:.3f}, unigram {refs['unigram']:.3f})"
    gap = refs["bigram"] - loss
    side = "below" if gap >= 0 else "above"
    return (f"{loss:.3f} (bigram {refs['bigram']:.3f}, unigram {refs['unigram']:.3f}; "
            f"{abs(gap):.3f} {side} the bigram)")


@torch.no_grad()
def position_losses(model: nn.Module, train_ids: Tensor, test_ids: Tensor, *,
                    windows: int, block_size: int, seed: int, vocab_size: int,
                    batch_size: int = 64) -> dict:
    """Next-token loss per position on ``windows`` held-out windows (drawn with ``seed``),
    for the model and, on the very same tokens, for the training split's bigram table.

    Returns ``model`` and ``bigram``: (windows, T) lists of per-token losses averaged
    over nothing (so every mean and interval recomputes), computed where the model's
    parameters are. A model that uses its context beats the bigram at later positions;
    one that does not stays level with it at every position."""
    if isinstance(windows, bool) or not isinstance(windows, int) or windows < 2:
        raise ValueError(f"windows must be an integer >= 2, got {windows!r}")
    _, bi = reference_tables(train_ids, vocab_size)
    device = next(model.parameters()).device
    was_training = model.training
    model.eval()
    gen = torch.Generator().manual_seed(check_seed(seed))
    rows_model, rows_bigram, done = [], [], 0
    while done < windows:
        n = min(batch_size, windows - done)
        x, y = sample_batch(test_ids, n, block_size, gen, "cpu")
        logits = model(x.to(device))[0].double().cpu()
        nll = -torch.log_softmax(logits, -1).gather(-1, y[..., None])[..., 0]
        if not torch.isfinite(nll).all():
            raise FloatingPointError("the model's loss is not finite on held-out windows")
        rows_model.append(nll)
        rows_bigram.append(-bi[x, y])
        done += n
    model.train(was_training)
    return {"model": torch.cat(rows_model).tolist(),
            "bigram": torch.cat(rows_bigram).tolist()}


def context_gain(per_position: dict, start: int) -> dict:
    """From :func:`position_losses`: at positions ``start``.. (1-based, as T counts
    them), the mean loss of the model and of the bigram on the same tokens, and the gain
    (bigram minus model) with a 95% t interval over windows. A gain clearly above 0 says
    the model uses its context; 0 says it reads the current token only."""
    m = np.asarray(per_position["model"], dtype=np.float64)
    b = np.asarray(per_position["bigram"], dtype=np.float64)
    if m.shape != b.shape or m.ndim != 2 or not 1 <= start <= m.shape[1]:
        raise ValueError(f"per-position losses (S, T) and 1 <= start <= T needed, got "
                         f"{m.shape}, {b.shape} and start {start}")
    late_m, late_b = m[:, start - 1:].mean(1), b[:, start - 1:].mean(1)
    gain, low, high = paired_interval(late_b - late_m)
    return {"start": start, "model": float(late_m.mean()), "bigram": float(late_b.mean()),
            "gain": [gain, low, high],
            "first_position": {"model": float(m[:, 0].mean()), "bigram": float(b[:, 0].mean())}}


@dataclasses.dataclass(frozen=True)
class Recipe:
    """A training recipe that learns: AdamW, linear warm-up over ``warmup`` steps, cosine
    decay to ``min_lr_ratio`` x the peak at the last step, the gradient's global norm
    clipped to ``clip``; the peak learning rate comes from a short sweep
    (:func:`choose_lr`)."""

    steps: int
    batch_size: int
    block_size: int
    warmup: int
    min_lr_ratio: float = 0.1
    clip: float = 1.0
    eval_every: int = 250
    eval_batches: int = 8

    def __post_init__(self):
        for name in ("steps", "batch_size", "block_size", "eval_every", "eval_batches"):
            _positive_int(name, getattr(self, name))
        if not 0 <= self.warmup < self.steps:
            raise ValueError(f"warmup must be in [0, steps), got {self.warmup}")
        if not 0 < self.min_lr_ratio <= 1:
            raise ValueError(f"min_lr_ratio must be in (0, 1], got {self.min_lr_ratio}")
        if not (math.isfinite(self.clip) and self.clip > 0):
            raise ValueError(f"clip must be a finite positive number, got {self.clip}")

    def kwargs(self, lr: float) -> dict:
        """The keyword arguments of :func:`train_lm` for peak rate ``lr``."""
        return {"steps": self.steps, "batch_size": self.batch_size,
                "block_size": self.block_size, "lr": lr, "warmup": self.warmup,
                "min_lr": lr * self.min_lr_ratio, "clip": self.clip,
                "eval_every": self.eval_every, "eval_batches": self.eval_batches}

    def short(self, steps: int) -> "Recipe":
        """The same recipe over ``steps`` steps (warm-up and evaluations scaled): the
        sweep's runs."""
        every = max(steps // 5, 1)
        return dataclasses.replace(self, steps=steps,
                                   warmup=max(1, self.warmup * steps // self.steps),
                                   eval_every=every)


SWEEP_RULE = ("per model, the peak learning rate whose short run ends with the lowest "
              "training loss (the mean over its last evaluation interval, on training "
              "windows, so the test split plays no part in the choice); a run whose loss "
              "stopped being finite is excluded; written before any final run was seen")


def choose_lr(runs: list[dict]) -> float:
    """:data:`SWEEP_RULE` over ``runs``, each {"lr": float, "train_loss": float or None
    (diverged)}. Raises ValueError when every run diverged."""
    ok = [r for r in runs if r["train_loss"] is not None and math.isfinite(r["train_loss"])]
    if not ok:
        raise ValueError("every run of the sweep diverged: no learning rate to choose")
    return min(ok, key=lambda r: (r["train_loss"], r["lr"]))["lr"]


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
