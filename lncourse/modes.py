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
