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
