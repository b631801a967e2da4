"""Training majority models: every seed, variant and learning rate of one run at once
(chapter 3).

:func:`train` stacks the weights of M models along a leading axis and trains them as one
computation on class counts (:func:`lncourse.majority.multiset_fused.multiset_loss`), with Adam
written out for a learning rate per model. Adam is elementwise and the loss is a sum of
per-model losses, so this is the same as training each model alone;
:func:`lncourse.majority.single.train_single` does exactly that, token by token, with the
released ``nn.TransformerEncoderLayer`` and ``torch.optim.Adam``, and the tests compare
the two.

From Python, ``train(MajorityConfig.quick())`` (see :mod:`lncourse.majority.config`).
The trainer trains and reports; it records nothing beyond its history. A caller that
keeps more as the models train passes ``on_evaluation``, which sees the weights at every
evaluation: the stored runs keep parameter snapshots that way
(:mod:`lncourse.evidence.majority.snapshots`), and their command line, which writes
``results/majority/<preset>.json`` with its provenance, is
:mod:`lncourse.evidence.majority.runs`.
"""

from __future__ import annotations

import dataclasses
import math
import time
from collections.abc import Callable
from pathlib import Path

import torch
from torch import Tensor

from lncourse.majority import multiset_fused as FUSED, task as majority
from lncourse.majority.config import MajorityConfig
from lncourse.checkpoint import load_checkpoint, save_checkpoint
from lncourse.progress import progress

__all__ = ["MajorityConfig", "initial_model", "restore_multiset", "train", "OnEvaluation"]

TRACE_STEPS = 25   # every step's loss is kept for the first steps (what the tests replay)

# on_evaluation(step, params, history): see train()
OnEvaluation = Callable[[int, dict[str, Tensor], dict], None]


# ------------------------------------------------------------------------ pieces
def training_tensors(config: MajorityConfig, device: torch.device):
    """Counts and labels of the train and test sets, on ``device``."""
    tokens, labels = majority.make_dataset(config.n_samples, config.seq_len, config.n_classes,
                                    config.min_margin, seed=config.data_seed)
    train_idx, test_idx = majority.stratified_split(labels, 0.2, seed=config.data_seed)
    test_idx = test_idx[: config.eval_size] if config.eval_size else test_idx
    counts = majority.class_counts(tokens, config.n_classes)
    return {"train_counts": counts[train_idx].to(device),
            "train_labels": labels[train_idx].to(device),
            "train_tokens": tokens[train_idx].to(device),
            "test_counts": counts[test_idx].to(device),
            "test_labels": labels[test_idx].to(device),
            "test_tokens": tokens[test_idx].to(device)}


def initial_model(variant: str, seed: int, config: MajorityConfig) -> majority.MajorityModel:
    """The model ``seed`` starts from (PyTorch's default init), without touching the
    global random state. Every variant with the same seed starts from the same weights
    (the value-scaled intervention then multiplies its W_V by d)."""
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        return majority.MajorityModel(variant, config.d_model, config.n_classes)


def lr_factor(step: int, config: MajorityConfig, steps_per_epoch: int) -> float:
    """Linear decay from 1 to 0 over ``schedule_epochs`` (no warm-up), as released."""
    total = config.schedule_epochs * steps_per_epoch
    return max(0.0, (total - step) / total)


class BatchOrder:
    """Each seed's shuffled order of the training set, epoch after epoch.

    The permutation for an epoch is drawn from the seed's generator when the epoch
    starts; the generator state at that moment is what a checkpoint stores.
    """

    def __init__(self, seed: int, n: int, batch_size: int):
        self.n, self.batch_size = n, batch_size
        self.steps_per_epoch = math.ceil(n / batch_size)
        self.gen = torch.Generator().manual_seed(seed)
        self.epoch_state = self.gen.get_state()
        self.perm = torch.randperm(n, generator=self.gen)

    def indices(self, step: int) -> Tensor:
        pos = step % self.steps_per_epoch
        if pos == 0 and step > 0:  # a new epoch
            self.epoch_state = self.gen.get_state()
            self.perm = torch.randperm(self.n, generator=self.gen)
        return self.perm[pos * self.batch_size:(pos + 1) * self.batch_size]

    def restore(self, epoch_state: Tensor) -> None:
        self.gen.set_state(epoch_state)
        self.epoch_state = epoch_state.clone()
        self.perm = torch.randperm(self.n, generator=self.gen)


class Adam:
    """``torch.optim.Adam``'s update (betas 0.9, 0.999, eps 1e-8) with a learning rate
    per model: ``lr`` is (M,), multiplied by the schedule's factor at each step."""

    def __init__(self, params: dict[str, Tensor], lr: Tensor):
        self.params, self.lr, self.t = params, lr, 0
        self.m = {k: torch.zeros_like(p) for k, p in params.items()}
        self.v = {k: torch.zeros_like(p) for k, p in params.items()}

    @torch.no_grad()
    def step(self, grads: dict[str, Tensor], factor: float) -> None:
        self.t += 1
        c1, c2 = 1 - 0.9 ** self.t, math.sqrt(1 - 0.999 ** self.t)
        step_size = self.lr * (factor / c1)                      # (M,)
        for k, p in self.params.items():
            g = grads[k]
            self.m[k].lerp_(g, 0.1)
            self.v[k].mul_(0.999).addcmul_(g, g, value=0.001)
            denom = (self.v[k].sqrt() / c2).add_(1e-8)
            p.sub_(self.m[k] / denom * step_size.view(-1, *([1] * (p.dim() - 1))))

    def state(self) -> dict:
        return {"t": self.t, "m": {k: t.cpu() for k, t in self.m.items()},
                "v": {k: t.cpu() for k, t in self.v.items()}}

    def load(self, state: dict) -> None:
        self.t = state["t"]
        for k in self.params:
            self.m[k].copy_(state["m"][k])
            self.v[k].copy_(state["v"][k])


@torch.inference_mode()
def _evaluate(params: dict[str, Tensor], variants: tuple[str, ...],
              data: dict) -> tuple[Tensor, Tensor]:
    """Per-token test accuracy and mean query angle of each model, (M,) each."""
    _, acc = FUSED.multiset_evaluate(params, data["test_counts"], data["test_labels"], variants)
    # Angle averaged over the test tokens = over classes weighted by their token counts.
    class_weight = data["test_counts"].sum(dim=0).to(params["W_E"].dtype)   # (C,)
    angles = torch.stack([majority.query_angles(majority.effective_queries(
        params["W_E"][m], params["W_in"][m], v, params["n1_gain"][m]))
        for m, v in enumerate(variants)])                                   # (M, C)
    return acc, (angles * class_weight).sum(dim=1) / class_weight.sum()


def empty_history(config: MajorityConfig) -> dict:
    return {"config": dataclasses.asdict(config),
            "variant": [v for v, _, _ in config.models],
            "seed": [s for _, s, _ in config.models], "lr": [lr for _, _, lr in config.models],
            "step": [], "train_loss": [], "test_acc": [], "query_angle": [],
            "trace": {"step": [], "train_loss": []}}


def record_evaluation(history: dict, step: int, train_loss: Tensor, acc: Tensor, angle: Tensor):
    history["step"].append(step)
    history["train_loss"].append([float(x) for x in train_loss])
    history["test_acc"].append([float(x) for x in acc])
    history["query_angle"].append([float(x) for x in angle])


def _raise_if_not_finite(loss: Tensor, step: int, config: MajorityConfig) -> None:
    bad = (~torch.isfinite(loss)).nonzero().flatten().tolist()
    if bad:
        names = ", ".join(f"{v}/seed {s}/lr {lr:g}" for v, s, lr in
                          (config.models[m] for m in bad[:4]))
        raise FloatingPointError(
            f"the training loss is not finite at step {step} for {len(bad)} model(s) "
            f"({names}); lower the learning rate, or train in float64")


# ----------------------------------------------------------------------- trainers
def restore_multiset(state: dict, config, params: dict[str, Tensor], opt: Adam,
                     orders: list[BatchOrder], path) -> tuple[dict, int, float]:
    """Put a stacked trainer's checkpoint ``state`` back (this trainer's and chapter 5's
    :mod:`lncourse.evidence.norms.majority_run`): its parameters into ``params``, its Adam moments
    into ``opt``, each seed's place in its epoch into ``orders``. Refuses a checkpoint of
    another configuration (a dataclass; ``path`` names it in the error). Returns the
    history, the step and the seconds already spent."""
    if state.get("config") != dataclasses.asdict(config):
        raise ValueError(f"{path} holds another run (a different configuration); delete "
                         "it or choose another path")
    with torch.no_grad():
        for k in params:
            params[k].copy_(state["params"][k])
    opt.load(state["optimizer"])
    for order, epoch_state in zip(orders, state["epoch_states"]):
        order.restore(epoch_state)
    return state["history"], state["step"], state["elapsed"]


def train(config: MajorityConfig, *, device: torch.device | str = "cpu",
          dtype: torch.dtype = torch.float32, checkpoint_path: str | Path | None = None,
          show_progress: bool = True, chunk: int | None = None,
          on_evaluation: OnEvaluation | None = None, _on_step=None) -> dict:
    """Train every (variant, seed, lr) of ``config`` together; return the history.

    History (a JSON-friendly dict): ``variant``, ``seed``, ``lr`` (one entry per model),
    ``step`` (evaluation steps, 0 first) and, per evaluation, one value per model of
    ``train_loss`` (mean training batch loss since the previous evaluation; at step 0
    the loss of the first batch), ``test_acc`` (per token) and ``query_angle`` (mean
    angle in degrees of the effective queries to 1 over the test tokens); ``trace``, the
    loss of each of the first steps; ``final_params``; ``seconds``.

    ``on_evaluation(step, params, history)``, when given, sees the run as it trains:
    first at the evaluation training starts from (step 0 of a fresh run; a resumed
    run's last saved evaluation, its weights restored), then after every evaluation,
    once it is in ``history``. ``params`` are the live stacked (M, ...) tensors: read
    them, copy what you keep, never change them. What the callback adds to ``history``
    (under a key of its own) is saved with the checkpoint and returned, so it survives
    an interruption: the stored runs record their parameter snapshots so
    (:class:`lncourse.evidence.majority.snapshots.SnapshotRecorder`).

    With ``checkpoint_path``, the state is saved at every evaluation and an existing
    checkpoint of the same configuration is resumed: the history comes out the same as
    an uninterrupted run's. A non-finite loss raises ``FloatingPointError``.
    """
    device = torch.device(device)
    data = training_tensors(config, device)
    variants = tuple(v for v, _, _ in config.models)
    n_train = len(data["train_labels"])
    orders = [BatchOrder(s, n_train, config.batch_size) for s in config.seeds]
    steps_per_epoch = orders[0].steps_per_epoch

    init = majority.stack_params([initial_model(v, s, config) for v, s, _ in config.models])
    params = {k: t.to(device=device, dtype=dtype).requires_grad_() for k, t in init.items()}
    lrs = torch.tensor([lr for _, _, lr in config.models], device=device, dtype=dtype)
    opt = Adam(params, lrs)
    history, start, elapsed = empty_history(config), 0, 0.0

    state = load_checkpoint(checkpoint_path, kind="majority") if checkpoint_path else None
    if state is not None:
        history, start, elapsed = restore_multiset(state, config, params, opt, orders,
                                                   checkpoint_path)

    def batch(step: int):
        # One batch per seed (G = n_seeds), shared by that seed's variants and lrs.
        idx = torch.stack([o.indices(step) for o in orders]).to(device)     # (G, B)
        return data["train_counts"][idx], data["train_labels"][idx]

    t0 = time.perf_counter()

    def checkpoint(step: int):
        save_checkpoint(checkpoint_path, {
            "config": dataclasses.asdict(config), "step": step,
            "history": history, "elapsed": elapsed + time.perf_counter() - t0,
            "params": {k: p.detach().cpu() for k, p in params.items()},
            "optimizer": opt.state(), "epoch_states": [o.epoch_state for o in orders]},
            kind="majority")

    fresh = not history["step"]  # (a checkpoint at step 0 already holds step 0)
    if fresh:
        c, y = batch(0)
        loss0, _ = FUSED.multiset_evaluate(params, c, y, variants, chunk)
        record_evaluation(history, 0, loss0, *_evaluate(params, variants, data))
    if on_evaluation is not None:      # the evaluation training starts from
        on_evaluation(history["step"][-1], params, history)
    if fresh and checkpoint_path:
        checkpoint(0)

    bar = progress(range(start, config.steps), total=config.steps, initial=start,
                   desc="majority", disable=not show_progress)
    loss_sum = torch.zeros(len(variants), device=device, dtype=dtype)
    for step in bar:
        c, y = batch(step)
        loss = FUSED.multiset_loss(params, c, y, variants, chunk)
        grads = torch.autograd.grad(loss.sum(), list(params.values()))
        opt.step(dict(zip(params, grads)), lr_factor(step, config, steps_per_epoch))
        loss = loss.detach()
        loss_sum += loss
        done = step + 1
        if done <= TRACE_STEPS:
            _raise_if_not_finite(loss, done, config)
            history["trace"]["step"].append(done)
            history["trace"]["train_loss"].append([float(x) for x in loss])
        if done % config.eval_every == 0 or done == config.steps:
            _raise_if_not_finite(loss_sum, done, config)
            acc, angle = _evaluate(params, variants, data)
            record_evaluation(history, done, loss_sum / (done - history["step"][-1]), acc, angle)
            if on_evaluation is not None:
                on_evaluation(done, params, history)
            loss_sum.zero_()
            if checkpoint_path:
                checkpoint(done)
            bar.set_postfix(loss=f"{float(loss.mean()):.3f}", acc=f"{float(acc.mean()):.3f}")
        if _on_step is not None:
            _on_step(done)
    bar.close()
    history["final_params"] = {k: p.detach().cpu().tolist() for k, p in params.items()}
    history["seconds"] = elapsed + time.perf_counter() - t0
    return history


if __name__ == "__main__":
    raise SystemExit("the majority runs' command line is python -m "
                     "lncourse.evidence.majority.runs (the trainer records nothing)")
