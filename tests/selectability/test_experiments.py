"""Experiments of chapter 2: the Gaussian proxy against Qhull, prefixes, norm diagnostics,
seeds, the baseline comparison and the paper's numbers."""

import numpy as np
import pytest
from scipy.spatial import ConvexHull

from lncourse.selectability.exact import selectability_batch
from lncourse.selectability.experiments import (
    PAPER_FIG1C_PROB_ANY, PAPER_TABLE1, GridConfig, compare_with_baseline, fade_curves,
    gaussian_proxy, norm_cv, paper_cells, prefix_fractions, random_directions, random_key_sets,
    whitened)


def qhull_fraction(K: np.ndarray) -> float:
    """Independent answer: 1 - (vertices of the convex hull) / n, from Qhull."""
    return 1 - len(ConvexHull(K).vertices) / len(K)


@pytest.mark.parametrize("d, ns", [(3, [8, 20, 60]), (7, [16, 40, 96])])
def test_gaussian_proxy_agrees_with_qhull(d, ns):
    proxy = gaussian_proxy(ns, d, runs=3, seed=5)              # (len(ns), runs)
    keys = random_key_sets(max(ns), d, 3, seed=5)             # the same sets
    expected = np.array([[qhull_fraction(k[:n]) for k in keys] for n in ns])
    np.testing.assert_array_equal(proxy, expected)


def test_gaussian_proxy_grows_with_n_and_shrinks_with_d():
    p7 = gaussian_proxy([32, 128], 7, runs=8, seed=0).mean(1)
    p8 = gaussian_proxy([32, 128], 8, runs=8, seed=0).mean(1)
    assert p7[1] > p7[0] and p8[1] > p8[0] and p7[1] > p8[1]
    assert 0.12 < p7[1] < 0.30          # about 20% measured with Qhull (REFERENCE.md)


def test_prefix_fractions_are_per_prefix_selectability():
    V = random_key_sets(30, 3, 4, seed=1)
    got = prefix_fractions(V, [5, 12, 30])
    for j, n in enumerate([5, 12, 30]):
        np.testing.assert_array_equal(got[:, j],
                                      selectability_batch(V[:, :n]).unselectable_fraction)
    with pytest.raises(ValueError, match="prefix sizes must be in"):
        prefix_fractions(V, [1, 5])
    with pytest.raises(ValueError, match="prefix sizes must be in"):
        prefix_fractions(V, [31])


def test_norm_cv_whitened_is_affine_invariant_and_gaussian_like():
    V = random_key_sets(2000, 8, 2, seed=2)
    A = np.random.default_rng(0).normal(size=(8, 8))
    cv = norm_cv(V, whiten=True)
    np.testing.assert_allclose(norm_cv(V @ A + 3.0, whiten=True), cv, rtol=1e-8)
    # a standard Gaussian in d dimensions: CV of the norm about 1 / sqrt(2 d)
    np.testing.assert_allclose(cv, 1 / np.sqrt(16), rtol=0.1)
    # the raw CV is not invariant: stretching one axis changes it
    assert abs(norm_cv(V * np.array([10.0] + [1.0] * 7))[0] - norm_cv(V)[0]) > 0.05
    # points on a sphere: no variation at all
    S = V / np.linalg.norm(V - V.mean(1, keepdims=True), axis=-1, keepdims=True)
    assert norm_cv(S - S.mean(1, keepdims=True)).max() < 0.05


def test_random_directions_keep_lengths_and_remove_structure():
    V = random_key_sets(400, 8, 3, seed=3)
    A = np.random.default_rng(1).normal(size=(8, 8))
    W = whitened(V @ A + 1.0)
    np.testing.assert_allclose(np.stack(W).reshape(-1, 8).T @ np.stack(W).reshape(-1, 8)
                               / (3 * 400), np.eye(8), atol=1e-8)
    R = random_directions(V @ A + 1.0, seed=0)
    np.testing.assert_allclose(np.linalg.norm(R, axis=-1), np.linalg.norm(np.stack(W), axis=-1))
    # Gaussian points: random directions change nothing in distribution
    g = selectability_batch(V).unselectable_fraction.mean()
    r = selectability_batch(R).unselectable_fraction.mean()
    assert abs(g - r) < 0.04
    # points on the moment curve (t, t^2, t^3) are all hull vertices, whatever their
    # lengths: their directions are the structure, and random directions put many inside
    t = np.linspace(0.1, 3.0, 60)[None, :, None].repeat(2, 0)
    curve = np.concatenate([t, t ** 2, t ** 3], axis=-1)
    assert selectability_batch(curve).unselectable_fraction.max() == 0
    assert selectability_batch(random_directions(curve)).unselectable_fraction.mean() > 0.2
    # a flat direction is dropped, and sets of different rank are refused
    flat = V[:, :, :3].copy()
    flat[:, :, 2] = flat[:, :, 0]
    assert random_directions(flat).shape == (3, 400, 2)
    with pytest.raises(ValueError, match="different dimensions"):
        random_directions(np.concatenate([flat, V[:, :, :3]]))


def test_random_key_sets_streams_do_not_alias():
    a = random_key_sets(10, 3, 2, seed=5)
    np.testing.assert_array_equal(a, random_key_sets(10, 3, 2, seed=5))
    assert not np.array_equal(a, random_key_sets(10, 3, 2, seed=5 + 2**32))
    assert not np.array_equal(a, random_key_sets(10, 3, 2, seed=6))
    assert not np.array_equal(random_key_sets(10, 4, 2, seed=5)[..., :3], a)
    with pytest.raises(ValueError, match="seed must be a non-negative integer"):
        random_key_sets(10, 3, 2, seed=-1)
    with pytest.raises(ValueError, match="need n >= 2"):
        random_key_sets(1, 3, 2)


def test_baseline_comparison_agrees():
    cmp = compare_with_baseline([(3, 10), (4, 20)], runs=3, layer_norm=(False, True))
    assert cmp["verdicts_agree"] and cmp["keys"] == 3 * (10 + 10 + 20 + 20)
    assert cmp["unselectable_ours"] == cmp["unselectable_baseline"] > 0


def test_paper_cells_and_numbers_carry_their_source():
    rows = paper_cells(runs=20)
    assert [(r["d"], r["n"]) for r in rows] == list(PAPER_FIG1C_PROB_ANY)
    assert all(r["mean_ours"] <= r["p_ours"] for r in rows)
    assert PAPER_TABLE1.source == "Brody et al. (2023), Table 1"
    assert PAPER_TABLE1["without scaling"][0] == 51.0


def test_grid_presets_and_fade():
    assert GridConfig.paper().ns == tuple(range(3, 61)) and GridConfig.paper().runs == 100
    quick = GridConfig.quick()
    curves = fade_curves(GridConfig(fade_ds=(2, 6, 30), fade_ns=(30,), fade_runs=5))
    assert curves[30][0] > curves[30][1] >= curves[30][2] == 0.0
    assert quick.runs < 100


def test_grid_and_passages_scale_down():
    from lncourse.selectability.lm import MiniLMPassages
    g = GridConfig.paper().scaled(0.01)
    assert (g.ns, g.ds, g.runs, g.fade_runs) == (GridConfig().ns, GridConfig().ds, 2, 2)
    assert GridConfig.paper().scaled(1.0) == GridConfig.paper()
    assert MiniLMPassages.paper().scaled(0.01).passages == 2
    from lncourse.selectability.lm import KeysLMConfig
    lm = KeysLMConfig.quick().scaled(0.01)
    assert (lm.steps, lm.contexts, lm.block_size, lm.sweep) == (3, 2, 256, KeysLMConfig.quick().sweep)
    assert KeysLMConfig.quick().scaled(1.0) == KeysLMConfig.quick()
    with pytest.raises(ValueError, match="SCALE must lie in"):
        GridConfig.paper().scaled(0.0)
