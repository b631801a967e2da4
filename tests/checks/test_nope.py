"""Chapter 4's slope check is judged against the package's own fit."""

import torch

from answers import fit_loglog_slope


def test_the_slope_reference_is_the_packages():
    """The check's reference is lncourse.nope.variance.loglog_slope itself, not a copy of it."""
    from lncourse.nope.variance import loglog_slope
    v = 0.5 / torch.arange(1, 33, dtype=torch.float64) ** 0.8
    assert abs(fit_loglog_slope(v, 4) - loglog_slope(v, m_min=4)) < 1e-12
    assert abs(loglog_slope(v, m_min=4) + 0.8) < 1e-12
