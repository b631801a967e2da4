"""Training majority models: all seeds and variants of one configuration at once (chapter 3).

:func:`train` stacks the weights of M models (every seed x variant) along a leading axis
and trains them as one computation with :func:`lncourse.majority.multiset_forward`. Adam
is elementwise and the loss is a sum of per-model losses, so this is the same as training
each model alone; :func:`train_single` does exactly that, token by token, with the
released ``nn.TransformerEncoderLayer`` model, and the tests compare the two.

Use it from Python (``train(MajorityConfig.quick())``) or from the command line::

    python -m lncourse.majority --preset paper --out results/
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import math
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch
from torch import Tensor

from . import majority as M
from .checkpoint import load_checkpoint, save_checkpoint
from .device import default_device
from .progress import progress

PAPER_SEEDS = (11, 123, 42, 9, 456, 4, 5, 6, 7, 8)


@dataclass(frozen=True)
class MajorityConfig:
    """One majority experiment: data, model, optimisation, which seeds and variants."""

    n_samples: int = 100_000
    seq_len: int = 50
    n_classes: int = 20
    min_margin: int = 6             # largest class beats the second by this many tokens
    d_model: int = 8
    lr: float = 1e-3
    batch_size: int = 6000
    steps: int = 14_000             # 1,000 epochs of ceil(80,008 / 6,000) = 14 steps
    schedule_epochs: int = 10_000   # the linear decay is set for 10,000 epochs (release)
    eval_every: int = 100           # steps between evaluations (and checkpoints)
    eval_size: int | None = None    # test sequences used per evaluation; None: all
    seeds: tuple[int, ...] = PAPER_SEEDS
    variants: tuple[str, ...] = M.VARIANTS
    data_seed: int = 0              # one dataset for every model: a paired comparison

    def __post_init__(self):
        for v in self.variants:
            if v not in M.ALL_VARIANTS:
                raise ValueError(f"unknown variant {v!r}; choose from {M.ALL_VARIANTS}")
        if not self.seeds or not self.variants:
            raise ValueError("need at least one seed and one variant")
        if len(set(self.seeds)) != len(self.seeds) or len(set(self.variants)) != len(self.variants):
            raise ValueError("seeds and variants must not repeat (each model is one pair)")
        for name in ("batch_size", "steps", "eval_every", "schedule_epochs"):
            if getattr(self, name) < 1:
                raise ValueError(f"{name} must be >= 1, got {getattr(self, name)}")
        if not self.lr > 0:
            raise ValueError(f"lr must be positive, got {self.lr}")

    @classmethod
    def paper(cls) -> MajorityConfig:
        """The paper's setting (appendix E.1 and the released scripts); for a GPU."""
        return cls()

    @classmethod
    def quick(cls) -> MajorityConfig:
        """A CPU-sized run (about a minute on two cores): batch 500, lr 3e-3 (three times
        the paper's, to get far in 2,000 steps), 5 seeds, every variant and the control."""
        return cls(batch_size=500, lr=3e-3, steps=2000, eval_every=100, eval_size=2000,
                   seeds=PAPER_SEEDS[:5], variants=M.ALL_VARIANTS)

    @classmethod
    def three_d(cls, steps: int = 10_000) -> MajorityConfig:
        """Figure 1a/1b: d = 3, 10 classes, length 30, the released 3-d scripts' settings
        (6,000 sequences, one full batch per step, 10,000 steps), all three norms."""
        return cls(n_samples=6000, seq_len=30, n_classes=10, d_model=3, batch_size=6000,
                   steps=steps, eval_every=max(1, steps // 20),
                   variants=("layernorm", "no_projection", "no_projection_released"),
                   seeds=PAPER_SEEDS[:1])

    @property
    def models(self) -> list[tuple[str, int]]:
        """(variant, seed) of each of the M models, variants in contiguous blocks."""
        return [(v, s) for v in self.variants for s in self.seeds]


# ------------------------------------------------------------------------ pieces
def _data(config: MajorityConfig, device: torch.device):
    """Counts and labels of the train and test sets, on ``device``."""
    tokens, labels = M.make_dataset(config.n_samples, config.seq_len, config.n_classes,
                                    config.min_margin, seed=config.data_seed)
    train_idx, test_idx = M.stratified_split(labels, 0.2, seed=config.data_seed)
    test_idx = test_idx[: config.eval_size] if config.eval_size else test_idx
    counts = M.class_counts(tokens, config.n_classes)
    return {"train_counts": counts[train_idx].to(device),
            "train_labels": labels[train_idx].to(device),
            "train_tokens": tokens[train_idx].to(device),
            "test_counts": counts[test_idx].to(device),
            "test_labels": labels[test_idx].to(device),
            "test_tokens": tokens[test_idx].to(device)}


def initial_model(variant: str, seed: int, config: MajorityConfig) -> M.MajorityModel:
    """The model ``seed`` starts from (PyTorch's default init), without touching the
    global random state. Every variant with the same seed starts from the same weights."""
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        return M.MajorityModel(variant, config.d_model, config.n_classes)


def _lr_at(step: int, config: MajorityConfig, steps_per_epoch: int) -> float:
    """Linear decay from ``lr`` to 0 over ``schedule_epochs`` (no warm-up), as released."""
    total = config.schedule_epochs * steps_per_epoch
    return config.lr * max(0.0, (total - step) / total)


class _BatchOrder:
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


@torch.inference_mode()
def _evaluate(params: dict[str, Tensor], variants: tuple[str, ...], data: dict,
              chunk: int) -> tuple[Tensor, Tensor]:
    """Per-token test accuracy and mean query angle of each model, (M,) each."""
    correct = 0.0
    for start in range(0, len(data["test_labels"]), chunk):
        c = data["test_counts"][start:start + chunk]
        y = data["test_labels"][start:start + chunk]
        _, acc = M.multiset_loss_and_accuracy(*M.multiset_forward(params, c, variants), y)
        correct = correct + acc * c.sum()
    n_tokens = data["test_counts"].sum()
    # Angle averaged over the test tokens = over classes weighted by their token counts.
    class_weight = data["test_counts"].sum(dim=0).to(params["W_E"].dtype)  # (C,)
    angles = torch.stack([M.query_angles(M.effective_queries(params["W_E"][m],
                                                             params["W_in"][m], v))
                          for m, v in enumerate(variants)])        # (M, C)
    angle = (angles * class_weight).sum(dim=1) / class_weight.sum()
    return correct / n_tokens, angle


def _empty_history(config: MajorityConfig) -> dict:
    return {"config": dataclasses.asdict(config),
            "variant": [v for v, _ in config.models], "seed": [s for _, s in config.models],
            "step": [], "train_loss": [], "test_acc": [], "query_angle": []}


def _record(history: dict, step: int, train_loss: Tensor, acc: Tensor, angle: Tensor):
    history["step"].append(step)
    history["train_loss"].append([float(x) for x in train_loss])
    history["test_acc"].append([float(x) for x in acc])
    history["query_angle"].append([float(x) for x in angle])


# ----------------------------------------------------------------------- trainers
def train(config: MajorityConfig, *, device: torch.device | str | None = None,
          dtype: torch.dtype = torch.float32, checkpoint_path: str | Path | None = None,
          show_progress: bool = True, eval_chunk: int = 2000, _on_step=None) -> dict:
    """Train every (variant, seed) of ``config`` together; return the history.

    History (a JSON-friendly dict): ``variant``, ``seed`` (one entry per model), ``step``
    (evaluation steps, 0 first) and, per evaluation, one value per model of
    ``train_loss`` (mean training batch loss since the previous evaluation; at step 0
    the loss of the first batch), ``test_acc`` (per-token) and ``query_angle`` (mean
    angle in degrees of the effective queries to 1 over the test tokens).

    With ``checkpoint_path``, the state is saved at every evaluation and an existing
    checkpoint of the same configuration is resumed: the history comes out the same as
    an uninterrupted run's. The steps train on ``device`` (default: ``default_device()``).
    """
    device = torch.device(device) if device is not None else default_device()
    data = _data(config, device)
    models = config.models
    variants = tuple(v for v, _ in models)
    n_train = len(data["train_labels"])
    orders = {s: _BatchOrder(s, n_train, config.batch_size) for s in config.seeds}
    steps_per_epoch = orders[config.seeds[0]].steps_per_epoch

    init = M.stack_params([initial_model(v, s, config) for v, s in models])
    params = {k: t.to(device=device, dtype=dtype).requires_grad_() for k, t in init.items()}
    opt = torch.optim.Adam(list(params.values()), lr=config.lr)
    history, start = _empty_history(config), 0

    state = load_checkpoint(checkpoint_path) if checkpoint_path else None
    if state is not None:
        if state["config"] != dataclasses.asdict(config):
            raise ValueError(f"{checkpoint_path} holds a different configuration; "
                             "delete it or choose another path")
        with torch.no_grad():
            for k in params:
                params[k].copy_(state["params"][k])
        opt.load_state_dict(state["optimizer"])
        for s, epoch_state in zip(config.seeds, state["epoch_states"]):
            orders[s].restore(epoch_state)
        history, start = state["history"], state["step"]

    def batch(step: int):
        # Models are ordered (variant, seed) with seeds inner, so model m belongs to seed
        # m % n_seeds: one batch per seed, shared by that seed's variants.
        idx = torch.stack([orders[s].indices(step) for s in config.seeds]).to(device)  # (S, B)
        return data["train_counts"][idx], data["train_labels"][idx]

    def checkpoint(step: int):
        save_checkpoint(checkpoint_path, {
            "config": dataclasses.asdict(config), "step": step, "history": history,
            "params": {k: p.detach().cpu() for k, p in params.items()},
            "optimizer": opt.state_dict(),
            "epoch_states": [orders[s].epoch_state for s in config.seeds]})

    if start == 0:
        with torch.no_grad():
            c, y = batch(0)
            loss0 = M.multiset_loss(*M.multiset_forward(params, c, variants), y)
        _record(history, 0, loss0, *_evaluate(params, variants, data, eval_chunk))
        if checkpoint_path:
            checkpoint(0)

    bar = progress(range(start, config.steps), total=config.steps, initial=start,
                   desc="majority", disable=not show_progress)
    loss_sum = torch.zeros(len(models), device=device, dtype=dtype)
    for step in bar:
        c, y = batch(step)
        for group in opt.param_groups:
            group["lr"] = _lr_at(step, config, steps_per_epoch)
        loss = M.multiset_loss(*M.multiset_forward(params, c, variants), y)
        opt.zero_grad(set_to_none=True)
        loss.sum().backward()  # models do not share weights: each gets its own gradient
        opt.step()
        loss_sum += loss.detach()
        done = step + 1
        if done % config.eval_every == 0 or done == config.steps:
            n = done - history["step"][-1]
            acc, angle = _evaluate(params, variants, data, eval_chunk)
            _record(history, done, loss_sum / n, acc, angle)
            loss_sum.zero_()
            if checkpoint_path:
                checkpoint(done)
            bar.set_postfix(loss=f"{float(loss.detach().mean()):.3f}",
                            acc=f"{float(acc.mean()):.3f}")
        if _on_step is not None:
            _on_step(done)
    bar.close()
    history["final_params"] = {k: p.detach().cpu().tolist() for k, p in params.items()}
    return history


def train_single(config: MajorityConfig, variant: str, seed: int, *,
                 device: torch.device | str = "cpu", dtype: torch.dtype = torch.float32,
                 steps: int | None = None, show_progress: bool = False) -> dict:
    """The straightforward way: one released model, token by token, ``torch.optim.Adam``.

    Same data, initial weights, batch order and schedule as model (variant, seed) of
    :func:`train`, so the two histories agree up to rounding. Returns the same keys,
    each holding one model.
    """
    device = torch.device(device)
    cfg = dataclasses.replace(config, seeds=(seed,), variants=(variant,),
                              steps=steps or config.steps)
    data = _data(cfg, device)
    model = initial_model(variant, seed, cfg).to(device=device, dtype=dtype)
    opt = torch.optim.Adam(model.parameters(), lr=cfg.lr)
    order = _BatchOrder(seed, len(data["train_labels"]), cfg.batch_size)
    loss_fn = torch.nn.CrossEntropyLoss()
    history = _empty_history(cfg)

    def token_loss(step: int) -> Tensor:
        idx = order.indices(step).to(device)
        x, y = data["train_tokens"][idx], data["train_labels"][idx]
        logits = model(x)                                            # (B, T, C)
        return loss_fn(logits.reshape(-1, cfg.n_classes),
                       y.unsqueeze(1).expand_as(x).reshape(-1))

    @torch.no_grad()
    def evaluate() -> tuple[Tensor, Tensor]:
        x, y = data["test_tokens"], data["test_labels"]
        correct = sum(int((model(x[i:i + 2000]).argmax(-1) == y[i:i + 2000, None]).sum())
                      for i in range(0, len(y), 2000))
        weight = data["test_counts"].sum(dim=0).to(dtype)
        q = M.effective_queries(model.embedding.weight, model.layer.self_attn.in_proj_weight,
                                variant)
        angle = (M.query_angles(q) * weight).sum() / weight.sum()
        return torch.tensor([correct / x.numel()], dtype=torch.float64), angle.reshape(1)

    with torch.no_grad():
        loss0 = token_loss(0)
    _record(history, 0, loss0.reshape(1), *evaluate())
    loss_sum = 0.0
    for step in progress(range(cfg.steps), desc=f"{variant} {seed}", disable=not show_progress):
        for group in opt.param_groups:
            group["lr"] = _lr_at(step, cfg, order.steps_per_epoch)
        loss = token_loss(step)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        loss_sum += loss.item()
        done = step + 1
        if done % cfg.eval_every == 0 or done == cfg.steps:
            n = done - history["step"][-1]
            _record(history, done, torch.tensor([loss_sum / n], dtype=torch.float64), *evaluate())
            loss_sum = 0.0
    history["final_params"] = {k: p.detach().cpu().unsqueeze(0).tolist()
                               for k, p in M.get_params(model).items()}
    return history


# ------------------------------------------------------------------ reading results
def history_arrays(history: dict, variant: str) -> dict[str, np.ndarray]:
    """One variant's curves as arrays: ``step`` (P,) and ``train_loss``, ``test_acc``,
    ``query_angle`` of shape (n_seeds, P), ready for :func:`lncourse.plotting.band`."""
    cols = [m for m, v in enumerate(history["variant"]) if v == variant]
    if not cols:
        raise ValueError(f"variant {variant!r} is not in this history "
                         f"(it has {sorted(set(history['variant']))})")
    out = {"step": np.asarray(history["step"]),
           "seed": np.asarray(history["seed"])[cols]}
    for key in ("train_loss", "test_acc", "query_angle"):
        out[key] = np.asarray(history[key], dtype=float)[:, cols].T
    return out


def steps_to_threshold(steps: np.ndarray, values: np.ndarray, threshold: float = 0.9) -> np.ndarray:
    """First evaluation step at which each run reaches ``threshold`` (NaN if never).

    steps: (P,); values: (n_runs, P). Returns (n_runs,).
    """
    values = np.atleast_2d(np.asarray(values, dtype=float))
    reached = values >= threshold
    first = reached.argmax(axis=1)
    return np.where(reached.any(axis=1), np.asarray(steps, dtype=float)[first], np.nan)


# --------------------------------------------------------------------- command line
PRESETS = {"paper": MajorityConfig.paper, "quick": MajorityConfig.quick,
           "three_d": MajorityConfig.three_d}


def main(argv: list[str] | None = None) -> None:
    """``python -m lncourse.majority --preset paper --out results/``."""
    parser = argparse.ArgumentParser(description="Train the majority models of chapter 3.")
    parser.add_argument("--preset", choices=sorted(PRESETS), default="paper")
    parser.add_argument("--out", default="results", help="folder for the history JSON")
    parser.add_argument("--steps", type=int, default=None, help="override the step count")
    parser.add_argument("--device", default=None, help="cpu, cuda, mps (default: best)")
    parser.add_argument("--variants", nargs="+", choices=M.ALL_VARIANTS, default=None,
                        help="override the preset's variants (chapter 3 adds "
                             "layernorm_released_scale to the paper's four)")
    args = parser.parse_args(argv)
    config = PRESETS[args.preset]()
    if args.steps is not None:
        config = dataclasses.replace(config, steps=args.steps)
    if args.variants is not None:
        config = dataclasses.replace(config, variants=tuple(args.variants))
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    t0 = time.perf_counter()
    history = train(config, device=args.device,
                    checkpoint_path=out / f"majority_{args.preset}.ckpt")
    history["seconds"] = time.perf_counter() - t0
    history["device"] = str(torch.device(args.device) if args.device else default_device())
    path = out / f"majority_{args.preset}.json"
    path.write_text(json.dumps(history))
    print(f"wrote {path} ({history['seconds']:.0f} s on {history['device']})")
