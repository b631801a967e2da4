"""Training many of chapter 2's GPTs at once: seeds and variants as one batched model.

:func:`train_fused` trains M models (:mod:`lncourse.evidence.selectability.fused`) with AdamW in
one loop. Model m reads the windows of its data seed, drawn exactly as
:func:`lncourse.lm.train_lm` draws them for that seed, so each model's history and
weights are those it would have trained alone (the tests hold them equal in float64);
models that share a seed share their windows. With a checkpoint path it saves its state
at every evaluation and resumes an interrupted run to the same history (a checkpoint of
another :data:`~lncourse.evidence.selectability.fused.NUMERICS` is refused); it also keeps
the weights at ``snapshot_steps`` (what the fraction-against-step curve is measured on).
Shapes: token streams (N,); windows (M, B, T).
"""

from __future__ import annotations

import math
import os
import time

import torch
from torch import Tensor

from lncourse.checkpoint import load_checkpoint, save_checkpoint
from lncourse.lm import TRACE_STEPS, data_fingerprint, describe_model
from lncourse.progress import progress as progress_bar
from lncourse.rng import check_seed
from lncourse.evidence.selectability.fused import NUMERICS, fused_losses, scaling_flags, stack_models
from lncourse.text import sample_batch
from lncourse.transformer import GPT

__all__ = ["train_fused", "fused_evaluate"]


def _windows(ids: Tensor, gens: dict[int, torch.Generator], seeds: list[int],
             batch_size: int, block_size: int, device=None) -> tuple[Tensor, Tensor]:
    """One batch per distinct seed (drawn in the order of ``gens``, on the CPU), laid out
    per model, on ``device`` (the parameters'; default: where ``ids`` are)."""
    drawn = {s: sample_batch(ids, batch_size, block_size, g) for s, g in gens.items()}
    return (torch.stack([drawn[s][0] for s in seeds]).to(device),
            torch.stack([drawn[s][1] for s in seeds]).to(device))


@torch.no_grad()
def fused_evaluate(params: dict[str, Tensor], scale: Tensor, n_heads: int, ids: Tensor,
                   seeds: list[int], *, batches: int, batch_size: int, block_size: int,
                   offset: int) -> list[float]:
    """Each model's mean loss on ``batches`` windows of ``ids`` drawn with the generator
    of its seed + ``offset``: what :func:`lncourse.lm.evaluate_lm` gives it alone."""
    gens = {s: torch.Generator().manual_seed(s + offset) for s in dict.fromkeys(seeds)}
    total = [0.0] * len(seeds)
    device = next(iter(params.values())).device
    for _ in range(batches):
        x, y = _windows(ids, gens, seeds, batch_size, block_size, device)
        for m, loss in enumerate(fused_losses(params, scale, x, y, n_heads).tolist()):
            total[m] += loss
    return [t / batches for t in total]


def train_fused(models: list[GPT], seeds: list[int], train_ids: Tensor, test_ids: Tensor,
                *, steps: int, batch_size: int, block_size: int, lr: float,
                eval_every: int = 50, eval_batches: int = 8,
                snapshot_steps: tuple[int, ...] | None = None,
                checkpoint_path: str | os.PathLike | None = None, progress: bool = True,
                timing: dict | None = None, _on_step=None) -> dict:
    """Train ``models`` (model m on the windows of data seed ``seeds[m]``) together.

    Returns ``histories`` (one per model, as :func:`lncourse.lm.train_lm` returns them),
    ``params`` (the stacked final weights, {name: (M, ...)}), ``snapshots`` ({step:
    stacked float32 weights} at those of ``snapshot_steps`` reached, evaluation steps
    only) and ``steps_done``. ``timing`` receives ``seconds`` (all sessions) and
    ``session_seconds``.
    """
    if len(seeds) != len(models):
        raise ValueError(f"one seed per model: {len(seeds)} seeds for {len(models)} models")
    for name, value in (("steps", steps), ("batch_size", batch_size),
                        ("block_size", block_size), ("eval_every", eval_every),
                        ("eval_batches", eval_batches)):
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise ValueError(f"{name} must be a positive integer, got {value!r}")
    if isinstance(lr, bool) or not isinstance(lr, (int, float)) or not math.isfinite(lr) \
            or lr <= 0:
        raise ValueError(f"lr must be a finite positive number, got {lr!r}")
    seeds = [check_seed(s, offset=2) for s in seeds]
    params = stack_models(models)          # on the models' device (a GPU, say)
    device = next(iter(params.values())).device
    scale = scaling_flags(models).to(device)
    n_heads = models[0].cfg.n_heads
    snapshot_steps = tuple(sorted(set(snapshot_steps or ())))
    config = {"lr": float(lr), "batch_size": batch_size, "block_size": block_size,
              "steps": steps, "eval_every": eval_every, "eval_batches": eval_batches,
              "seeds": list(seeds), "data": data_fingerprint(train_ids, test_ids),
              "models": [describe_model(m) for m in models],
              "snapshot_steps": list(snapshot_steps), "numerics": NUMERICS}
    opt = torch.optim.AdamW(list(params.values()), lr=lr, weight_decay=0.0)
    gens = {s: torch.Generator().manual_seed(s) for s in dict.fromkeys(seeds)}
    M = len(models)
    histories = [{"step": [], "train_loss": [], "test_loss": [], "trace": []}
                 for _ in range(M)]
    snapshots: dict[int, dict[str, Tensor]] = {}
    start, elapsed, t0 = 0, 0.0, time.perf_counter()
    state = load_checkpoint(checkpoint_path, kind="lm_fused") if checkpoint_path else None
    if state is not None:
        differ = sorted(k for k in config.keys() | state["config"].keys()
                        if config.get(k) != state["config"].get(k))
        if differ:
            raise ValueError(f"{checkpoint_path} holds another run (it differs in "
                             f"{', '.join(differ)}); delete it or choose another path")
        with torch.no_grad():
            for k, p in params.items():
                p.copy_(state["params"][k])
        opt.load_state_dict(state["optimizer"])
        for s, g in gens.items():
            g.set_state(state["generators"][str(s)])
        histories, start, elapsed = state["histories"], state["step"], state["elapsed"]
        snapshots = {int(k): v for k, v in state["snapshots"].items()}

    def evaluate(ids: Tensor, offset: int) -> list[float]:
        return fused_evaluate(params, scale, n_heads, ids, seeds, batches=eval_batches,
                              batch_size=batch_size, block_size=block_size, offset=offset)

    def record(step: int, train_losses: list[float]) -> None:
        for h, tr, te in zip(histories, train_losses, evaluate(test_ids, 1)):
            h["step"].append(step)
            h["train_loss"].append(tr)
            h["test_loss"].append(te)
        if step in snapshot_steps:
            snapshots[step] = {k: p.detach().float().clone() for k, p in params.items()}

    def save(step: int) -> None:
        if checkpoint_path:
            save_checkpoint(checkpoint_path, {
                "config": config, "params": {k: p.detach() for k, p in params.items()},
                "optimizer": opt.state_dict(),
                "generators": {str(s): g.get_state() for s, g in gens.items()},
                "histories": histories, "snapshots": {str(k): v for k, v in snapshots.items()},
                "step": step, "elapsed": elapsed + time.perf_counter() - t0}, kind="lm_fused")

    if start == 0 and not histories[0]["step"]:
        record(0, evaluate(train_ids, 2))
        save(0)
    running, count = [0.0] * M, 0
    bar = progress_bar(range(start, steps), total=steps, initial=start,
                       desc=f"training {M} models", disable=not progress)
    for step in bar:
        if _on_step is not None:
            _on_step(step)
        x, y = _windows(train_ids, gens, seeds, batch_size, block_size, device)
        losses = fused_losses(params, scale, x, y, n_heads)
        values = losses.tolist()
        bad = [m for m, v in enumerate(values) if not math.isfinite(v)]
        if bad:
            raise FloatingPointError(f"the loss of model {bad[0]} became {values[bad[0]]} "
                                     f"at step {step}; lower the learning rate")
        opt.zero_grad(set_to_none=True)
        losses.sum().backward()
        opt.step()
        running, count = [r + v for r, v in zip(running, values)], count + 1
        if step < TRACE_STEPS:
            for h, v in zip(histories, values):
                h["trace"].append(v)
        if (step + 1) % eval_every == 0 or step + 1 == steps:
            record(step + 1, [r / count for r in running])
            running, count = [0.0] * M, 0
            bar.set_postfix(test=f"{min(h['test_loss'][-1] for h in histories):.3f}")
            save(step + 1)
    if timing is not None:
        timing["session_seconds"] = time.perf_counter() - t0
        timing["seconds"] = elapsed + timing["session_seconds"]
    return {"histories": histories, "params": {k: p.detach() for k, p in params.items()},
            "snapshots": snapshots, "steps_done": steps}
