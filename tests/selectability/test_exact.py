"""Selectability: exact agreement with Qhull, certificates, degenerate cases, bad input."""

import numpy as np
import pytest
import torch
from scipy.spatial import ConvexHull

import lncourse.selectability.exact as sl
from lncourse.layernorm import layer_norm
from lncourse.selectability.exact import Method, selectability, selectability_batch
from lncourse.selectability.experiments import (PAPER_FIG1C_PROB_ANY, GridConfig,
                                                prefix_unselectable_fraction, random_key_sets,
                                                selectability_lp_baseline, unselectable_grid)


def hull_vertices(K: np.ndarray) -> np.ndarray:
    """Independent answer: the vertices of the convex hull, from Qhull."""
    v = np.zeros(len(K), dtype=bool)
    v[ConvexHull(K).vertices] = True
    return v


def assert_certificates(K: np.ndarray, res) -> None:
    """Check every certificate here, independently of the module's own verification."""
    K = np.asarray(K, dtype=np.float64)
    for i in range(len(K)):
        differ = np.abs(K - K[i]).max(axis=1) > 1e-12 * np.abs(K).max()
        if res.selectable[i]:
            q = res.queries[i]
            assert np.isfinite(q).all() and np.isnan(res.weights[i]).all()
            if differ.any():
                assert q @ K[i] > (K[differ] @ q).max()
        else:
            w = res.weights[i]
            assert np.isnan(res.queries[i]).all()
            assert (w >= 0).all() and abs(w.sum() - 1) < 1e-9
            assert (w[~differ] == 0).all()          # not itself, not its duplicates
            np.testing.assert_allclose(w @ K, K[i], atol=1e-7)


@pytest.mark.parametrize("d", [2, 3, 4, 5])
def test_agrees_with_qhull_on_random_sets(d):
    rng = np.random.default_rng(d)
    for _ in range(40):
        n = int(rng.integers(d + 2, 35))
        K = rng.normal(size=(n, d)) * rng.uniform(0.1, 10)
        res = selectability(K)
        np.testing.assert_array_equal(res.selectable, hull_vertices(K))
        assert_certificates(K, res)


def test_baseline_agrees_with_qhull():
    rng = np.random.default_rng(1)
    for d in (2, 3, 4):
        for _ in range(10):
            K = rng.normal(size=(int(rng.integers(d + 2, 25)), d))
            np.testing.assert_array_equal(selectability_lp_baseline(K), hull_vertices(K))


def test_lp_fallback_alone_is_exact(monkeypatch):
    """Disable the cheap steps and NNLS: HiGHS must decide everything, identically."""
    def broken_nnls(*args, **kwargs):
        raise RuntimeError("disabled in this test")
    monkeypatch.setattr(sl, "nnls", broken_nnls)
    rng = np.random.default_rng(7)
    for _ in range(10):
        K = rng.normal(size=(20, 3))
        res = selectability(K, walk_steps=0)
        np.testing.assert_array_equal(res.selectable, hull_vertices(K))
        assert_certificates(K, res)
        assert (res.decided_by[~res.selectable] == Method.LP).all()
        assert res.method_counts()["nnls"] == 0


def test_nnls_alone_is_exact(monkeypatch):
    """Disable HiGHS: NNLS must decide every key the cheap steps leave, identically."""
    def broken_linprog(*args, **kwargs):
        raise AssertionError("the LP was called")
    monkeypatch.setattr(sl, "linprog", broken_linprog)
    rng = np.random.default_rng(8)
    K = rng.normal(size=(30, 4))
    res = selectability(K, walk_steps=0)
    np.testing.assert_array_equal(res.selectable, hull_vertices(K))
    assert_certificates(K, res)
    counts = res.method_counts()
    assert counts["nnls"] > 0 and counts["walk"] == 0 and counts["lp"] == 0
    assert sum(counts.values()) == len(K)


def test_batch_equals_one_set_at_a_time():
    keys = random_key_sets(25, 4, runs=6, seed=3)
    batch = selectability_batch(keys)
    for b in range(6):
        np.testing.assert_array_equal(batch.selectable[b], selectability(keys[b]).selectable)


def test_duplicates_count_as_one_point():
    square = np.array([[0, 0], [1, 0], [0, 1], [1, 1]], dtype=float)
    K = np.vstack([square, square[:1], [[0.5, 0.5]], [[0.5, 0.5]]])  # corner twice, centre twice
    res = selectability(K)
    np.testing.assert_array_equal(res.selectable, [True] * 5 + [False] * 2)
    assert_certificates(K, res)
    # a duplicate of an interior point is reproduced by the other keys, never by its twin
    assert res.weights[5, 6] == 0 and res.weights[6, 5] == 0


def test_all_keys_identical_is_one_selectable_point():
    res = selectability(np.ones((4, 3)))
    assert res.selectable.all()


def test_collinear_points():
    t = np.array([0.0, 0.3, 1.0, 0.7, 0.5])
    K = np.outer(t, [1.0, 2.0, -1.0]) + np.array([5.0, 0.0, 1.0])  # a segment in R^3
    res = selectability(K)
    np.testing.assert_array_equal(res.selectable, [True, False, True, False, False])
    assert_certificates(K, res)


@pytest.mark.parametrize("n, d", [(2, 5), (3, 3), (4, 3), (6, 5)])
def test_few_points_in_general_position_are_all_vertices(n, d):
    """n <= d + 1 affinely independent points: each is a vertex of their simplex."""
    K = np.random.default_rng(n * d).normal(size=(n, d))
    res = selectability(K)
    assert res.selectable.all()
    assert_certificates(K, res)


def test_simplex_with_its_barycentre():
    K = np.vstack([np.eye(3), np.full((1, 3), 1 / 3)])  # d + 1 = 4 points, one inside
    res = selectability(K)
    np.testing.assert_array_equal(res.selectable, [True, True, True, False])
    np.testing.assert_allclose(res.weights[3, :3], 1 / 3, atol=1e-9)


def test_layernorm_leaves_nothing_unselectable():
    x = torch.randn(50, 60, 4, dtype=torch.float64)
    assert selectability_batch(x).selectable.mean() < 0.95     # before: some inside
    assert selectability_batch(layer_norm(x)).selectable.all()
    gamma, beta = torch.rand(4, dtype=torch.float64) + 0.2, torch.randn(4, dtype=torch.float64)
    assert selectability_batch(layer_norm(x) * gamma + beta).selectable.all()  # ellipsoid


def test_invariant_to_translation_and_scale():
    rng = np.random.default_rng(2)
    K = rng.normal(size=(30, 3))
    expected = hull_vertices(K)
    for shift, factor in [(1e6, 1.0), (0.0, 1e-6), (-3.0, 1e4)]:
        np.testing.assert_array_equal(selectability(K * factor + shift).selectable, expected)


def test_torch_and_float32_input():
    x = torch.randn(20, 3)
    res = selectability(x)
    np.testing.assert_array_equal(res.selectable, hull_vertices(x.double().numpy()))


@pytest.mark.parametrize("bad, error, match", [
    (np.zeros((1, 3)), ValueError, "at least 2 keys"),
    (np.array([[0.0, np.nan], [1.0, 2.0]]), ValueError, "NaN"),
    (np.array([[0.0, np.inf], [1.0, 2.0]]), ValueError, "NaN or infinite"),
    (np.zeros(5), ValueError, r"shape \(n, d\)"),
    (np.zeros((2, 3, 4)), ValueError, "selectability_batch"),
    (np.zeros((3, 2), dtype=int), TypeError, "floating"),
    ([[0.0, 1.0], [1.0, 0.0]], TypeError, "NumPy array"),
])
def test_bad_input_raises(bad, error, match):
    with pytest.raises(error, match=match):
        selectability(bad)


def test_prefix_fraction_by_hand():
    # keys in order: two corners, the midpoint, a far point: for t = 2 the midpoint of
    # the segment is inside (1 of 3), for t = 3 it still is (1 of 4); t = 1: 0 of 2
    K = np.array([[[0.0, 0.0], [2.0, 0.0], [1.0, 0.0], [1.0, 5.0]]])
    assert prefix_unselectable_fraction(K) == pytest.approx(2 / 9)
    assert prefix_unselectable_fraction(K, positions=[1]) == 0.0
    with pytest.raises(ValueError, match="query positions"):
        prefix_unselectable_fraction(K, positions=[0])


def test_grid_matches_paper_reference_points():
    """The released code's P(at least one unselectable) at two cells (100 runs each)."""
    g = unselectable_grid(GridConfig(ns=(10,), ds=(3, 4), runs=100), progress=False)
    for a, d in enumerate([3, 4]):
        assert abs(g["prob_any"][a, 0] - PAPER_FIG1C_PROB_ANY[(d, 10)]) < 0.12
    assert g["mean_fraction"][0, 0] < g["prob_any"][0, 0]
    ln = unselectable_grid(GridConfig(ns=(10,), ds=(3,), runs=20), layer_norm=True,
                           progress=False)
    assert ln["prob_any"].max() == 0.0


def test_plotting_functions_return_figures():
    from matplotlib.figure import Figure

    from lncourse.selectability import figures as ps
    K = np.random.default_rng(0).normal(size=(15, 2))
    sel = selectability(K).selectable
    fig = ps.keys_hull_2d(K, sel, angle=1.0)
    assert isinstance(fig, Figure)
    # the circled winner is the top-scoring key, and it is a vertex
    assert sel[np.argmax(K @ np.array([np.cos(1.0), np.sin(1.0)]))]
    with pytest.raises(ValueError, match=r"\(n, 2\)"):
        ps.keys_hull_2d(np.zeros((4, 3)), np.ones(4, dtype=bool))
    g = unselectable_grid(GridConfig(ns=(5, 10), ds=(3, 4), runs=5), progress=False)
    assert isinstance(ps.unselectable_heatmaps(g["ns"], g["ds"], {"a": g["prob_any"]},
                                               reference={(3, 10): 0.9}), Figure)
    assert isinstance(ps.fraction_vs_dimension([2, 3], {"n = 5": [0.5, 0.1]}, "y"), Figure)
    hist = {"step": [0, 1], "train_loss": [3.0, 2.0], "test_loss": [3.1, 2.5]}
    assert isinstance(ps.lm_loss_curves({"m": hist}), Figure)
    assert isinstance(ps.layer_fractions({"a": [1, 2], "b": [3, 4]}, hatched=("b",)), Figure)
    fig = ps.fraction_vs_context([32, 64, 128], {"left": {"a": [1, 2, 3], "b (fast)": [1, 2]},
                                                 "right": {"c": [3, 4, 5]}},
                                 proxy={"left": ("Gaussian", [2, 3, 4])})
    assert isinstance(fig, Figure) and len(fig.axes) == 2
    assert [len(line.get_xdata()) for line in fig.axes[0].lines] == [3, 2, 3]
    assert fig.axes[0].lines[1].get_linestyle() == ":"         # "(fast)" is dotted
    assert isinstance(ps.fraction_vs_step([0, 10], {"a": [5.0, 3.0]}), Figure)


def test_verification_rejects_wrong_certificates():
    """The final check must bite: a query that does not win, or weights that do not
    reproduce the key, raise instead of being returned."""
    K = np.array([[[0.0, 0.0], [2.0, 0.0], [0.0, 2.0], [0.5, 0.5]]])
    res = selectability_batch(K)
    same = np.eye(4, dtype=bool)[None]
    tol = np.array([1e-12])
    sl._verify(K - K.mean(1, keepdims=True), same, tol, res.selectable, res.queries,
               res.weights)  # the real certificates pass
    Kc = K - K.mean(1, keepdims=True)
    bad_q = res.queries.copy()
    bad_q[0, 1] = -bad_q[0, 1]                      # key 1 now loses under its query
    with pytest.raises(RuntimeError, match="witness queries"):
        sl._verify(Kc, same, tol, res.selectable, bad_q, res.weights)
    bad_w = res.weights.copy()
    bad_w[0, 3] = [0.5, 0.5, 0.0, 0.0]              # reproduces (1, 0), not (0.5, 0.5)
    with pytest.raises(RuntimeError, match="convex weights"):
        sl._verify(Kc, same, tol, res.selectable, res.queries, bad_w)


def test_long_contexts_agree_with_qhull_and_use_column_generation():
    """n = 300 keys (the one-set walk by matrix products, n >= 256) in 6 dimensions,
    stretched so the hull is anisotropic: Qhull's vertices, every certificate valid, and
    nearly all keys past the walk certified by the warm-started column generation."""
    rng = np.random.default_rng(11)
    K = rng.normal(size=(300, 6)) * np.array([5.0, 2.0, 1.0, 1.0, 0.5, 0.2])
    res = selectability(K)
    np.testing.assert_array_equal(res.selectable, hull_vertices(K))
    assert_certificates(K, res)
    counts = res.method_counts()
    assert counts["nnls"] > 50 and counts["lp"] == 0


def test_column_generation_alone_certifies_both_kinds():
    from lncourse.selectability.search import column_generation
    K = np.array([[0.0, 0.0], [2.0, 0.0], [0.0, 2.0], [2.0, 2.0], [1.0, 1.0], [3.0, 1.0]])
    Kc = K - K.mean(0)
    same = np.eye(6, dtype=bool)
    start = np.array([0, 1])                  # from two columns, it must grow
    for i, kind in ((4, "weights"), (5, "query")):
        cert, _ = column_generation(Kc, same[i], i, 1.0, 1e-12, start, sl.nnls)
        assert cert[0] == kind
        if kind == "weights":
            np.testing.assert_allclose(cert[1] @ Kc, Kc[i], atol=1e-12)
        else:
            q = cert[1]
            assert q @ Kc[i] > np.delete(Kc @ q, i).max()
