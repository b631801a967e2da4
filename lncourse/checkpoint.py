"""Checkpoints that survive interruption and load safely (shared by every trainer)."""

from __future__ import annotations

import os
import pickle
import tempfile
import zipfile
from pathlib import Path

import torch

__all__ = ["save_checkpoint", "load_checkpoint", "CheckpointError"]


class CheckpointError(ValueError):
    """A checkpoint file that cannot be used; the message names the file and what to do."""


def save_checkpoint(path: str | os.PathLike, state: dict, kind: str | None = None) -> None:
    """Write ``state`` to ``path`` atomically.

    The file is written next to its destination and then renamed, so an interruption
    mid-write leaves the previous checkpoint intact. ``state`` must hold only tensors,
    numbers, strings, lists and dicts, which is what :func:`load_checkpoint` accepts.
    ``kind`` (for example ``"lm"``) is stored with it, so that :func:`load_checkpoint`
    can refuse a checkpoint written by another trainer.
    """
    if not isinstance(state, dict):
        raise TypeError(f"state must be a dict, got {type(state).__name__}")
    if kind is not None:
        state = {**state, "kind": kind}
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


def load_checkpoint(path: str | os.PathLike, kind: str | None = None) -> dict | None:
    """Load a checkpoint written by :func:`save_checkpoint`, or ``None`` if there is none.

    Uses ``torch.load(..., weights_only=True)``: a checkpoint cannot run code on load.
    An empty, truncated or foreign file raises :class:`CheckpointError` naming it; so
    does one saved with another ``kind`` when ``kind`` is given.
    """
    path = Path(path)
    if not path.exists():
        return None
    if path.is_dir():
        raise CheckpointError(f"checkpoint path {path} is a directory, not a file")
    if path.stat().st_size == 0:
        raise CheckpointError(f"checkpoint {path} is empty (0 bytes), probably from an "
                              "interrupted copy; delete it to start from scratch")
    # torch.save writes a zip archive; a truncated one has lost its closing directory
    broken = f"checkpoint {path} is truncated or not a checkpoint written by save_checkpoint"
    if not zipfile.is_zipfile(path):
        raise CheckpointError(f"{broken}; delete it to start from scratch")
    try:
        state = torch.load(path, map_location="cpu", weights_only=True)
    except pickle.UnpicklingError as err:
        if "Unsupported global" not in str(err):
            raise CheckpointError(f"{broken} (its data cannot be read); delete it to start "
                                  "from scratch") from err
        raise CheckpointError(
            f"checkpoint {path} holds objects other than tensors, numbers, strings, lists "
            "and dicts, so it is not loaded (loading them could run code)") from err
    except (RuntimeError, EOFError, OSError, KeyError, zipfile.BadZipFile) as err:
        raise CheckpointError(f"{broken} ({type(err).__name__}: {err}); delete it to start "
                              "from scratch") from err
    if not isinstance(state, dict):
        raise CheckpointError(f"checkpoint {path} holds a {type(state).__name__}, not the "
                              "dict that save_checkpoint writes")
    if kind is not None and state.get("kind") != kind:
        written_by = (f"by the {state['kind']!r} trainer" if "kind" in state
                      else "without a trainer kind (by an older version or another program)")
        raise CheckpointError(f"checkpoint {path} was written {written_by}, not by {kind!r}: "
                              "use another checkpoint path, or delete this one")
    return state
