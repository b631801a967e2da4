"""Tests for lncourse.majority.stats: per-seed summaries, paired intervals, the 2 x 2 design."""

from __future__ import annotations

import numpy as np
import pytest
from scipy import stats

from lncourse.majority import stats as S


def test_steps_to_threshold_and_censoring():
    steps = np.array([0, 10, 20, 30])
    vals = np.array([[0.1, 0.5, 0.95, 0.99], [0.1, 0.2, 0.3, 0.4], [0.9, 0.9, 0.9, 0.9]])
    out = S.steps_to_threshold(steps, vals, 0.9)
    assert out[0] == 20 and np.isnan(out[1]) and out[2] == 0
    assert S.steps_to_threshold(steps, vals, 0.9, censor=30)[1] == 30
    with pytest.raises(ValueError, match="3 values per run for 4 steps"):
        S.steps_to_threshold(steps, vals[:, :3])


def test_window_mean_is_the_area_under_the_curve():
    steps = np.array([0, 100, 300, 600])
    vals = np.array([[0.0, 1.0, 1.0, 0.4], [0.5, 0.5, 0.5, 0.5]])
    # by hand: [0, 300]: (0.5*100 + 1*200) / 300
    np.testing.assert_allclose(S.window_mean(steps, vals, 300), [250 / 300, 0.5])
    np.testing.assert_allclose(S.window_mean(steps, vals),
                               np.trapezoid(vals, steps, axis=1) / 600)
    with pytest.raises(ValueError, match="step 200 was not evaluated"):
        S.window_mean(steps, vals, 200)
    with pytest.raises(ValueError, match="outside the run"):
        S.window_mean(steps, vals, 700)


def test_paired_interval_matches_scipy():
    d = np.array([0.3, -0.1, 0.25, 0.4, 0.05, 0.2])
    mean, low, high = S.paired_interval(d)
    ci = stats.ttest_1samp(d, 0.0).confidence_interval(0.95)
    assert mean == pytest.approx(d.mean())
    assert (low, high) == pytest.approx((ci.low, ci.high))
    with pytest.raises(ValueError, match="two finite paired differences"):
        S.paired_interval(np.array([1.0, np.nan]))


def test_factorial_effects_recover_known_effects():
    rng = np.random.default_rng(0)
    seed_luck = rng.normal(0, 5, size=8)             # shared by the cells of a seed
    noise = lambda: rng.normal(0, 0.01, size=8)      # noqa: E731
    # value = 10 + a p + b s + c p s with a = 1, b = 4, c = 2 (projection helps more at
    # the paper's scale): projection effect a + c/2 = 2, scale b + c/2 = 5, interaction c
    cells = {"layernorm": 17 + seed_luck + noise(), "no_projection": 14 + seed_luck + noise(),
             "layernorm_released_scale": 11 + seed_luck + noise(),
             "no_projection_released": 10 + seed_luck + noise()}
    eff = S.factorial_effects(cells)
    assert eff["projection"][0] == pytest.approx(2.0, abs=0.02)
    assert eff["scale"][0] == pytest.approx(5.0, abs=0.02)
    assert eff["interaction"][0] == pytest.approx(2.0, abs=0.03)
    assert eff["projection_at_released_scale"][0] == pytest.approx(1.0, abs=0.03)
    assert eff["projection_at_paper_scale"][0] == pytest.approx(3.0, abs=0.03)
    # pairing removes the seeds' luck: intervals are narrow despite std 5 across seeds
    assert eff["scale"][2] - eff["scale"][1] < 0.1
    with pytest.raises(ValueError, match="no_projection_released"):
        S.factorial_effects({k: v for k, v in cells.items() if k != "no_projection_released"})


def test_equivalence_bound_is_the_widest_end_of_the_90_percent_interval():
    d = np.array([0.1, -0.2, 0.05, 0.0, 0.15, -0.05])
    _, low, high = S.paired_interval(d, 0.90)
    assert S.equivalence_bound(d) == pytest.approx(max(-low, high))
    assert S.equivalence_bound(d) < S.equivalence_bound(d * 3)


def test_per_seed_metrics_on_a_history():
    steps = [0, 100, 200]
    history = {"config": {"lr": 1e-3}, "variant": ["a", "a", "b", "b"], "seed": [1, 2, 1, 2],
               "lr": [1e-3] * 4, "step": steps,
               "test_acc": [[0.3, 0.3, 0.3, 0.3], [0.85, 0.5, 0.7, 0.95], [0.95, 0.92, 0.8, 0.99]],
               "train_loss": [[1.0] * 4] * 3, "query_angle": [[45.0] * 4] * 3}
    assert list(S.per_seed(history, "steps_to_90")["a"]) == [200, 200]
    assert list(S.per_seed(history, "steps_to_90")["b"]) == [200, 100]   # censored at 200
    assert list(S.per_seed(history, "acc_at_100")["b"]) == [0.7, 0.95]
    np.testing.assert_allclose(S.per_seed(history, "mean_acc_to_100")["a"],
                               [(0.3 + 0.85) / 2, (0.3 + 0.5) / 2])
    with pytest.raises(ValueError, match="unknown metric"):
        S.per_seed(history, "speed")


def test_reproduction_rows_never_compare_the_end_of_training_with_a_run_still_going():
    steps = [0, 1000, 5000, 6000]
    n = 2
    history = {"config": {"lr": 1e-3, "steps": 14_000}, "step": steps,
               "variant": ["layernorm", "no_projection_released"] * n, "seed": [1, 1, 2, 2],
               "lr": [1e-3] * 4,
               "test_acc": [[0.33] * 4, [0.75, 0.55] * n, [0.93, 0.85] * n, [0.94, 0.88] * n],
               "train_loss": [[2.0] * 4, [1.0] * 4, [0.2, 0.4] * n, [0.18, 0.35] * n],
               "query_angle": [[70.0] * 4, [50.0] * 4, [25.0, 80.0] * n, [20.0, 78.0] * n]}
    rows = {r[0]: r[3] for r in S.reproduction_rows(history)}
    assert rows["test accuracy, layernorm, step 5,000"] == "0.93 ± 0.00"
    # the paper's angle is at the end of training (step 14,000); this run stopped at 6,000
    assert rows["query angle (degrees), layernorm, step 14,000"] == \
        "not reached (at step 6,000: 20.00 ± 0.00)"
    history["step"] = [0, 1000, 5000, 14_000]
    rows = {r[0]: r[3] for r in S.reproduction_rows(history)}
    assert rows["query angle (degrees), layernorm, step 14,000"] == "20.00 ± 0.00"


def test_paired_rows_subtract_b_from_a_per_seed():
    values = {"m": {"a": np.array([3.0, 5.0, 4.0]), "b": np.array([1.0, 2.0, 3.0])}}
    rows = S.paired_rows(values, [("a", "b"), ("b", "a")], {"m": "{:+.2f}"})
    mean, low, high = S.paired_interval(np.array([2.0, 3.0, 1.0]))
    assert rows[0] == ("`a` − `b`", f"{mean:+.2f} [{low:+.2f}, {high:+.2f}]")
    assert rows[1][1].startswith(f"{-mean:+.2f} [{-high:+.2f}, ")


def test_markdown_table_escapes_bare_pipes():
    """Issue 19: a header "|mean| of output" ended its cell early and the table rendered
    as raw text; every cell's "|" is escaped (once)."""
    from lncourse.majority.stats import markdown_table

    text = markdown_table(("variant", "|mean| of output"), [("a", "x \\| y")])
    assert text.splitlines()[0] == "| variant | \\|mean\\| of output |"
    assert text.splitlines()[2] == "| a | x \\| y |"
    assert all(line.replace("\\|", "").count("|") == 3 for line in text.splitlines())
