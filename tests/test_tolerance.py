"""The comparison policy (lncourse.tolerance): a reported number passes a last-bit
difference anywhere, a rounding boundary included, and fails an edit by one printed unit;
and the pages print no ledger float more finely than the policy assumes."""

from __future__ import annotations

import math
import re
from pathlib import Path

import numpy as np
import pytest

from lncourse.evidence import claims as C
from lncourse.tolerance import DECIMALS, SIGNIFICANT, reported_agree, reported_tolerance

ROOT = Path(__file__).resolve().parent.parent
# every value printed at every precision the pages use, small and large, near 0 and at a
# rounding boundary (the half-way points 0.1235, 14.75, 85.05)
VALUES = [0.0, 3e-6, -0.0004, 0.01234, 0.1235, 0.5, 0.999, 1.0, 2.5431, 6.2623119,
          9.9995, 14.703079, 14.75, 85.05, 85.097856, 1234.5, 50_000.0, -2.25]


def _printed_unit(value: float, decimals: int) -> float:
    """One unit of the last digit a format of ``decimals`` decimals prints, or of the
    fourth significant figure where that is coarser (a page prints no finer)."""
    sig = 10.0 ** (math.floor(math.log10(abs(value))) - SIGNIFICANT + 1) if value else 0.0
    return max(10.0 ** -decimals, sig)


@pytest.mark.parametrize("value", VALUES)
def test_a_last_bit_difference_passes_everywhere(value):
    for ulps in (1, 64, 2**14):        # float64 ulps; 2**14 of them is 2e-12 relative
        for sign in (1, -1):
            other = value + sign * ulps * math.ulp(value or 1.0)
            assert reported_agree(other, value), (value, other)
    # float32's rounding of the value (what another CPU's float32 kernels leave)
    assert reported_agree(float(np.float32(value)), value)
    assert reported_agree(value * (1 + 3e-6), value)   # the largest: 2.7e-7 to 1.2e-6


@pytest.mark.parametrize("decimals", range(DECIMALS + 1))
@pytest.mark.parametrize("value", VALUES)
def test_an_edit_by_one_printed_unit_fails(value, decimals):
    unit = _printed_unit(value, decimals)
    for sign in (1, -1):
        assert not reported_agree(value + sign * unit, value), (value, decimals)


def test_at_a_rounding_boundary_either_rounding_is_accepted():
    """0.1235 prints as 0.124 (or 0.123, by binary rounding); 0.12349999 and 0.12350001
    print differently at three decimals; both agree with the stored 0.1235, and 0.1245
    (one printed unit up) does not."""
    stored = 0.1235
    low, high = stored - 1e-9, stored + 1e-9
    assert f"{low:.3f}" != f"{high:.3f}"
    assert reported_agree(low, stored) and reported_agree(high, stored)
    assert not reported_agree(stored + 1e-3, stored)


def test_tolerance_is_what_the_policy_says():
    assert reported_tolerance(0.3) == pytest.approx(5e-5)
    assert reported_tolerance(2.0) == pytest.approx(1e-4)
    assert reported_tolerance(85.1) == pytest.approx(85.1 * 5e-5)
    assert reported_tolerance(math.inf) == 0.0
    assert reported_agree(math.nan, math.nan) and not reported_agree(math.nan, 1.0)
    assert not reported_agree(math.inf, 1e308) and reported_agree(math.inf, math.inf)


def test_the_ledger_comparison_uses_the_policy():
    """The issue's three numbers from another CPU agree; one printed unit does not."""
    ledger = {"max": 14.703078889846802, "mean": 6.262311935424805, "np": 85.09785614013671}
    assert C.compare({"max": 14.703061962127686, "mean": 6.262310314178467,
                      "np": 85.0978790283203}, ledger) == []
    assert C.compare({"max": 14.8, "mean": 6.262310314178467, "np": 85.0978790283203},
                     ledger) == ["max: recomputed 14.8, ledger 14.703078889846802"]
    assert C.compare({"max": 14.703078889846802, "mean": 6.263, "np": 85.09785614013671},
                     ledger)


# ---- the pages print no finer than the policy assumes ---------------------------------
ROLE = re.compile(r"\{glue:text\}`([^`]+)`")
FIXED = re.compile(r"^[+ ]?,?\.(\d)[f%]$")


def test_no_page_prints_a_glued_number_more_finely_than_the_policy():
    """Every ``{glue:text}`key:format``` on the pages is a fixed format of at most four
    decimals (``.3f``, ``+.4f``, ``,.0f``; a percentage of at most two decimals, four of
    the value), or ``g`` for a learning rate (a configuration value, compared exactly), or no
    format at all (an integer or a text). A format finer than that would need a finer
    tolerance in lncourse.tolerance; this test fails first."""
    bad = []
    for page in sorted((ROOT / "book").glob("*.md")):
        for role in ROLE.findall(page.read_text()):
            key, _, fmt = role.partition(":")
            if not fmt or fmt == ",":
                continue
            m = FIXED.match(fmt)
            if m:
                decimals = int(m.group(1)) + (2 if fmt.endswith("%") else 0)
                if decimals <= DECIMALS:
                    continue
            elif fmt == "g" and key.endswith("_lr"):
                continue
            bad.append(f"{page.name}: {role}")
    assert not bad, bad


def test_the_format_check_bites():
    assert int(FIXED.match(".5f").group(1)) > DECIMALS
    assert FIXED.match("+.2f") and FIXED.match(",.0f") and FIXED.match(".0%")
