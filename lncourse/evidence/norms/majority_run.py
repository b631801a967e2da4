"""Training chapter 5's majority arms with lr tuned per arm, and the stored run (chapter 5).

Every (lr, arm, seed) of a configuration trains at once, stacked, in chapter 3's fused
path (:func:`lncourse.norms.majority.fused_loss`) with chapter 3's Adam (a learning rate
per model), batch order (one shuffled order per seed, shared by that seed's arms and
lrs) and data (the same dataset, data seed 0). The models of a seed start from chapter
3's ``layernorm`` weights of that seed, so every comparison is paired.

A model whose training loss turns non-finite stops there (its learning rate is set to 0,
its weights stay those of the last finite step) and ``diverged_at`` records the step; it
counts as never reaching the accuracy it had not reached. The summary
(:mod:`lncourse.evidence.norms.majority_report`) picks each arm's learning rate by a rule fixed
before the run (:data:`lncourse.evidence.norms.majority_report.SELECTION_RULE`). From the command line (resumable from its checkpoint)::

    python -m lncourse.evidence.norms.majority_run --preset reduced    # results/norms/majority_reduced.json
"""

from __future__ import annotations

import dataclasses
import json
import math
import numbers
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import torch

from lncourse.checkpoint import load_checkpoint, save_checkpoint
from lncourse.majority.config import PAPER_SEEDS
from lncourse.majority.train import (Adam, BatchOrder, training_tensors, lr_factor,
                                     restore_multiset)
from lncourse.norms import majority as arms_mod
from lncourse.progress import progress
from lncourse.results import RESULTS_DIR, command_line, run_arguments, run_started, store_run

__all__ = ["ArmsConfig", "test_data", "train", "PRESETS", "main"]

KIND = "norms_majority"


@dataclass(frozen=True)
class ArmsConfig:
    """One run: chapter 3's data and model, arms x learning rates x seeds side by side."""

    n_samples: int = 100_000
    seq_len: int = 50
    n_classes: int = 20
    min_margin: int = 6
    d_model: int = 8
    lrs: tuple[float, ...] = (3e-4, 1e-3, 3e-3, 1e-2)
    batch_size: int = 6000
    steps: int = 14_000
    schedule_epochs: int = 10_000     # chapter 3's linear decay (no warm-up)
    eval_every: int = 100
    eval_size: int | None = None      # test sequences per evaluation (a fixed random subset)
    seeds: tuple[int, ...] = PAPER_SEEDS
    arms: tuple[str, ...] = arms_mod.ALL_ARMS
    data_seed: int = 0

    def __post_init__(self):
        for a in self.arms:
            arms_mod.check_arm(a)
        for name in ("lrs", "seeds", "arms"):
            items = getattr(self, name)
            if not items or len(set(items)) != len(items):
                raise ValueError(f"{name} must be non-empty and must not repeat")
        for lr in self.lrs:
            if isinstance(lr, bool) or not isinstance(lr, numbers.Real) or \
                    not math.isfinite(lr) or lr <= 0:
                raise ValueError(f"each lr must be a finite positive number, got {lr!r}")
        for name in ("batch_size", "steps", "eval_every", "schedule_epochs", "n_samples"):
            v = getattr(self, name)
            if isinstance(v, bool) or not isinstance(v, numbers.Integral) or v < 1:
                raise ValueError(f"{name} must be a positive integer, got {v!r}")

    @classmethod
    def from_dict(cls, d: dict) -> ArmsConfig:
        return cls(**{k: tuple(v) if isinstance(v, list) else v for k, v in d.items()})

    @property
    def models(self) -> list[tuple[str, int, float]]:
        """(arm, seed, lr) of each model: lr outermost, seed innermost (model m reads the
        batch of seed m % n_seeds)."""
        return [(a, s, lr) for lr in self.lrs for a in self.arms for s in self.seeds]

    @classmethod
    def paper(cls) -> ArmsConfig:
        """The paper's settings (batch 6,000, up to 14,000 steps, the 10 paper seeds), 6
        arms x lr 3e-4 to 1 in factors of about 3 = 480 models, evaluated every 50 steps
        on the whole test set: for a GPU session (measured on this CPU: 13 ms of one core
        per model-step, about 25 h of one core for the 14,000 steps). In the reduced run
        the best lr was 1e-1 for five arms and 3e-1, its grid's top edge, for nGPT: hence
        the grid's reach."""
        return cls(lrs=(3e-4, 1e-3, 3e-3, 1e-2, 3e-2, 1e-1, 3e-1, 1.0), eval_every=50)

    @classmethod
    def reduced(cls) -> ArmsConfig:
        """A REDUCED run that one shared CPU core affords: batch 500, 300 steps, the 10
        paper seeds, 6 arms x lr 1e-2, 3e-2, 1e-1, 3e-1 (240 models), test accuracy every
        5 steps on a fixed random 4,000 of the 20,002 test sequences. Two earlier reduced
        runs were stopped early because their grids did not bracket the best lr: on lr
        1e-3..3e-2 (stopped at step 400) lr 3e-2 led every arm; on lr 3e-3..1e-1 (stopped
        at step 125, evaluated every 25 steps) lr 1e-1 led every arm and every arm was
        past 90% within about 100 steps. So this grid reaches 3e-1, the run is 300 steps
        (3 times what the fastest lr needed), and evaluations are 5 steps apart."""
        return cls(lrs=(1e-2, 3e-2, 1e-1, 3e-1), batch_size=500, steps=300,
                   eval_every=5, eval_size=4000)

    @classmethod
    def paper_batch(cls) -> ArmsConfig:
        """The paper's batch (6,000), data, seeds, optimiser and schedule, for the first
        600 of its 14,000 steps: 6 arms x lr 3e-3 to 1 (360 models), every 10 steps on the
        whole test set. What it measures, steps to 80% and 90% at each arm's chosen lr, is
        exactly what the 14,000-step run would measure wherever the chosen lr's seeds cross
        within the 600 steps: the schedule depends on the step, not on the run's length,
        so these 600 steps are that run's first 600. It leaves out lr 3e-4 and 1e-3 (the
        reduced run's best lr was 1e-1 or 3e-1 for every arm, and chapter 3's models at lr
        1e-3 need thousands of steps to reach 90%) and the end of training. About 1 h of
        one CPU core (measured: 12.5 ms of one core per model-step, 23 ms per model and
        evaluation of the whole test set)."""
        return cls(lrs=(3e-3, 1e-2, 3e-2, 1e-1, 3e-1, 1.0), steps=600, eval_every=10)

    @classmethod
    def tiny(cls) -> ArmsConfig:
        """For tests: 2 seeds, 2 lrs, 20 steps of batch 200, 500 test sequences."""
        return cls(lrs=(1e-3, 1e-2), batch_size=200, steps=20, eval_every=10,
                   eval_size=500, seeds=PAPER_SEEDS[:2])


def test_data(config: ArmsConfig, device="cpu") -> dict:
    """Chapter 3's train and test sets (data seed ``config.data_seed``); with
    ``eval_size``, a fixed random subset of the test set (seeded by the data seed; the
    first sequences by index would come from the first partitions only)."""
    data = training_tensors(dataclasses.replace(config, eval_size=None), torch.device(device))
    if config.eval_size:
        gen = torch.Generator().manual_seed(config.data_seed)
        keep = torch.randperm(len(data["test_labels"]), generator=gen)[:config.eval_size]
        keep = keep.sort().values.to(data["test_labels"].device)
        for k in ("test_counts", "test_labels", "test_tokens"):
            data[k] = data[k][keep]
    return data


def _evaluate(params, arms, data) -> torch.Tensor:
    _, acc = arms_mod.fused_loss(params, data["test_counts"].unsqueeze(0),
                                 data["test_labels"].unsqueeze(0), arms, backward=False)
    return acc


def train(config: ArmsConfig, *, device="cpu", checkpoint_path=None, show_progress=True,
          max_seconds: float | None = None) -> dict:
    """Train every model of ``config``; return the history (JSON-friendly): ``arm``,
    ``seed``, ``lr`` per model; ``step`` and, per evaluation, ``test_acc`` and
    ``train_loss`` (mean batch loss since the previous evaluation) per model;
    ``diverged_at`` per model (None, or the step whose loss was not finite);
    ``final_params``. With ``checkpoint_path`` the state is saved at every evaluation and
    resumed identically. ``max_seconds`` stops after the first evaluation past that time
    (the history then ends early; the checkpoint resumes it)."""
    device = torch.device(device)
    data = test_data(config, device)
    arms = tuple(a for a, _, _ in config.models)
    orders = [BatchOrder(s, len(data["train_labels"]), config.batch_size) for s in config.seeds]
    init = [arms_mod.initial_params(s, config.d_model, config.n_classes)
            for _, s, _ in config.models]
    params = {k: torch.stack([p[k] for p in init]).to(device).requires_grad_()
              for k in arms_mod.PARAM_NAMES}
    lrs = torch.tensor([lr for _, _, lr in config.models], device=device)
    opt = Adam(params, lrs)
    history = {"config": dataclasses.asdict(config), "arm": list(arms),
               "seed": [s for _, s, _ in config.models], "lr": [lr for *_, lr in config.models],
               "step": [], "train_loss": [], "test_acc": [], "diverged_at": [None] * len(arms)}
    start, elapsed = 0, 0.0
    state = load_checkpoint(checkpoint_path, kind=KIND) if checkpoint_path else None
    if state is not None:
        history, start, elapsed = restore_multiset(state, config, params, opt, orders,
                                                   checkpoint_path)
        lrs.copy_(state["lrs"])   # a diverged model's lr was set to 0: it stays stopped
    t0 = time.perf_counter()

    def checkpoint(step):
        save_checkpoint(checkpoint_path, {
            "config": dataclasses.asdict(config), "step": step, "history": history,
            "elapsed": elapsed + time.perf_counter() - t0, "lrs": lrs.cpu(),
            "params": {k: p.detach().cpu() for k, p in params.items()},
            "optimizer": opt.state(), "epoch_states": [o.epoch_state for o in orders]},
            kind=KIND)

    def batch(step):
        idx = torch.stack([o.indices(step) for o in orders]).to(device)     # (G, B)
        return data["train_counts"][idx], data["train_labels"][idx]

    def record(step, loss):
        history["step"].append(step)
        history["train_loss"].append([float(x) for x in loss])
        history["test_acc"].append([float(x) for x in _evaluate(params, arms, data)])

    if not history["step"]:
        c, y = batch(0)
        record(0, arms_mod.fused_loss(params, c, y, arms, backward=False)[0])
        if checkpoint_path:
            checkpoint(0)
    loss_sum = torch.zeros(len(arms), device=device)
    bar = progress(range(start, config.steps), total=config.steps, initial=start,
                   desc="norms majority", disable=not show_progress)
    for step in bar:
        c, y = batch(step)
        loss, _ = arms_mod.fused_loss(params, c, y, arms)
        grads = torch.autograd.grad(loss.sum(), list(params.values()), allow_unused=True)
        bad = ~torch.isfinite(loss.detach())
        for m in bad.nonzero().flatten().tolist():     # stop a diverged model here
            if history["diverged_at"][m] is None:
                history["diverged_at"][m] = step + 1
            lrs[m] = 0.0
        grads = [torch.zeros_like(p) if g is None else
                 torch.where(bad.view(-1, *[1] * (g.dim() - 1)), 0.0, g)
                 for g, p in zip(grads, params.values())]
        opt.step(dict(zip(params, grads)), lr_factor(step, config, orders[0].steps_per_epoch))
        loss_sum += torch.where(bad, 0.0, loss.detach())
        done = step + 1
        if done % config.eval_every == 0 or done == config.steps:
            record(done, loss_sum / (done - history["step"][-1]))
            loss_sum.zero_()
            if checkpoint_path:
                checkpoint(done)
            bar.set_postfix(acc=f"{sum(history['test_acc'][-1]) / len(arms):.3f}")
            if max_seconds is not None and time.perf_counter() - t0 > max_seconds:
                break
    bar.close()
    history["final_params"] = {k: p.detach().cpu().tolist() for k, p in params.items()}
    history["seconds"] = elapsed + time.perf_counter() - t0
    return history


PRESETS = {"paper": ArmsConfig.paper, "paper_batch": ArmsConfig.paper_batch,
           "reduced": ArmsConfig.reduced, "tiny": ArmsConfig.tiny}


def main(argv: list[str] | None = None) -> Path:
    """Train a preset and store ``results/norms/majority_<preset>.json`` with its
    provenance (:mod:`lncourse.evidence.norms.majority_report` summarises it)."""
    parser = run_arguments("lncourse.evidence.norms.majority_run", "Train chapter 5's majority arms "
                           "with lr tuned per arm and store the result.", PRESETS)
    parser.add_argument("--out", default=None)
    parser.add_argument("--max-seconds", type=float, default=None,
                        help="stop (resumably) after this much training time; the stored "
                        "file is then labelled INCOMPLETE")
    parser.add_argument("--export-partial", action="store_true",
                        help="do not train: store the history the checkpoint holds so far "
                        "(INCOMPLETE, with the weights at its last step)")
    args = parser.parse_args(argv)
    config = PRESETS[args.preset]()
    out = Path(args.out) if args.out else RESULTS_DIR / "norms" / f"majority_{args.preset}.json"
    ckpt = RESULTS_DIR / "checkpoints" / f"norms_majority_{out.stem}.ckpt"
    # --max-seconds says when to pause, not what runs: a run resumes without it
    words = list(sys.argv[1:] if argv is None else argv)
    if "--max-seconds" in words:
        del words[words.index("--max-seconds"):words.index("--max-seconds") + 2]
    command = command_line("lncourse.evidence.norms.majority_run",
                           [w for w in words if not w.startswith("--max-seconds=")])
    if args.export_partial:      # the run goes on elsewhere: store what its checkpoint holds
        state = load_checkpoint(ckpt, kind=KIND)
        if state is None or state["config"] != dataclasses.asdict(config):
            raise ValueError(f"{ckpt} holds no checkpoint of this configuration")
        history = state["history"]
        history["final_params"] = {k: p.tolist() for k, p in state["params"].items()}
        history["seconds"] = state["elapsed"]
        started = json.loads(Path(str(ckpt) + ".start.json").read_text())
    else:
        started = run_started(ckpt, command)
        history = train(config, device=args.device, checkpoint_path=ckpt,
                        show_progress=not args.quiet, max_seconds=args.max_seconds)
    history["complete"] = history["step"][-1] == config.steps
    return store_run(out, history, args.device, history.pop("seconds"), started,
                     "partial export; threads not recorded" if args.export_partial else None,
                     allow_dirty=args.allow_dirty)


if __name__ == "__main__":
    main()
