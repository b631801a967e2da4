"""Training the small language models of chapters 2 and 4 on Shakespeare."""

from __future__ import annotations

import os

import torch
from torch import Tensor, nn

from .checkpoint import load_checkpoint, save_checkpoint
from .progress import progress as progress_bar
from .text import sample_batch

__all__ = ["train_lm", "evaluate_lm"]


@torch.no_grad()
def evaluate_lm(model: nn.Module, ids: Tensor, *, batches: int, batch_size: int,
                block_size: int, seed: int, device: torch.device | str) -> float:
    """Mean next-token loss on ``batches`` windows drawn with a fixed seed."""
    was_training = model.training
    model.eval()
    gen = torch.Generator().manual_seed(seed)
    total = 0.0
    for _ in range(batches):
        x, y = sample_batch(ids, batch_size, block_size, gen, device)
        total += float(model(x, y)[1])
    model.train(was_training)
    return total / batches


def train_lm(model: nn.Module, train_ids: Tensor, test_ids: Tensor, *, steps: int,
             batch_size: int, block_size: int, lr: float = 3e-3, eval_every: int = 50,
             eval_batches: int = 8, seed: int = 0, device: torch.device | str = "cpu",
             checkpoint_path: str | os.PathLike | None = None, progress: bool = True
             ) -> dict[str, list]:
    """Train ``model`` with AdamW on random windows; return the loss history.

    History: ``step``, ``train_loss`` (mean over the steps since the last evaluation) and
    ``test_loss`` (on the same fixed test windows every time). With ``checkpoint_path``
    the state is saved at every evaluation and an interrupted run resumes from it.
    """
    if steps <= 0 or eval_every <= 0:
        raise ValueError("steps and eval_every must be positive")
    model.to(device).train()
    opt = torch.optim.AdamW(model.parameters(), lr=lr, weight_decay=0.0)
    gen = torch.Generator().manual_seed(seed)
    history: dict[str, list] = {"step": [], "train_loss": [], "test_loss": []}
    start = 0
    state = load_checkpoint(checkpoint_path) if checkpoint_path else None
    if state is not None:
        model.load_state_dict(state["model"])
        opt.load_state_dict(state["optimizer"])
        gen.set_state(state["generator"])
        history, start = state["history"], state["step"]

    def evaluate() -> float:
        return evaluate_lm(model, test_ids, batches=eval_batches, batch_size=batch_size,
                           block_size=block_size, seed=seed + 1, device=device)

    if start == 0 and not history["step"]:
        history["step"].append(0)
        history["train_loss"].append(evaluate_lm(model, train_ids, batches=eval_batches,
                                                 batch_size=batch_size, block_size=block_size,
                                                 seed=seed + 2, device=device))
        history["test_loss"].append(evaluate())
    running, count = 0.0, 0
    bar = progress_bar(range(start, steps), desc="training", disable=not progress)
    for step in bar:
        x, y = sample_batch(train_ids, batch_size, block_size, gen, device)
        _, loss, _ = model(x, y)
        if not torch.isfinite(loss.detach()):
            raise FloatingPointError(f"the loss became {float(loss)} at step {step}; "
                                     "lower the learning rate")
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        running, count = running + loss.item(), count + 1
        if (step + 1) % eval_every == 0 or step + 1 == steps:
            history["step"].append(step + 1)
            history["train_loss"].append(running / count)
            history["test_loss"].append(evaluate())
            running, count = 0.0, 0
            bar.set_postfix(train=f"{history['train_loss'][-1]:.3f}",
                            test=f"{history['test_loss'][-1]:.3f}")
            if checkpoint_path:
                save_checkpoint(checkpoint_path, {
                    "model": model.state_dict(), "optimizer": opt.state_dict(),
                    "generator": gen.get_state(), "history": history, "step": step + 1})
    return history
