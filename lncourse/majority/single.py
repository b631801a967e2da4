"""One majority model trained alone, the straightforward way (chapter 3): the reference
the batched trainer of :mod:`lncourse.majority.train` is tested against.

:func:`train_single` runs the released ``nn.TransformerEncoderLayer`` token by token with
``torch.optim.Adam`` and its learning-rate schedule, from the same data, initial weights
and batch order as the batched trainer gives the same model, and returns a history with
the same keys. The tests hold the two equal to 1e-9 in float64.
"""

from __future__ import annotations

import dataclasses
import math

import torch
from torch import Tensor

from lncourse.majority import task as majority
from lncourse.majority.config import MajorityConfig
from lncourse.majority.train import (
    TRACE_STEPS, BatchOrder, training_tensors, empty_history, lr_factor,
    record_evaluation, initial_model)
from lncourse.progress import progress

__all__ = ["train_single"]


def train_single(config: MajorityConfig, variant: str, seed: int, *,
                 device: torch.device | str = "cpu", dtype: torch.dtype = torch.float32,
                 steps: int | None = None, show_progress: bool = False) -> dict:
    """The straightforward way: one released model, token by token, ``torch.optim.Adam``.

    Same data, initial weights, batch order and schedule as model (variant, seed) of
    :func:`train` (at ``config``'s first learning rate), so the two histories agree up to
    rounding. Returns the same keys, each holding one model.
    """
    device = torch.device(device)
    cfg = dataclasses.replace(config, seeds=(seed,), variants=(variant,),
                              lr=config.lrs[0], steps=steps or config.steps)
    data = training_tensors(cfg, device)
    model = initial_model(variant, seed, cfg).to(device=device, dtype=dtype)
    opt = torch.optim.Adam(model.parameters(), lr=cfg.lr)
    sched = torch.optim.lr_scheduler.LambdaLR(
        opt, lambda step: lr_factor(step, cfg, math.ceil(len(data["train_labels"])
                                                          / cfg.batch_size)))
    order = BatchOrder(seed, len(data["train_labels"]), cfg.batch_size)
    loss_fn = torch.nn.CrossEntropyLoss()
    history = empty_history(cfg)

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
        q = majority.effective_queries(model.embedding.weight, model.layer.self_attn.in_proj_weight,
                                variant, model.layer.norm1.gain)
        angle = (majority.query_angles(q) * weight).sum() / weight.sum()
        return torch.tensor([correct / x.numel()], dtype=torch.float64), angle.reshape(1)

    with torch.no_grad():
        loss0 = token_loss(0)
    record_evaluation(history, 0, loss0.reshape(1), *evaluate())
    loss_sum = 0.0
    for step in progress(range(cfg.steps), desc=f"{variant} {seed}", disable=not show_progress):
        loss = token_loss(step)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        sched.step()
        loss_sum += loss.item()
        done = step + 1
        if done <= TRACE_STEPS:
            history["trace"]["step"].append(done)
            history["trace"]["train_loss"].append([loss.item()])
        if done % cfg.eval_every == 0 or done == cfg.steps:
            n = done - history["step"][-1]
            record_evaluation(history, done, torch.tensor([loss_sum / n], dtype=torch.float64), *evaluate())
            loss_sum = 0.0
    history["final_params"] = {k: p.detach().cpu().unsqueeze(0).tolist()
                               for k, p in majority.get_params(model).items()}
    return history
