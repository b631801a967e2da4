import pytest

from lncourse.modes import check_scale, scaled


def test_scaled_multiplies_rounds_and_keeps_a_minimum():
    assert scaled(14_000, 1.0) == 14_000
    assert scaled(14_000, 0.01) == 140
    assert scaled(10, 0.01) == 1
    assert scaled(10, 0.01, minimum=3) == 3
    assert scaled(3, 0.5) == 2


@pytest.mark.parametrize("bad", [0, -0.5, 1.5, float("nan"), float("inf")])
def test_scale_outside_unit_interval_is_refused(bad):
    with pytest.raises(ValueError, match="SCALE must lie in"):
        check_scale(bad)


@pytest.mark.parametrize("bad", [True, "0.1", None])
def test_scale_of_wrong_type_is_refused(bad):
    with pytest.raises(TypeError, match="SCALE must be a number"):
        check_scale(bad)


def test_scaled_refuses_non_integer_sizes():
    with pytest.raises(ValueError, match="non-negative integer"):
        scaled(2.5, 0.5)
