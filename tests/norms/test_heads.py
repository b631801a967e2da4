import pytest
import torch

from lncourse.norms import heads


def test_hull_count_is_exact_on_small_cases():
    square = torch.tensor([[0.0, 0], [1, 0], [0, 1], [1, 1], [0.5, 0.5], [0.5, 0]])
    assert heads.unselectable_fraction_2d(square) == pytest.approx(2 / 6)   # centre, edge point
    twins = torch.tensor([[0.0, 0], [1, 0], [0, 1], [0, 1]])
    assert heads.unselectable_fraction_2d(twins) == pytest.approx(0.5)      # neither twin wins
    angles = torch.rand(200, dtype=torch.float64) * 6.283
    circle = torch.stack([angles.cos(), angles.sin()], -1)
    assert heads.unselectable_fraction_2d(circle) == 0.0
    with pytest.raises(ValueError):
        heads.unselectable_fraction_2d(torch.zeros(5, 3))
    with pytest.raises(ValueError):
        heads.unselectable_fraction_2d(torch.tensor([[0.0, 1], [float("nan"), 0], [1, 1]]))


def test_qk_norm_leaves_no_unselectable_key_and_dyt_does():
    r = heads.selectability_by_norm(64, 10, alphas=(2.0,))
    assert max(r["qk_norm_eps0"]) == 0.0
    assert min(r["none"]) > 0.6 and min(r["dyt_a2"]) > 0.5
    with pytest.raises(ValueError):
        heads.head_keys(torch.zeros(3, 2), "layernorm")
