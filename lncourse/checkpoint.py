"""Checkpoints that survive interruption and load safely."""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

import torch


def save_checkpoint(path: str | os.PathLike, state: dict) -> None:
    """Write ``state`` to ``path`` atomically.

    The file is written next to its destination and then renamed, so an interruption
    mid-write leaves the previous checkpoint intact. ``state`` must hold only tensors,
    numbers, strings, lists and dicts, which is what :func:`load_checkpoint` accepts.
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=path.name, suffix=".tmp")
    os.close(fd)
    try:
        torch.save(state, tmp)
        os.replace(tmp, path)
    finally:
        if os.path.exists(tmp):
            os.remove(tmp)


def load_checkpoint(path: str | os.PathLike) -> dict | None:
    """Load a checkpoint written by :func:`save_checkpoint`, or ``None`` if there is none.

    Uses ``torch.load(..., weights_only=True)``: a checkpoint cannot run code on load.
    """
    path = Path(path)
    if not path.exists():
        return None
    return torch.load(path, map_location="cpu", weights_only=True)
