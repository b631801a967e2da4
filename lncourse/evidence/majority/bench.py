"""How fast each way of training the majority models runs, measured side by side.

Four ways to take the same training steps, from the same initial weights, on the same
batches (chapter 3 explains them):

- ``straightforward``: the released model (``nn.TransformerEncoderLayer``) token by token,
  one model after another, each with ``torch.optim.Adam``;
- ``previous``: all models stacked and trained at once on class counts by the readable
  :func:`lncourse.majority.multiset.multiset_forward` (autograd over a (pairs x classes) softmax),
  with ``torch.optim.Adam`` (the course's trainer before the fused engine);
- ``previous_tuned``: the same with glibc's allocator tuned (see :func:`compare`);
- ``fused``: the trainer's path, :func:`lncourse.majority.multiset.multiset_loss` with its
  hand-written backward and the per-model Adam of :mod:`lncourse.majority.train`.

:func:`compare` runs each in a fresh process, alternates them round after round so that
background load hits all alike, synchronises CUDA before reading a clock, and checks that
they end with the same losses. ``benchmarks/majority_throughput.py`` is its command line.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time

import torch
import torch.nn.functional as F

from lncourse.majority import multiset as MS, multiset_fused as FUSED, task as majority
from lncourse.majority.config import PAPER_SEEDS, MajorityConfig
from lncourse.majority.train import Adam, initial_model

__all__ = ["compare", "measure", "METHODS"]

METHODS = ("straightforward", "previous", "previous_tuned", "fused")


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def _straightforward(models, tokens, labels, batches, device) -> list[float]:
    """Each model alone, token by token; returns each model's last loss."""
    last = []
    for model, own in zip(models, batches):
        opt = torch.optim.Adam(model.parameters(), lr=1e-3)
        for idx in own:                                                  # (B,)
            x, y = tokens[idx], labels[idx]
            logits = model(x)                                            # (B, T, C)
            loss = F.cross_entropy(logits.reshape(-1, logits.shape[-1]),
                                   y[:, None].expand_as(x).reshape(-1))
            opt.zero_grad(set_to_none=True)
            loss.backward()
            opt.step()
        last.append(float(loss.detach()))
    return last


def _stacked(models, counts, labels, batches, device, fused: bool) -> list[float]:
    """All models at once; batches (G, steps, B) with model m reading batch m % G."""
    variants = tuple(m.variant for m in models)
    params = {k: t.to(device).requires_grad_() for k, t in majority.stack_params(models).items()}
    if fused:
        opt = Adam(params, torch.full((len(models),), 1e-3, device=device))
    else:
        opt = torch.optim.Adam(list(params.values()), lr=1e-3)
    for step in range(batches.shape[1]):
        idx = batches[:, step]                                           # (G, B)
        c, y = counts[idx], labels[idx]
        if fused:
            loss = FUSED.multiset_loss(params, c, y, variants)
            grads = torch.autograd.grad(loss.sum(), list(params.values()))
            opt.step(dict(zip(params, grads)), 1.0)
        else:
            loss, _ = MS.multiset_loss_and_accuracy(*MS.multiset_forward(params, c, variants), y)
            opt.zero_grad(set_to_none=True)
            loss.sum().backward()
            opt.step()
    return loss.detach().cpu().tolist()


def measure(method: str, n_seeds: int, variants: tuple[str, ...], batch_size: int, steps: int,
            device: torch.device | str = "cpu",
            straightforward_models: int | None = None) -> dict:
    """Seconds per step of one method, in this process: ``steps`` steps of every model
    (the straightforward loop: of its first ``straightforward_models``, scaled to all) from
    the same initial weights on the same batches. Returns seconds_per_step and last_loss."""
    device = torch.device(device)
    config = MajorityConfig(seeds=PAPER_SEEDS[:n_seeds], variants=tuple(variants))
    tokens, labels = majority.make_dataset(seed=config.data_seed)
    counts = majority.class_counts(tokens, config.n_classes)
    tokens, labels, counts = tokens.to(device), labels.to(device), counts.to(device)
    gen = torch.Generator().manual_seed(0)
    batches = torch.stack([torch.stack([torch.randperm(len(labels), generator=gen)[:batch_size]
                                        for _ in range(steps)])
                           for _ in config.seeds]).to(device)           # (G, steps, B)
    n_models = len(config.models)

    def fresh():
        return [initial_model(v, s, config).to(device) for v, s, _ in config.models]

    # One untimed step first (thread pools, first allocations), as in a long run.
    if method == "straightforward":
        _straightforward(fresh()[:1], tokens, labels, [batches[0, :1]], device)
    else:
        _stacked(fresh(), counts, labels, batches[:, :1], device, fused=method == "fused")
    models = fresh()
    _sync(device)
    start = time.perf_counter()
    if method == "straightforward":
        n = min(straightforward_models or n_models, n_models)
        last = _straightforward(models[:n], tokens, labels,
                                [batches[m % n_seeds] for m in range(n)], device)
        _sync(device)
        elapsed = (time.perf_counter() - start) * n_models / n
    else:
        last = _stacked(models, counts, labels, batches, device, fused=method == "fused")
        _sync(device)
        elapsed = time.perf_counter() - start
    return {"seconds_per_step": elapsed / steps, "last_loss": last}


def compare(n_seeds: int = 10,
            variants: tuple[str, ...] = majority.VARIANTS + majority.CONTROL_VARIANTS,
            batch_size: int = 6000, steps: int = 3, rounds: int = 2,
            methods: tuple[str, ...] = METHODS, device: torch.device | str = "cpu",
            straightforward_models: int | None = None) -> dict:
    """Seconds per training step of ``n_seeds x len(variants)`` majority models.

    Each (round, method) runs in a fresh Python process, as a training run would: a
    process's memory allocator remembers earlier work, and the previous formulation was
    measured twice as fast after the straightforward loop had run in the same process.
    ``previous_tuned`` is the previous formulation with glibc's allocator told to keep
    memory instead of returning it (``MALLOC_MMAP_THRESHOLD_``, ``MALLOC_TRIM_THRESHOLD_``),
    to show what that alone buys. Rounds alternate the methods, so that background load
    hits all alike; the best round is kept. Returns ``seconds_per_step`` (and every
    round's), ``last_loss`` per method, the largest loss difference to the fused path,
    and the setting.
    """
    unknown = set(methods) - set(METHODS)
    if unknown or not methods:
        raise ValueError(f"methods must be taken from {METHODS}, got {methods}")
    if n_seeds < 1 or n_seeds > len(PAPER_SEEDS) or steps < 1 or rounds < 1:
        raise ValueError("need 1 <= n_seeds <= 10 and at least one step and one round")
    every = {m: [] for m in methods}
    last = {}
    for _ in range(rounds):
        for method in methods:
            out = _in_fresh_process(method, n_seeds, tuple(variants), batch_size, steps,
                                    str(device), straightforward_models)
            every[method].append(out["seconds_per_step"])
            last[method] = out["last_loss"]
    reference = last.get("fused")
    diff = {m: max(abs(a - b) for a, b in zip(v, reference)) for m, v in last.items()} \
        if reference is not None else {}
    n_models = n_seeds * len(variants)
    return {"seconds_per_step": {m: min(v) for m, v in every.items()},
            "seconds_per_step_each_round": every, "last_loss": last,
            "max_loss_diff_to_fused": diff, "n_models": n_models,
            "straightforward_models": min(straightforward_models or n_models, n_models),
            "batch_size": batch_size, "steps": steps, "rounds": rounds,
            "variants": list(variants), "n_seeds": n_seeds,
            "threads": torch.get_num_threads(), "device": str(device)}


_TUNED_MALLOC = {"MALLOC_MMAP_THRESHOLD_": str(2**32), "MALLOC_TRIM_THRESHOLD_": str(2**32)}


def _in_fresh_process(method, n_seeds, variants, batch_size, steps, device, plain_models):
    env = dict(os.environ, **(_TUNED_MALLOC if method == "previous_tuned" else {}))
    args = json.dumps([method.removesuffix("_tuned"), n_seeds, variants, batch_size, steps,
                       device, plain_models])
    done = subprocess.run([sys.executable, "-m", "lncourse.evidence.majority.bench", args], env=env,
                          capture_output=True, text=True, check=False)
    if done.returncode:
        raise RuntimeError(f"measuring {method} failed:\n{done.stderr[-2000:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])


if __name__ == "__main__":   # one measurement, for compare(): arguments as a JSON list
    print(json.dumps(measure(*json.loads(sys.argv[1]))))
