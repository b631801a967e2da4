"""Chapter 1's comparative sentences (lncourse.evidence.geometry.claims): each claim holds on the
chapter's own computation and fails on contrary numbers."""

from __future__ import annotations

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from lncourse.evidence.geometry.claims import (epsilon_claim, folding_claim, require,
                                       two_pass_bfloat16_claim, variance_claim)


def _epsilon_errors(seed=0):
    """The chapter's ε cell."""
    torch.manual_seed(seed)
    out = {}
    for d, spread in [(4, 1.0), (64, 1.0), (64, 1e-3)]:
        z = torch.randn(256, d, dtype=torch.float64) * spread
        ref = F.layer_norm(z, (d,), eps=1e-5)
        c = z - z.mean(-1, keepdim=True)
        outside = c / (z.std(-1, unbiased=False, keepdim=True) + 1e-5)
        unbiased = c / torch.sqrt(z.var(-1, unbiased=True, keepdim=True) + 1e-5)
        out[(d, spread)] = (float((outside - ref).abs().max()), float((unbiased - ref).abs().max()))
    return out


def _variance_errors(seed=0):
    """The chapter's variance cell."""
    offsets = np.logspace(-1, 3, 13)
    base = torch.randn(512, 64, dtype=torch.float64, generator=torch.Generator().manual_seed(seed))
    base = (base - base.mean(-1, keepdim=True)) / base.std(-1, unbiased=False, keepdim=True)
    one = lambda z: (z * z).mean(-1) - z.mean(-1) ** 2                      # noqa: E731
    two = lambda z: ((z - z.mean(-1, keepdim=True)) ** 2).mean(-1)          # noqa: E731
    errors = {}
    for dtype in (torch.float32, torch.float16, torch.bfloat16):
        for name, fn in [("one-pass", one), ("two-pass", two)]:
            rel = []
            for offset in offsets:
                z = base + offset
                exact = two(z.to(dtype).double())
                rel.append(float(((fn(z.to(dtype)).double() - exact).abs() / exact).median()))
            errors[f"{name}, {str(dtype).split('.')[-1]}"] = np.array(rel)
    return offsets, errors


@pytest.mark.parametrize("seed", [0, 1])
def test_epsilon_claim_holds_for_the_chapter_and_fails_when_d_does_not_matter(seed):
    errors = _epsilon_errors(seed)
    assert require(epsilon_claim(errors)).holds
    flat = dict(errors)
    flat[(64, 1.0)] = flat[(4, 1.0)]          # had d = 64 been as bad as d = 4
    assert epsilon_claim(flat).holds is False
    swapped = {k: v[::-1] for k, v in errors.items()}   # the two slips' roles exchanged
    assert epsilon_claim(swapped).holds is False


def test_variance_claim_holds_for_the_chapter_and_fails_if_two_pass_also_loses():
    offsets, errors = _variance_errors()
    at = int(np.argmin(np.abs(offsets - 100)))           # the mean the chapter prints
    claim = require(variance_claim(offsets, errors, at))
    assert "one-pass" in claim.text and claim.values["one_pass_worst_low_precision"] >= 0.5
    swapped = {k.replace("one-pass", "x").replace("two-pass", "one-pass").replace("x", "two-pass"): v
               for k, v in errors.items()}
    assert variance_claim(offsets, swapped, at).holds is False


def test_two_pass_bfloat16_claim_holds_and_fails_if_its_error_stays_flat():
    offsets, errors = _variance_errors()
    at = int(np.argmin(np.abs(offsets - 100)))
    assert require(two_pass_bfloat16_claim(offsets, errors, at)).holds
    flat = dict(errors)
    flat["two-pass, bfloat16"] = np.full(len(offsets), 1e-3)
    assert two_pass_bfloat16_claim(offsets, flat, at).holds is False


def test_folding_claim_and_require():
    assert folding_claim([1e-6, 3e-6], 12.0).holds
    bad = folding_claim([1e-6, 0.5], 12.0)
    assert bad.holds is False
    with pytest.raises(AssertionError, match="folding_round_off"):
        require(bad)
