"""Choosing where tensors live: one decision per notebook."""

from __future__ import annotations

import functools
import math
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


def bf16_native(device: torch.device | str) -> bool:
    """Whether ``device`` computes in bfloat16 natively. On CUDA that is
    ``torch.cuda.is_bf16_supported(including_emulation=False)``: a T4 (compute
    capability 7.5) emulates bfloat16 through float32, slowly, and so answers False;
    bfloat16 is used for compute only where this is True. A CPU computes in it."""
    device = torch.device(device)
    if device.type == "cuda":
        return bool(torch.cuda.is_bf16_supported(including_emulation=False))
    return device.type == "cpu"


def compute_dtype(device: torch.device | str) -> torch.dtype:
    """The low-precision dtype to compute in on ``device``: bfloat16 where it is native
    (:func:`bf16_native`), else float16 on CUDA (a T4), else float32."""
    device = torch.device(device)
    if bf16_native(device):
        return torch.bfloat16
    return torch.float16 if device.type == "cuda" else torch.float32


# The measured wall times of every page's notebook (scripts/device_notebooks.py), stored
# result results/notebooks/timings.json: what full_mode_plan quotes.
TIMINGS = "notebooks/timings"


def full_mode_plan(chapter: str, full: bool, scale: float = 1.0,
                   device: torch.device | str | None = None, what: str = "",
                   timings: dict | None = None) -> str | None:
    """Before a full-mode run: say what will run and how long it took where it was
    measured (the notebook's wall time, on a CPU and on a GPU, each with its device,
    SCALE, torch and commit; no figure that was not measured), and what that means on
    the ``device`` found here. Prints it and returns it; None in fast mode.
    ``timings``: the stored result (default: ``results/notebooks/timings.json``)."""
    if not full:
        return None
    from lncourse.modes import check_scale

    scale = check_scale(scale)
    device = torch.device(device) if device is not None else default_device()
    if timings is None:
        from lncourse.results import load_result
        try:
            timings = load_result(TIMINGS)
        except FileNotFoundError:
            timings = {"runs": []}
    runs = [r for r in timings.get("runs", []) if r["chapter"] == chapter
            and r["mode"] == "full" and r.get("ok", True)]
    lines = [f"{chapter}, full mode at SCALE = {scale:g}" + (f": {what}" if what else "")]
    for r in sorted(runs, key=lambda r: (r["device"], r["scale"])):
        lines.append(f"  measured: {r['wall_s']:.0f} s for the whole notebook at SCALE = "
                     f"{r['scale']:g} on {r['device']} (torch {r['torch']}, commit "
                     f"{r['commit'][:10]})")
    here = [r for r in runs if r["device"].split(":")[0] == device.type]
    name = _describe(device)
    if not runs:
        lines.append("  no measured time of this chapter's full mode is stored yet")
    elif not here:
        lines.append(f"  none measured on a {device.type.upper()} like this one ({name})")
    else:
        near = min(here, key=lambda r: abs(math.log(r["scale"] / scale)))
        if near["scale"] == scale:
            lines.append(f"  here ({name}): expect about {near['wall_s']:.0f} s, as measured "
                         f"on {near['device']}")
        else:
            lines.append(f"  here ({name}): not measured at SCALE = {scale:g}; at SCALE = "
                         f"{near['scale']:g} it took {near['wall_s']:.0f} s on "
                         f"{near['device']} (the time grows with SCALE)")
    if device.type == "cuda" and not bf16_native(device):
        lines.append("  this GPU has no native bfloat16 (a T4?): nothing computes in it here")
    text = "\n".join(lines)
    print(text)
    return text


def _describe(device: torch.device) -> str:
    if device.type == "cuda":
        return f"cuda: {torch.cuda.get_device_name(device)}"
    return device.type
