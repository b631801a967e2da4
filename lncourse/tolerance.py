"""How a recomputed number is compared with a stored one: the one policy every test uses.

A stored number was computed once, on one CPU. Recomputed on another (other SIMD kernels,
another BLAS path, another thread count splitting a sum differently) it comes out a few
units in its last bits away. A comparison must pass on that and fail on an edit. Three
kinds of comparison, each with its rule:

**A reported number** (a ledger entry: a number a page prints or a sentence states) is
compared at the precision a page prints it. Pages print a ledger float with at most four
decimals, and a value of 1 or more with at most four significant figures
(``tests/test_tolerance.py`` holds every page's formats to the first), so two values agree
when they differ by at most ``5e-5 max(1, |stored|)`` (:func:`reported_tolerance`): half
a unit of the fourth decimal below 1, and at most half a unit in the fourth significant
figure above. An edit of the stored number by one printed unit therefore fails (it moves
the value by at least twice the tolerance), and a last-bit difference passes (float32's
rounding is 6e-8 relative; the largest difference seen between CPUs, 1.2e-6), wherever
the value sits. At a rounding boundary (a stored 0.12350 printed as 0.124) a recomputed
0.12349 prints one unit lower; the rule accepts it, as it must: that is rounding, not a
change, and an edit by a printed unit is still refused. The tolerance is absolute below
1, so an interval's end near 0 (a mean minus a half-width, which keeps only the absolute
precision of its terms) is compared as robustly as the mean. Integers, strings and
booleans agree only when equal (a count, a claim's sentence with its printed numbers, a
verdict).

**An array recomputed from stored weights** gets a tolerance from its arithmetic (the
test says which: float32's rounding grown through the layers it passes). An element far
more sensitive than the rest is ill-conditioned, not noisy: the test finds out why and
removes the cause (computes in float64, compares what the page reports, or states a
rule). Chapter 4's stall reading is the example (:mod:`lncourse.evidence.nope.retrained_report`).

One such tolerance is shared, :data:`TOKEN_LOSS_ATOL`, for a per-token loss from a
float32 forward pass of a stored model (chapters 4 and 5 store them per window and
position, and their pages report means of them). Measured against the same model in
float64, float32's error in one loss reaches 1.3e-4 (chapter 4's wide NoPE model, where
1,145 of its 32,768 losses move by more than 1e-5: without positions, causal attention
over repeated characters is full of exact and near ties between keys, and the split
between nearly tied keys follows the rounding of their scores), so two CPUs' float32
values can be 2.7e-4 apart. The tolerance is ten times that. The means the pages print
are compared as reported numbers (their ledgers).

**A training replay** compares its first steps tightly (a few float32 roundings apart)
and the rest by what the chapter reports of it: training amplifies a last-bit difference
step by step, so a late loss is compared at its printed precision, not bit for bit.

:func:`record` notes each comparison's margin (tolerance over the largest difference
seen) for the margins table of TESTING.md (``scripts/margins.py``).
"""

from __future__ import annotations

import json
import math
import os
from pathlib import Path

import numpy as np

__all__ = ["TOKEN_LOSS_ATOL", "DECIMALS", "SIGNIFICANT", "reported_tolerance", "reported_agree", "margin", "record",
           "record_arrays", "write_margins"]

TOKEN_LOSS_ATOL = 3e-3   # a float32 per-token loss, elementwise (see above)
DECIMALS = 4             # the most decimals any page prints of a ledger float
SIGNIFICANT = 4          # the most significant figures of one of 1 or more


def reported_tolerance(stored: float) -> float:
    """``5e-5 max(1, |stored|)``: half a unit of the fourth decimal below 1; above, at
    most half a unit in the fourth significant figure (exactly half for a value just
    below a power of ten)."""
    if not math.isfinite(stored):
        return 0.0
    return 0.5 * 10.0 ** -DECIMALS * max(1.0, abs(stored))


def reported_agree(recomputed: float, stored: float) -> bool:
    """Whether a recomputed reported float agrees with its stored value (see above);
    NaN agrees with NaN and an infinity with itself only."""
    if math.isnan(recomputed) or math.isnan(stored):
        return math.isnan(recomputed) and math.isnan(stored)
    if math.isinf(recomputed) or math.isinf(stored):
        return recomputed == stored
    ok = abs(recomputed - stored) <= reported_tolerance(stored)
    if ok:          # a margin is of a comparison that passed (an edit's failure is meant)
        record("reported", abs(recomputed - stored), reported_tolerance(stored))
    return ok


def margin(difference: float, tolerance: float) -> float:
    """Tolerance over difference: how many times the difference could grow before the
    comparison failed (infinite when the values are equal)."""
    return math.inf if difference == 0 else tolerance / difference


# ---- the margins table ---------------------------------------------------------------
_seen: dict[str, dict] = {}


def record(kind: str, difference: float, tolerance: float) -> None:
    """Note a comparison under the running test (``PYTEST_CURRENT_TEST``): the smallest
    margin of each test and kind is kept; :func:`write_margins` stores them when
    ``LNCOURSE_MARGINS`` names a folder (a file per process). Outside a test, nothing is kept."""
    test = os.environ.get("PYTEST_CURRENT_TEST")
    if not test or not os.environ.get("LNCOURSE_MARGINS") \
            or os.environ.get("LNCOURSE_MARGINS_RECORD") == "0":
        return
    test = test.rsplit(" (", 1)[0]
    m = margin(float(difference), float(tolerance))
    entry = _seen.setdefault(f"{test}|{kind}", {"test": test, "kind": kind, "margin": m,
                                               "difference": float(difference),
                                               "tolerance": float(tolerance)})
    if m < entry["margin"]:
        entry.update(margin=m, difference=float(difference), tolerance=float(tolerance))


def record_arrays(actual, desired, rtol: float, atol: float) -> None:
    """:func:`record` for an elementwise comparison ``|a - d| <= atol + rtol |d|``: the
    element with the smallest margin."""
    if not os.environ.get("LNCOURSE_MARGINS"):
        return
    try:
        a = np.asarray(actual, dtype=np.float64)
        d = np.asarray(desired, dtype=np.float64)
        diff = np.abs(a - d)
        tol = atol + rtol * np.abs(d)
    except (TypeError, ValueError):
        return
    diff, tol = np.broadcast_arrays(diff, tol)
    ok = np.isfinite(diff)
    if not ok.any():
        return
    diff, tol = diff[ok], tol[ok]
    if (diff > tol).any():      # it fails: a margin is of a comparison that passed
        return
    with np.errstate(divide="ignore", invalid="ignore"):
        ratio = np.where(diff > 0, tol / np.where(diff > 0, diff, 1), np.inf)
    i = int(np.argmin(ratio))
    record("array", float(diff[i]), float(tol[i]))


def write_margins() -> None:
    path = os.environ.get("LNCOURSE_MARGINS")
    if not path or not _seen:
        return
    Path(path).mkdir(parents=True, exist_ok=True)
    (Path(path) / f"margins-{os.getpid()}.json").write_text(
        json.dumps(sorted(_seen.values(), key=lambda e: e["test"]), indent=1))
