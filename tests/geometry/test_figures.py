import matplotlib.pyplot as plt
import numpy as np
from matplotlib.figure import Figure

from lncourse.geometry import figures


def test_figures_are_returned_not_shown():
    plt.close("all")
    rng = np.random.default_rng(0)
    pts = rng.normal(size=(50, 3))
    centred = pts - pts.mean(1, keepdims=True)
    scaled = np.sqrt(3) * centred / np.linalg.norm(centred, axis=1, keepdims=True)
    figs = [
        figures.ln_pipeline_3d(pts, centred, scaled),
        figures.plane_to_two_points(pts, scaled, np.array([1, -1, 0]) / np.sqrt(2), pts[:, 0]),
        figures.ellipse_in_plane(scaled, scaled * 2 + 1, np.array([2, 2, 2]), np.ones(3)),
        figures.variance_errors(np.logspace(0, 2, 5), {"one-pass, float16": np.ones(5), "two-pass, float16": np.full(5, 1e-4)}),
        figures.attention_inputs({"pre": {"mean_abs_mean": [0, 0], "norm_over_sqrt_d": [1, 1]}}),
        figures.folding_errors(range(2), {"scores": [1e-6, 2e-6]}),
    ]
    assert all(isinstance(f, Figure) for f in figs)
    assert plt.get_fignums() == []  # not managed by pyplot: shown once, by the cell that ends with it
    ax = figs[3].axes[0]
    assert ax.get_xlabel().islower() and ax.get_yscale() == "log"


def test_interactive_explorer_builds(monkeypatch):
    monkeypatch.delenv("LNCOURSE_NO_WIDGETS", raising=False)   # test.sh sets it
    import ipywidgets as widgets

    w = figures.explore_ln_3d(np.random.default_rng(1).normal(size=(20, 3)))
    assert isinstance(w, widgets.interactive)
    names = {c.description for c in w.children if isinstance(c, widgets.FloatSlider)}
    assert names == {"elevation", "azimuth", "shift along 1"}


def test_pipeline_figure_is_one_row_and_shows_each_step():
    """Figure 1.1: three panels side by side (issue 36: it was laid out 2 + 1), the first
    drawing each input's move along 1, the second each centred point's move along its
    own ray to radius sqrt(3), the third the ellipse gamma * y + beta."""
    fig = figures.ln_pipeline_demo(n=60)
    fig.canvas.draw()
    axes = fig.axes
    assert len(axes) == 3
    rows = {round(a.get_position().y0, 3) for a in axes}
    assert len(rows) == 1, f"panels in {len(rows)} rows"

    def segments(ax):
        out = []
        for line in ax.lines:
            x, y, z = (np.asarray(c, dtype=float) for c in line.get_data_3d())
            if len(x) == 2:
                out.append(np.array([x[1] - x[0], y[1] - y[0], z[1] - z[0]]))
        return out

    ones = np.ones(3) / np.sqrt(3)
    moves = [s for s in segments(axes[0]) if np.linalg.norm(s) > 1e-9]
    assert len(moves) >= 20
    assert all(abs(abs(s @ ones) / np.linalg.norm(s) - 1) < 1e-9 for s in moves), \
        "the first panel's moves are not along 1"
    rays = [s for s in segments(axes[1]) if np.linalg.norm(s) > 1e-9]
    assert len(rays) >= 20
    assert all(abs(s @ ones) < 1e-9 for s in rays), "the scaling moves leave the plane"
    # the third panel draws a closed curve that is not a circle of radius sqrt(3) at 0
    curves = [np.stack(l.get_data_3d(), 1) for l in axes[2].lines if len(l.get_xdata()) > 50]
    radii = [np.linalg.norm(c - c.mean(0), axis=1) for c in curves]
    assert any(r.max() - r.min() > 0.1 for r in radii), "no ellipse in the third panel"
