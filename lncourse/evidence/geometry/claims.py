"""The comparative sentences of chapter 1, as claims checked against what the chapter
computes (chapter 1).

The lesson's numerics and folding numbers are computed by the build, with the course's
functions (:mod:`lncourse.geometry.numerics`, :func:`lncourse.folding.folding_gaps`). Each
sentence around them that compares (which slip is worse where, which variance formula
loses its digits, how large folding's differences are) is a
:class:`lncourse.evidence.claims.Claim` built from those functions' results. The lesson
imports none of them: it glues the numbers its sentences quote, and
``tests/geometry/test_claims.py`` calls the same functions with the lesson's inputs,
requires each claim (:func:`require`) and shows that it fails on contrary numbers.
"""

from __future__ import annotations

import numpy as np

from lncourse.evidence.claims import Claim

__all__ = ["epsilon_claim", "variance_claim", "two_pass_bfloat16_claim", "folding_claim",
           "require"]


def epsilon_claim(errors: dict[tuple[int, float], tuple[float, float]]) -> Claim:
    """"ε outside the root hurts most for vectors of small variance, where ε dominates; the
    unbiased variance hurts most in small d". errors: (d, spread) -> (largest error with ε
    outside, largest error with the unbiased variance), for (4, 1), (64, 1), (64, 1e-3)."""
    d4, d64, small = errors[(4, 1.0)], errors[(64, 1.0)], errors[(64, 1e-3)]
    holds = small[0] > 10 * max(d4[0], d64[0]) and d4[1] > 2 * max(d64[1], small[1])
    return Claim(
        "epsilon_slips",
        f"With ε outside the root the largest error is {small[0]:.1e} for vectors of spread "
        f"10⁻³, against {d64[0]:.1e} at spread 1 (d = 64); with the unbiased variance it is "
        f"{d4[1]:.1e} at d = 4, against {d64[1]:.1e} at d = 64.", holds,
        {"d4": d4, "d64": d64, "d64_small_spread": small})


def variance_claim(offsets: np.ndarray, errors: dict[str, np.ndarray], at: int) -> Claim:
    """"The one-pass formula loses all its digits once the mean is large": at the mean
    ``offsets[at]``, in float16 and bfloat16 the one-pass relative error is of order 1 and
    at least 100 times the two-pass one."""
    low = ("float16", "bfloat16")
    one = min(float(errors[f"one-pass, {t}"][at]) for t in low)
    two = max(float(errors[f"two-pass, {t}"][at]) for t in low)
    holds = one >= 0.5 and one >= 100 * two
    return Claim(
        "one_pass_loses_digits",
        f"At mean {offsets[at]:,.0f} the one-pass variance is off by a relative "
        f"{one:.2g} or more in float16 and bfloat16, the two-pass one by {two:.1e} or "
        f"less.", holds, {"one_pass_worst_low_precision": one,
                          "two_pass_worst_low_precision": two, "at_mean": float(offsets[at])})


def two_pass_bfloat16_claim(offsets: np.ndarray, errors: dict[str, np.ndarray], at: int) -> Claim:
    """The variance figure's caption: "in bfloat16 [the two-pass formula's] error also
    rises with the mean": its largest error from the mean ``offsets[at]`` on is at least
    10 times its largest error at the three smallest means (NaN, a variance rounded to
    zero, left out)."""
    two = np.asarray(errors["two-pass, bfloat16"], dtype=float)
    small, large = float(np.nanmax(two[:3])), float(np.nanmax(two[at:]))
    return Claim("two_pass_bfloat16_rises",
                 f"In bfloat16 the two-pass variance's relative error rises from {small:.1e} "
                 f"at the smallest means to {large:.2g} at mean {offsets[at]:,.0f} and above.",
                 large >= 10 * small and large > 0, {"small_means": small, "large_means": large})


def folding_claim(score_gaps: list[float], score_scale: float) -> Claim:
    """"The differences are float32 round-off": the largest folded-minus-original score
    is below 10⁻⁵ of the largest score (float32 resolves about 7 digits)."""
    ratio = max(score_gaps) / score_scale
    return Claim("folding_round_off",
                 f"The largest difference, {max(score_gaps):.1e}, is {ratio:.1e} of the "
                 f"largest score ({score_scale:.1f}).", ratio < 1e-5,
                 {"largest_gap": max(score_gaps), "relative": ratio})


def require(claim: Claim) -> Claim:
    """The claim, or an error naming it if it does not hold (the tests' way of requiring
    a sentence of the lesson on the numbers it shows)."""
    if claim.holds is not True:
        raise AssertionError(f"chapter claim {claim.key!r} does not hold: {claim.text}")
    return claim
