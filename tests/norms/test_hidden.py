import math

import pytest
import torch

from lncourse.norms import hidden


def test_chance_level_is_exact_and_near_the_approximation():
    g = torch.Generator().manual_seed(0)
    for d in (3, 16, 576):
        u = torch.randn(200_000, d, generator=g, dtype=torch.float64) if d < 100 else \
            torch.randn(20_000, d, generator=g, dtype=torch.float64)
        mc = float(hidden.abs_cos_ones(u).mean())
        se = float(hidden.abs_cos_ones(u).std()) / math.sqrt(u.shape[0])
        assert abs(mc - hidden.chance_abs_cos(d)) < 4 * se
    assert hidden.chance_abs_cos(1) == pytest.approx(1.0)
    assert hidden.chance_abs_cos(576) == pytest.approx(math.sqrt(2 / (math.pi * 576)), rel=2e-3)


def test_random_directions_meet_the_chance_level_on_isotropic_vectors():
    h = torch.randn(2000, 64, generator=torch.Generator().manual_seed(1), dtype=torch.float64)
    assert float(hidden.abs_cos_random(h).mean()) == pytest.approx(hidden.chance_abs_cos(64), rel=0.03)


def test_saturation_is_one_for_a_constant_scale_and_below_one_for_an_outlier_token():
    g = torch.Generator().manual_seed(2)
    h = torch.randn(200, 32, generator=g, dtype=torch.float64)
    h = h / hidden.token_rms(h)[:, None]                    # every token at rms 1: a line
    assert hidden.saturation(h) == pytest.approx(1.0)
    scales = torch.rand(200, 1, generator=g, dtype=torch.float64) * 10 + 0.1
    assert hidden.saturation(torch.randn(200, 32, generator=g, dtype=torch.float64) * scales) < 0.5


def test_massive_ratio_and_spread():
    h = torch.ones(5, 8, dtype=torch.float64)
    h[0, 3] = 100.0
    assert hidden.massive_ratio(h, 0) == 100.0 and hidden.massive_ratio(h, 1) == 1.0
    assert hidden.rms_spread(h) == pytest.approx(0.0)
