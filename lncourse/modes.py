"""Fast mode, full mode, and full mode scaled down.

Every chapter's papermill ``parameters`` cell holds two settings::

    FULL = False   # True: the paper's sizes
    SCALE = 1.0    # with FULL: multiplies the full-mode sizes (steps, seeds, samples, grids)

``SCALE`` exists so that continuous integration can execute every chapter's full-mode code
paths (the paper configurations, loading stored results, the larger grids) in seconds, with
``FULL=True, SCALE=0.01``. A reader never needs it. Sizes are scaled with :func:`scaled`,
which never returns less than ``minimum``, so a scaled-down run still runs every code path.
"""

from __future__ import annotations

import math


def check_scale(scale: float) -> float:
    """Return ``scale`` as a float after checking that it lies in (0, 1]."""
    if isinstance(scale, bool) or not isinstance(scale, (int, float)):
        raise TypeError(f"SCALE must be a number in (0, 1], got {type(scale).__name__}")
    if not (math.isfinite(scale) and 0 < scale <= 1):
        raise ValueError(f"SCALE must lie in (0, 1] (1 = the full sizes), got {scale}")
    return float(scale)


def scaled(value: int, scale: float, minimum: int = 1) -> int:
    """``value`` multiplied by ``scale``, rounded, and at least ``minimum`` (an int)."""
    scale = check_scale(scale)
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise ValueError(f"expected a non-negative integer size, got {value!r}")
    return max(minimum, int(round(value * scale)))


SHARED_RUNS_ENV = "LNCOURSE_SHARED_RUNS"


def shared_checkpoint(name: str, config=None, suffix: str = ".ckpt"):
    """Where a page's run may be shared with another page of the same build, or None.

    Two pages of the book train the same fast-mode run (chapter 3's lesson and its
    replication page). The site build sets ``LNCOURSE_SHARED_RUNS`` to a folder it empties
    before executing; a trainer that resumes from a checkpoint then trains once and the
    second page resumes at the last step, with the same history (the trainers' resume
    is exact: tests/majority/test_task.py). Outside the build (a reader's notebook, Colab)
    the variable is unset and every page trains its own run. ``config`` (a dataclass)
    goes into the file name, so two pages share a run only when they train the same one.
    ``suffix=""`` gives a prefix, for a trainer that names one file per model.
    """
    import dataclasses
    import hashlib
    import json
    import os
    from pathlib import Path

    if not name or not name.replace("_", "").replace("-", "").isalnum():
        raise ValueError(f"a shared run's name is letters, digits, - and _, got {name!r}")
    folder = os.environ.get(SHARED_RUNS_ENV)
    if not folder:
        return None
    path = Path(folder)
    path.mkdir(parents=True, exist_ok=True)
    if config is not None:
        key = json.dumps(dataclasses.asdict(config), sort_keys=True, default=str)
        name = f"{name}-{hashlib.sha256(key.encode()).hexdigest()[:12]}"
    return path / f"{name}{suffix}"
