"""The data of the "majority" task (chapter 3): sequences generated as the released code
generates them, seeded; their class counts; a stratified train/test split.

Dimension names: N sequences, T positions, C classes.
"""

from __future__ import annotations

import functools

import numpy as np
import torch
from torch import Tensor

__all__ = ["make_dataset", "class_counts", "stratified_split"]


def _partitions(n: int, min_part: int, slices: int, rng: np.random.Generator):
    """Partitions of ``n`` in the released code's order: parts non-decreasing, at most
    ``slices`` of them, the candidates for each part visited in a shuffled order.

    Like the release, the last slot takes whatever remains even when it is smaller than
    the part before it; such partitions fail the margin test and are dropped later.
    """
    if n == 0:
        yield []
        return
    if slices == 1:
        yield [n]
        return
    candidates = np.arange(min_part, n + 1)
    rng.shuffle(candidates)
    for first in candidates:
        first = int(first)
        for rest in _partitions(n - first, first, slices - 1, rng):
            yield [first] + rest


def make_dataset(n_samples: int = 100_000, seq_len: int = 50, n_classes: int = 20,
                 min_margin: int = 6, per_partition: int = 10,
                 seed: int = 0) -> tuple[Tensor, Tensor]:
    """Majority sequences generated as the released code does, but seeded.

    Partitions of ``seq_len`` into at most ``n_classes`` parts are enumerated depth first
    in a shuffled order; a partition is kept when its largest part beats the second
    largest by at least ``min_margin``. Each kept partition gives ``per_partition``
    sequences, each assigning distinct random classes to the parts (tokens sit in sorted
    blocks: without positions the order does not matter). Generation stops once more
    than ``n_samples`` sequences exist (the release's rule, hence 100,010 by default).

    Returns ``tokens`` (N, seq_len) and ``labels`` (N,), both int64.
    """
    for name, value, low in (("n_samples", n_samples, 1), ("seq_len", seq_len, 2),
                             ("n_classes", n_classes, 2), ("min_margin", min_margin, 1),
                             ("per_partition", per_partition, 1)):
        if not isinstance(value, (int, np.integer)) or value < low:
            raise ValueError(f"{name} must be an integer >= {low}, got {value!r}")
    if seq_len < min_margin + 2:
        # The best split is a majority of seq_len - 1 against one token: a margin of
        # seq_len - 2. Refuse now rather than after enumerating every partition.
        raise ValueError(f"no sequence of length {seq_len} has a majority margin of "
                         f"{min_margin} (at most {seq_len - 2}); lower min_margin")
    sizes = tuple(map(int, (n_samples, seq_len, n_classes, min_margin, per_partition)))
    if not isinstance(seed, (int, np.integer)):   # None, a generator: nothing to reuse
        return _dataset.__wrapped__(*sizes, seed)
    return tuple(t.clone() for t in _dataset(*sizes, int(seed)))


@functools.lru_cache(maxsize=4)   # 0.9 s of CPU at the default size, asked for often
def _dataset(n_samples, seq_len, n_classes, min_margin, per_partition, seed):
    rng = np.random.default_rng(seed)
    blocks = []
    for part in _partitions(seq_len, 1, min(seq_len, n_classes), rng):
        if len(part) == 1 or part[-1] - part[-2] < min_margin:
            continue  # a single class, or no clear majority
        seqs = np.zeros((per_partition, seq_len), dtype=np.int64)
        for i in range(per_partition):
            perm = rng.permutation(n_classes)
            seqs[i] = np.repeat(perm[: len(part)], part)
        blocks.append(seqs)
        if len(blocks) * per_partition > n_samples:
            break
    if not blocks:
        raise ValueError(f"no partition of {seq_len} into at most {n_classes} parts has a "
                         f"margin of {min_margin}; lower min_margin")
    tokens = torch.from_numpy(np.concatenate(blocks))
    labels = class_counts(tokens, n_classes).argmax(dim=1)
    return tokens, labels


def class_counts(tokens: Tensor, n_classes: int) -> Tensor:
    """How often each class occurs in each sequence: (N, T) int -> (N, C) int64."""
    if tokens.dim() != 2 or tokens.dtype not in (torch.int64, torch.int32):
        raise TypeError(f"tokens must be an integer tensor of shape (N, T), got "
                        f"{tokens.dtype} {tuple(tokens.shape)}")
    if tokens.numel() and (tokens.min() < 0 or tokens.max() >= n_classes):
        raise ValueError(f"tokens must lie in [0, {n_classes})")
    counts = torch.zeros(tokens.shape[0], n_classes, dtype=torch.int64, device=tokens.device)
    return counts.scatter_add_(1, tokens.long(), torch.ones_like(tokens, dtype=torch.int64))


def stratified_split(labels: Tensor, test_fraction: float = 0.2,
                     seed: int = 0) -> tuple[Tensor, Tensor]:
    """Indices ``(train_idx, test_idx)`` with each label split in the same proportion.

    For every label, ``round(test_fraction * count)`` of its sequences, drawn at random,
    go to the test set (the release uses scikit-learn's stratified 80/20 split).
    """
    if not 0.0 < test_fraction < 1.0:
        raise ValueError(f"test_fraction must be in (0, 1), got {test_fraction}")
    gen = torch.Generator().manual_seed(seed)
    labels = labels.cpu()
    train, test = [], []
    for label in torch.unique(labels):
        idx = torch.nonzero(labels == label).squeeze(1)
        idx = idx[torch.randperm(len(idx), generator=gen)]
        n_test = int(round(test_fraction * len(idx)))
        test.append(idx[:n_test])
        train.append(idx[n_test:])
    return torch.cat(train).sort().values, torch.cat(test).sort().values
