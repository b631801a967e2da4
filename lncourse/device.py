"""Choosing where tensors live: one decision per notebook."""

from __future__ import annotations

import functools
import os

import torch


@functools.cache
def default_device() -> torch.device:
    """The best available device: CUDA, then Apple's MPS, then the CPU.

    The choice is made once per process (cached), so a notebook uses one device
    throughout. Set the environment variable ``LNCOURSE_DEVICE`` (for example ``cpu``)
    to override it. Library code never calls this on its own: it takes the device from
    its inputs or from an explicit ``device`` argument.
    """
    forced = os.environ.get("LNCOURSE_DEVICE")
    if forced:
        return torch.device(forced)
    if torch.cuda.is_available():
        return torch.device("cuda")
    mps = getattr(torch.backends, "mps", None)
    if mps is not None and mps.is_available():
        return torch.device("mps")
    return torch.device("cpu")
