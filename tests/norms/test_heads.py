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


def _reference_fraction(keys: torch.Tensor) -> float:
    """The straightforward exact count: the whole monotone chain in rationals."""
    from fractions import Fraction

    pts = [(Fraction(float(x)), Fraction(float(y))) for x, y in keys.double().tolist()]
    counts: dict = {}
    for p in pts:
        counts[p] = counts.get(p, 0) + 1
    distinct = sorted(counts)
    if len(distinct) < 3:
        return 1.0 - sum(counts[p] == 1 for p in distinct) / len(pts)

    def half(seq):
        chain: list = []
        for p in seq:
            while len(chain) >= 2 and ((chain[-1][0] - chain[-2][0]) * (p[1] - chain[-2][1])
                                       - (chain[-1][1] - chain[-2][1]) * (p[0] - chain[-2][0])
                                       ) <= 0:
                chain.pop()
            chain.append(p)
        return chain[:-1]
    hull = half(distinct) + half(distinct[::-1])
    return 1.0 - sum(counts[p] == 1 for p in hull) / len(pts)


def _hard_cases() -> list[torch.Tensor]:
    """Inputs where floating-point orientation tests go wrong: points on a line whose slope
    is not a binary fraction, on a circle, very close together, tiny and huge."""
    g = torch.Generator().manual_seed(0)
    t = torch.rand(300, generator=g, dtype=torch.float64)
    line = torch.stack([t, t / 3], -1)                       # collinear up to rounding
    line = torch.cat([line, torch.tensor([[0.5, 1.0], [0.5, -1.0]], dtype=torch.float64)])
    angles = torch.rand(400, generator=g, dtype=torch.float64) * 2 * torch.pi
    circle = torch.stack([angles.cos(), angles.sin()], -1)
    cluster = 1 + 1e-15 * torch.randint(-3, 4, (200, 2), generator=g).double()
    gauss = torch.randn(256, 2, generator=g, dtype=torch.float64)
    # Kettner et al.'s classroom example: points a few ulps from (0.5, 0.5) beside (12, 12)
    # and (24, 24), where the float orientation has the wrong sign about half the time
    far = torch.tensor([[12.0, 12.0], [24.0, 24.0]], dtype=torch.float64)
    kettner = [torch.cat([0.5 + 2.0 ** -53 * torch.randint(0, 64, (4, 2), generator=g).double(),
                          far]) for _ in range(40)]
    return [line, circle, cluster, gauss, gauss * 1e-160, gauss * 1e150,
            torch.tanh(8 * gauss), gauss.float().double(), *kettner]


def test_adaptive_hull_count_equals_the_rational_one():
    for keys in _hard_cases():
        assert heads.unselectable_fraction_2d(keys) == _reference_fraction(keys)


def test_a_float_only_orientation_test_would_miscount():
    """The float path alone is not exact on these inputs (so the rational fallback is not
    dead code): with the error bound set to 0 some hard case is miscounted."""
    import unittest.mock as mock

    with mock.patch.object(heads, "_ORIENT_BOUND", 0.0), mock.patch.object(heads, "_TINY", 0.0):
        wrong = [heads.unselectable_fraction_2d(k) != _reference_fraction(k)
                 for k in _hard_cases()]
    assert any(wrong)
