"""Explicit randomness: checked seeds, private generators, the global state left alone.

PyTorch's CPU generator (a Mersenne Twister) keeps only the low 32 bits of a seed, so
``manual_seed(2**32 + 5)`` draws exactly what ``manual_seed(5)`` draws. Library code
therefore refuses seeds outside [0, 2**32), draws from a ``torch.Generator`` it owns,
and initialises modules inside :func:`seeded`, which restores the caller's global state.
"""

from __future__ import annotations

import contextlib
import numbers
from collections.abc import Iterator

import torch

__all__ = ["SEED_LIMIT", "check_seed", "generator", "seeded"]

SEED_LIMIT = 2**32   # seeds at or above this alias smaller ones in torch's CPU generator


def check_seed(seed, name: str = "seed", offset: int = 0) -> int:
    """Return ``seed`` as an int, or raise if ``seed + offset`` would alias another seed.

    ``offset``: the largest amount the caller adds to the seed for its other streams.
    """
    if isinstance(seed, bool) or not isinstance(seed, numbers.Integral):
        raise ValueError(f"{name} must be an integer, got {seed!r}")
    if not 0 <= int(seed) < SEED_LIMIT - offset:
        raise ValueError(f"{name} must be in [0, {SEED_LIMIT - offset}) (torch keeps only 32 "
                         f"bits of a seed, so larger seeds repeat smaller ones); got {seed}")
    return int(seed)


def generator(seed: int, name: str = "seed") -> torch.Generator:
    """A CPU ``torch.Generator`` seeded with a checked ``seed``."""
    return torch.Generator().manual_seed(check_seed(seed, name))


@contextlib.contextmanager
def seeded(seed: int, name: str = "seed") -> Iterator[None]:
    """Run the block with the global CPU RNG seeded, then restore the caller's state.

    For code that draws from the global RNG by design, such as ``nn.Module`` initialisers.
    """
    seed = check_seed(seed, name)
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        yield
