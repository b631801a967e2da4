"""Training throughput on majority: the batched trainer against the straightforward loop.

The straightforward loop trains one released model (an ``nn.TransformerEncoderLayer``,
token by token) after another, each with its own Adam. The batched trainer stacks the
weights of all of them and runs one step on class counts
(:func:`lncourse.majority.multiset_forward`). Both see the same data in the same batch
size; the script reports model-steps per second and their ratio, measured in one run,
alternating the two so that a noisy neighbour on a shared machine hits both alike.

    python benchmarks/majority_throughput.py --seeds 10 --batch-size 1000 --steps 20
"""

from __future__ import annotations

import argparse
import time

import torch
import torch.nn.functional as F

from lncourse import majority as M
from lncourse.device import default_device
from lncourse.majority_train import initial_model


def straightforward(models, tokens, labels, batches, device) -> float:
    """Seconds to train each model on its batches (n_steps, B), one model after another."""
    start = time.perf_counter()
    for model, own_batches in zip(models, batches):
        opt = torch.optim.Adam(model.parameters(), lr=1e-3)
        for idx in own_batches:
            x, y = tokens[idx], labels[idx]
            logits = model(x)                                         # (B, T, C)
            loss = F.cross_entropy(logits.reshape(-1, logits.shape[-1]),
                                   y[:, None].expand_as(x).reshape(-1))
            opt.zero_grad(set_to_none=True)
            loss.backward()
            opt.step()
    if device.type == "cuda":
        torch.cuda.synchronize()
    return time.perf_counter() - start


def batched(models, counts, labels, batches, device) -> float:
    """Seconds to train all models together; batches: (n_models, n_steps, B)."""
    variants = tuple(m.variant for m in models)
    params = {k: t.to(device).requires_grad_() for k, t in M.stack_params(models).items()}
    opt = torch.optim.Adam(list(params.values()), lr=1e-3)
    start = time.perf_counter()
    for step in range(batches.shape[1]):
        idx = batches[:, step]                                         # (M, B)
        loss = M.multiset_loss(*M.multiset_forward(params, counts[idx], variants), labels[idx])
        opt.zero_grad(set_to_none=True)
        loss.sum().backward()
        opt.step()
    if device.type == "cuda":
        torch.cuda.synchronize()
    return time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, default=10)
    parser.add_argument("--batch-size", type=int, default=1000)
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--variant", default="layernorm")
    args = parser.parse_args()
    device = default_device()
    tokens, labels = M.make_dataset(seed=0)
    counts = M.class_counts(tokens, 20)
    tokens, labels, counts = tokens.to(device), labels.to(device), counts.to(device)
    gen = torch.Generator().manual_seed(0)
    # every seed draws its own batches, as in the trainer
    batches = torch.stack([torch.stack([torch.randperm(len(labels), generator=gen)[:args.batch_size]
                                        for _ in range(args.steps)])
                           for _ in range(args.seeds)]).to(device)   # (seeds, steps, B)
    config = M.MajorityConfig()
    model_steps = args.seeds * args.steps
    slow, fast = [], []
    for _ in range(args.rounds):  # alternate: both suffer the same background load
        models = [initial_model(args.variant, s, config).to(device) for s in range(args.seeds)]
        slow.append(straightforward(models, tokens, labels, batches, device))
        models = [initial_model(args.variant, s, config) for s in range(args.seeds)]
        fast.append(batched(models, counts, labels, batches, device))
    t_slow, t_fast = min(slow), min(fast)
    print(f"device {device}, {torch.get_num_threads()} threads, {args.seeds} seeds, batch "
          f"{args.batch_size}, {args.steps} steps, best of {args.rounds} rounds")
    print(f"straightforward loop (nn.TransformerEncoderLayer, one model at a time): "
          f"{model_steps / t_slow:8.1f} model-steps/s")
    print(f"batched trainer (stacked weights, class counts):                  "
          f"{model_steps / t_fast:8.1f} model-steps/s")
    print(f"ratio: {t_slow / t_fast:.1f}x")


if __name__ == "__main__":
    main()
