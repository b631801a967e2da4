"""lncourse.geometry.numerics: the two slips of LayerNorm's formula and the variance's two
formulas in low precision measure what they say (the lesson's sentences about their
numbers are checked in test_claims.py)."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from lncourse.geometry.numerics import (VARIANCE_MEANS, epsilon_errors, mean_index,
                                        variance_errors, variance_one_pass,
                                        variance_two_pass)


def test_the_slips_are_the_errors_of_the_two_wrong_formulas():
    """The unbiased variance shrinks an output y by the factor
    sqrt((v + eps) / (v d/(d-1) + eps)) >= sqrt((d-1)/d), and |y| <= sqrt(d-1): at d = 4
    its error is at most sqrt(3) (1 - sqrt(3/4)), nearly reached by one of 256 vectors.
    With eps outside the root the error is about eps |y| / sigma: small at spread 1, of
    the order of y itself at spread 1e-3, where sigma is smaller than sqrt(eps)."""
    errors = epsilon_errors(seed=0)
    outside, unbiased = errors[(4, 1.0)]
    bound = np.sqrt(3) * (1 - np.sqrt(3 / 4))
    assert 0.5 * bound < unbiased <= bound + 1e-12
    assert 0 < outside < 1e-2 < 1 < errors[(64, 1e-3)][0]
    assert epsilon_errors(seed=0) == errors != epsilon_errors(seed=1)


def test_eps_outside_the_root_still_bounds_the_output():
    """sigma + eps, the slip, is not sigma alone: it divides a centred vector c by
    sigma + eps, so |output| = |y| sigma / (sigma + eps) <= sqrt(d - 1) sigma / (sigma + eps),
    about 0.7 at d = 64 and spread 1e-6 (eps = 1e-5), where PyTorch's output is near 0
    and dropping eps would give y itself (|y| about 3 somewhere in 256 vectors)."""
    (outside, _), = epsilon_errors(seed=0, cases=((64, 1e-6),)).values()
    assert 0.1 < outside < np.sqrt(63) * 1.2e-6 / (1.2e-6 + 1e-5)


def test_the_two_variance_formulas():
    z = torch.tensor([[1.0, 2.0, 3.0, 6.0]], dtype=torch.float64)
    for formula in (variance_one_pass, variance_two_pass):
        torch.testing.assert_close(formula(z), torch.tensor([3.5], dtype=torch.float64))


def test_variance_errors_are_exact_in_float64_and_one_pass_is_the_worse_in_float32():
    means, errors = variance_errors(seed=0, dtypes=(torch.float64,))
    np.testing.assert_array_equal(means, VARIANCE_MEANS)
    assert set(errors) == {"one-pass, float64", "two-pass, float64"}
    assert max(errors["two-pass, float64"]) < 1e-13
    _, errors = variance_errors(seed=0, means=VARIANCE_MEANS[-1:], dtypes=(torch.float32,))
    assert errors["one-pass, float32"][0] > 100 * errors["two-pass, float32"][0]


def test_mean_index_finds_the_nearest_mean():
    assert mean_index(VARIANCE_MEANS) == VARIANCE_MEANS.index(100.0)
    assert mean_index([0.1, 1.0, 10.0], 3.0) == 1


@pytest.mark.parametrize("bad, match", [
    (dict(seed=-1), "seed"), (dict(seed=1.5), "seed"), (dict(means=[]), "means"),
    (dict(means=[1.0, float("nan")]), "means"), (dict(shape=(8, 1)), "shape"),
    (dict(dtypes=(torch.int32,)), "floating")])
def test_variance_errors_refuse_bad_input(bad, match):
    with pytest.raises(ValueError, match=match):
        variance_errors(**bad)


@pytest.mark.parametrize("bad, match", [
    (dict(seed="0"), "seed"), (dict(eps=0.0), "eps"), (dict(rows=0), "rows"),
    (dict(cases=((1, 1.0),)), "d must"), (dict(cases=((4, 0.0),)), "spread")])
def test_epsilon_errors_refuse_bad_input(bad, match):
    with pytest.raises(ValueError, match=match):
        epsilon_errors(**bad)


def test_variance_errors_are_the_median_over_vectors_of_the_rounded_inputs_error():
    """One entry recomputed step by step as the docstring says: vectors of mean 0 and
    spread 1 exactly, shifted and rounded, each formula in the dtype against the exact
    variance of the rounded vector, and the median over vectors; here their mean and
    largest lie far from the median, so a mean or a max in its place fails."""
    from lncourse.geometry.numerics import variance_errors, variance_two_pass

    n, d, mean, seed = 64, 16, 100.0, 3
    base = torch.randn(n, d, dtype=torch.float64, generator=torch.Generator().manual_seed(seed))
    base = (base - base.mean(-1, keepdim=True)) / base.std(-1, unbiased=False, keepdim=True)
    z = (base + mean).to(torch.bfloat16)
    exact = ((z.double() - z.double().mean(-1, keepdim=True)) ** 2).mean(-1)
    rel = ((variance_two_pass(z).double() - exact).abs() / exact).numpy()
    _, errors = variance_errors(seed, means=(mean,), shape=(n, d), dtypes=(torch.bfloat16,))
    got = errors["two-pass, bfloat16"][0]
    assert got == pytest.approx(float(np.median(rel)), rel=1e-12)
    assert not np.isclose(got, rel.mean(), rtol=0.1) and not np.isclose(got, rel.max(), rtol=0.1)


def test_epsilon_errors_use_the_eps_they_are_given():
    """With eps = 0.01 on vectors of spread 0.1 (variance 0.01, as large as eps), each
    slip's error is recomputed from the formulas: a reference left at PyTorch's default
    eps, or a slip that ignores the eps passed, fails."""
    d, spread, rows, eps, seed = 64, 0.1, 32, 1e-2, 5
    z = torch.randn(rows, d, dtype=torch.float64,
                    generator=torch.Generator().manual_seed(seed)) * spread
    centred = z - z.mean(-1, keepdim=True)
    var = (centred ** 2).mean(-1, keepdim=True)
    ref = centred / torch.sqrt(var + eps)
    outside = centred / (torch.sqrt(var) + eps)
    unbiased = centred / torch.sqrt(var * d / (d - 1) + eps)
    want = (float((outside - ref).abs().max()), float((unbiased - ref).abs().max()))
    got = epsilon_errors(seed, cases=((d, spread),), rows=rows, eps=eps)[(d, spread)]
    assert got == pytest.approx(want, rel=1e-9)
