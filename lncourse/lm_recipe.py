"""The recipe a language model of the course learns with, and what its loss is read against.

:class:`Recipe` is a training recipe that learns (warm-up, cosine decay, clipping; the
schedule is :func:`lr_at`), whose peak learning rate a short sweep chooses by
:data:`SWEEP_RULE` (:func:`choose_lr`); :func:`lncourse.lm.train_lm` trains with it.
The references: every language-model loss of the course is printed beside its data's
unigram and bigram losses (:func:`reference_losses`, :func:`with_references`), and
:func:`position_losses` with :func:`context_gain` say whether a model beats the bigram
table at later positions, i.e. uses its context.
Shapes: token streams (N,); windows (B, T); per-position losses (S, T).
"""

from __future__ import annotations

import dataclasses
import math
import numbers

import numpy as np

import torch
from torch import Tensor, nn

from lncourse.rng import check_seed
from lncourse.summary import paired_interval
from lncourse.text import sample_batch

__all__ = ["sweep_run", "lr_at", "reference_tables", "reference_losses", "bigram_loss",
           "tuned_bigram", "SMOOTHING_GRID", "position_losses",
           "context_gain", "with_references", "Recipe", "SWEEP_RULE", "choose_lr"]


def positive_int(name: str, value) -> None:
    if isinstance(value, bool) or not isinstance(value, numbers.Integral) or value < 1:
        raise ValueError(f"{name} must be a positive integer, got {value!r}")


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


def bigram_loss(train_ids: Tensor, test_ids: Tensor, vocab_size: int,
                alpha: float) -> float:
    """Test cross-entropy (nats per token) of the training stream's bigram table with
    add-``alpha`` smoothing, p(b | a) = (c(a, b) + alpha) / (c(a) + alpha V), over every
    next token of the test stream: (N,), (M,) -> float. ``alpha = 1`` is the table of
    :func:`reference_losses`."""
    if not alpha > 0:
        raise ValueError(f"the smoothing constant must be positive, got {alpha}")
    tr = torch.as_tensor(train_ids).to("cpu", torch.int64)
    te = torch.as_tensor(test_ids).to("cpu", torch.int64)
    for name, ids in (("train_ids", tr), ("test_ids", te)):
        if ids.ndim != 1 or len(ids) < 2:
            raise ValueError(f"{name} must be a stream (N,) with N >= 2, got "
                             f"{tuple(ids.shape)}")
        if int(ids.min()) < 0 or int(ids.max()) >= vocab_size:
            raise ValueError(f"token ids must lie in [0, {vocab_size})")
    # counts of the pairs the test stream asks about, without a (V, V) table
    pairs = torch.bincount(tr[:-1] * vocab_size + tr[1:], minlength=vocab_size ** 2)
    rows = torch.bincount(tr[:-1], minlength=vocab_size)
    c = pairs[te[:-1] * vocab_size + te[1:]].double()          # (M - 1,)
    n = rows[te[:-1]].double()
    return float(-((c + alpha) / (n + alpha * vocab_size)).log().mean())


# add-alpha constants tried by tuned_bigram: from far below add-one to add-one
SMOOTHING_GRID = (1e-4, 3e-4, 1e-3, 3e-3, 1e-2, 3e-2, 0.1, 0.3, 1.0)


def tuned_bigram(train_ids: Tensor, test_ids: Tensor, vocab_size: int,
                 held_out: float = 0.1, grid: tuple = SMOOTHING_GRID) -> dict:
    """A fair bigram reference: the add-alpha constant chosen on held-out data that is
    not the test stream (the last ``held_out`` of the training stream, the table counted
    on the rest), then the table counted on the whole training stream with that
    constant, read on the test stream. Add-one smoothing (:func:`reference_losses`)
    gives a weak bigram where the vocabulary is large beside the data (BPE, V = 4,096).

    Returns ``alpha`` (the chosen constant), ``held_out`` ({alpha: held-out loss}) and
    ``bigram`` (the test loss with ``alpha``), nats per token."""
    tr = torch.as_tensor(train_ids).to("cpu", torch.int64)
    if not 0 < held_out < 1:
        raise ValueError(f"held_out is a fraction in (0, 1), got {held_out}")
    cut = int(len(tr) * (1 - held_out))
    fit, tail = tr[:cut], tr[cut:]
    scores = {a: bigram_loss(fit, tail, vocab_size, a) for a in grid}
    alpha = min(scores, key=scores.get)
    return {"alpha": alpha, "held_out": scores,
            "bigram": bigram_loss(tr, test_ids, vocab_size, alpha)}


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
            positive_int(name, getattr(self, name))
        if not 0 <= self.warmup < self.steps:
            raise ValueError(f"warmup must be in [0, steps), got {self.warmup}")
        if not 0 < self.min_lr_ratio <= 1:
            raise ValueError(f"min_lr_ratio must be in (0, 1], got {self.min_lr_ratio}")
        if not (math.isfinite(self.clip) and self.clip > 0):
            raise ValueError(f"clip must be a finite positive number, got {self.clip}")

    def kwargs(self, lr: float) -> dict:
        """The keyword arguments of :func:`lncourse.lm.train_lm` for peak rate ``lr``."""
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


def sweep_run(lr: float, train, record=None) -> dict:
    """One short run of a learning-rate sweep, as its record: ``train()`` returns
    ``(model, history, timing)``; a run that diverges (FloatingPointError) is kept with
    ``train_loss`` None. ``record`` (a path or None): where a finished run is kept, small,
    and read back instead of training again."""
    import json

    if record is not None and record.exists():
        return json.loads(record.read_text())
    try:
        _, history, timing = train()
    except FloatingPointError as err:
        out = {"lr": lr, "train_loss": None, "diverged": str(err)}
    else:
        out = {"lr": lr, "train_loss": history["train_loss"][-1], "history": history,
               "sessions": timing.get("sessions", []),
               "seconds": timing.get("seconds", 0.0)}
    if record is not None:
        record.write_text(json.dumps(out))
    return out
