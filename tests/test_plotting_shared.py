"""Conventions every figure function follows (each chapter's ``figures``), and the shared
helpers of lncourse.plotting."""

import inspect
import re
from pathlib import Path

import matplotlib.pyplot as plt
import numpy as np
import pytest
from matplotlib.figure import Figure

from lncourse import plotting
from lncourse.geometry import figures as geometry_figures
from lncourse.majority import figures as majority_figures
from lncourse.nope import figures as nope_figures
from lncourse.selectability import figures as selectability_figures
from lncourse.plotting.style import COLORS, SERIES, blank_figure, figure_and_axes

PLOTTING = Path(plotting.__file__).parent
CHAPTER_FIGURES = [geometry_figures, majority_figures, nope_figures, selectability_figures]
FIGURE_MODULES = ([p for p in sorted(PLOTTING.glob("*.py")) if p.stem not in ("__init__", "style")]
                  + [Path(m.__file__) for m in CHAPTER_FIGURES])


def _figure_functions():
    for module in CHAPTER_FIGURES + [plotting]:
        for name in dir(module):
            fn = getattr(module, name)
            if (inspect.isfunction(fn) and fn.__module__ != "lncourse.plotting.style"
                    and inspect.signature(fn).return_annotation in (Figure, "Figure")):
                yield f"{module.__name__}.{name}", fn


def test_every_figure_function_takes_ax():
    names = dict(_figure_functions())
    assert len(names) >= 19, sorted(names)
    missing = [n for n, fn in names.items() if "ax" not in inspect.signature(fn).parameters]
    assert missing == []


@pytest.mark.parametrize("path", FIGURE_MODULES, ids=lambda p: f"{p.parent.name}/{p.stem}")
def test_one_way_to_get_axes_and_no_colour_outside_COLORS(path):
    source = path.read_text()
    assert "ax is None" not in source and "new_figure(" not in source and "add_subplot" not in source
    literals = re.findall(r"#[0-9a-fA-F]{6}\b|color=\"(?!none\")\w+\"|f\"C\{|\"(?:k|white|black)\"",
                          source)  # "none" is no fill, not a colour
    assert literals == []


def test_colours_are_defined_once():
    values = [v for k, v in COLORS.items()]
    assert all(re.fullmatch(r"#[0-9a-f]{6}", v) for v in values)
    assert set(SERIES) <= set(values)
    assert "rmsnorm" not in COLORS  # one name per norm: RMSNorm is "no_projection"


def test_figure_and_axes():
    fig, ax = figure_and_axes()
    assert isinstance(fig, Figure) and fig.axes == [ax]
    fig, axes = figure_and_axes(n=3, projection="3d")
    assert len(axes) == 3 and all(a.name == "3d" for a in axes)
    host = blank_figure()
    given = host.subplots(1, 2)
    fig, axes = figure_and_axes(given, 2)
    assert fig is host and list(axes) == list(given)
    with pytest.raises(ValueError, match="this figure has 2 panel\\(s\\); pass 2 axes, got 1"):
        figure_and_axes(given[0], 2)
    with pytest.raises(ValueError, match="draws in 3-D"):
        figure_and_axes(given[0], projection="3d")


def test_figures_draw_into_given_axes():
    plt.close("all")
    host = blank_figure(12, 8)
    rng = np.random.default_rng(0)
    pts = rng.normal(size=(20, 3))
    three = [host.add_subplot(3, 3, i + 1, projection="3d") for i in range(3)]
    assert geometry_figures.ln_pipeline_3d(pts, pts, pts, ax=three) is host
    assert geometry_figures.ellipse_in_plane(pts, pts, np.ones(3), np.zeros(3),
                                     ax=host.add_subplot(3, 3, 4, projection="3d")) is host
    panels = {"a": (pts, pts), "b": (pts, pts)}
    two_3d = [host.add_subplot(3, 3, 5 + i, projection="3d") for i in range(2)]
    assert majority_figures.keys_queries_3d(panels, ax=two_3d) is host
    flat = [host.add_subplot(3, 3, 7 + i) for i in range(2)]
    history = {"step": [0, 1, 2], "train_loss": [3, 2, 1], "test_loss": [3, 2.5, 2]}
    assert selectability_figures.lm_loss_curves({"m": history}, ax=flat) is host
    assert geometry_figures.variance_errors([1, 10], {"two-pass": [1e-3, 1e-3]},
                                    ax=host.add_subplot(3, 3, 9)) is host
    assert len(host.axes) == 9 and plt.get_fignums() == []


def test_interactive_figure_redraws_on_change(monkeypatch):
    monkeypatch.delenv("LNCOURSE_NO_WIDGETS", raising=False)   # test.sh sets it
    import ipywidgets as widgets

    calls = []

    def draw(a, b):
        calls.append((a, b))
        return geometry_figures.folding_errors([0, 1], {"x": [a, b]})

    w = plotting.interactive_figure(draw, a=widgets.FloatSlider(value=1.0, min=0.5, max=2.0),
                                    b=(1.0, 3.0, 0.5))
    assert isinstance(w, widgets.interactive) and calls == [(1.0, 2.0)]
    w.children[0].value = 1.5
    assert calls[-1] == (1.5, 2.0)
    w = plotting.interactive_figure(draw, a=dict(value=0.7, min=0.5, max=2.0), b=(1.0, 3.0))
    assert w.children[0].value == 0.7 and calls[-1] == (0.7, 2.0)


def test_a_widget_starts_at_the_draw_functions_defaults(monkeypatch):
    """A range or a list of options for an argument with a default starts at that
    default, as the static figure does (chapter 3's 3-D view opened edge-on, at the
    ranges' middles, 0 and 0, when ``interactive`` read the abbreviations itself)."""
    monkeypatch.delenv("LNCOURSE_NO_WIDGETS", raising=False)
    import ipywidgets as widgets

    calls = []

    def draw(elev=20, azim=-60.0, kind="y"):
        calls.append((elev, azim, kind))
        return geometry_figures.folding_errors([0, 1], {"x": [1.0, 2.0]})

    w = plotting.interactive_figure(draw, elev=(-90, 90, 5), azim=(-180.0, 180.0),
                                    kind=["x", "y"])
    assert calls == [(20, -60.0, "y")]
    assert [c.value for c in w.children[:3]] == [20, -60.0, "y"]
    assert isinstance(w.children[0], widgets.IntSlider)
    w.children[1].value = 30.0
    assert calls[-1] == (20, 30.0, "y")


def test_without_a_front_end_no_widget_is_built(monkeypatch):
    """LNCOURSE_NO_WIDGETS (the site build, the tests, the grader): the static figure at
    the controls' starting values, and not one widget constructed."""
    import ipywidgets as widgets
    from matplotlib.figure import Figure

    calls = []

    def draw(a, c, b=2.5):
        calls.append((a, b, c))
        return geometry_figures.folding_errors([0, 1], {"x": [a, b]})

    monkeypatch.setenv("LNCOURSE_NO_WIDGETS", "1")
    monkeypatch.setattr(widgets.Widget, "__init__", lambda *a, **k: pytest.fail("a widget"))
    fig = plotting.interactive_figure(draw, a=dict(value=0.7, min=0, max=1), b=(1.0, 3.0),
                                      c=["y", "x"])
    assert isinstance(fig, Figure) and calls == [(0.7, 2.5, "y")]
    monkeypatch.setenv("LNCOURSE_NO_WIDGETS", "0")
    assert plotting.widgets_enabled()


def test_figure_png_is_sharp_and_its_text_readable_in_the_column():
    """Issue 19: PNGs were 1x, and a figure wider than the column had its text shrunk to
    about 7.5 px. figure_png draws at 2x with 1x size metadata, and enlarges the text of
    a wide figure so that, shrunk to the column, none is under MIN_TEXT_PX."""
    import io

    from PIL import Image

    from lncourse.plotting.style import COLUMN_PX, MIN_TEXT_PX, PNG_TEXT_KEY, figure_png

    for width in (6.4, 12.0):
        fig, axes = figure_and_axes(n=2, width=width, height=3.0)
        for a in axes:
            a.plot([0, 1], [0, 1], label="a line")
            a.set_xlabel("x")
            a.legend()
        data, meta = figure_png(fig)
        image = Image.open(io.BytesIO(data))
        assert image.size[0] in (2 * meta["width"], 2 * meta["width"] + 1)
        shown = min(1.0, COLUMN_PX / meta["width"])         # the site shrinks it to fit
        assert float(image.text[PNG_TEXT_KEY]) * shown >= MIN_TEXT_PX - 0.05, (width, shown)


def test_wide_multi_panel_figures_wrap_into_rows_of_two():
    fig, axes = figure_and_axes(n=3, width=12.6, height=3.6)
    assert len(axes) == 3 and len(fig.axes) == 3
    assert fig.get_figwidth() == pytest.approx(8.4) and fig.get_figheight() == pytest.approx(7.2)
    fig, axes = figure_and_axes(n=3, width=6.0)           # fits: side by side
    assert fig.get_figwidth() == pytest.approx(6.0)


def test_the_site_draws_a_phone_layout_inside_the_figure(monkeypatch):
    """Issue 19: on a 390 px phone the figures' text was 5 to 7 px. For the site
    (LNCOURSE_SITE_FIGURES) figure_png stores a second PNG in the figure's: the panels
    stacked one per row, at most PHONE_COLUMN_PX wide, its smallest text PHONE_MIN_TEXT_PX;
    the figure the notebook shows is not changed by it, and outside the site there is none."""
    import base64
    import io

    from PIL import Image

    from lncourse.plotting.phone import PHONE_COLUMN_PX, PHONE_MIN_TEXT_PX, PHONE_PNG_KEY
    from lncourse.plotting.style import PNG_TEXT_KEY, figure_png, legend_below

    def three_panels():
        fig, axes = figure_and_axes(n=3, width=12.6, height=3.6)
        for a in axes:
            a.plot([0, 1], [0, 1], label="LayerNorm")
            a.plot([0, 1], [1, 0], label="RMSNorm")
            a.set_title("one panel of three")
        twin = axes[2].twinx()
        twin.plot([0, 1], [2, 3])
        im = axes[1].imshow(np.eye(3))
        fig.colorbar(im, ax=axes[1])
        axes[0].plot([0, 1], [0.5, 0.5], label="LayerNorm at the released scale (LN(x)/d)")
        legend_below(axes[0], ncol=4)
        return fig

    monkeypatch.delenv("LNCOURSE_SITE_FIGURES", raising=False)
    data, _ = figure_png(three_panels())
    assert PHONE_PNG_KEY not in Image.open(io.BytesIO(data)).text
    monkeypatch.setenv("LNCOURSE_SITE_FIGURES", "1")
    fig = three_panels()
    positions = [a.get_position().bounds for a in fig.axes]
    data, meta = figure_png(fig)
    assert [a.get_subplotspec().get_geometry()[:2] for a in fig.axes[:3]] == [(2, 2)] * 3
    phone = Image.open(io.BytesIO(base64.b64decode(Image.open(io.BytesIO(data)).text[PHONE_PNG_KEY])))
    width, height = phone.size[0] / 2, phone.size[1] / 2
    assert PHONE_COLUMN_PX - 40 <= width <= PHONE_COLUMN_PX + 0.5
    assert height > 2.5 * width, "three panels one under the other"
    assert float(phone.text[PNG_TEXT_KEY]) >= PHONE_MIN_TEXT_PX - 0.05
    assert float(Image.open(io.BytesIO(data)).text[PNG_TEXT_KEY]) * min(1, 688 / meta["width"]) >= 9


def test_stack_panels_keeps_reading_order_and_twins_together():
    from lncourse.plotting.phone import stack_panels

    fig, axes = figure_and_axes(n=4, width=12.8, height=3.0)     # rows of two
    twin = axes[1].twinx()
    assert stack_panels(fig) == 4
    rows = [a.get_subplotspec().rowspan.start for a in (*axes, twin)]
    assert rows == [0, 1, 2, 3, 1]
    assert all(a.get_subplotspec().get_geometry()[:2] == (4, 1) for a in fig.axes)
    fig, ax = figure_and_axes(n=1)
    assert stack_panels(fig) == 1
    # panels that shared y showed its labels once (first column); stacked, each shows them
    fig, axes = figure_and_axes(n=2, width=9.0, height=3.0, sharey=True)
    axes[0].set_ylabel("fraction (%)")
    twin = axes[1].twinx()
    stack_panels(fig)
    fig.canvas.draw()
    for a in axes:
        assert a.yaxis.get_label_text() == "fraction (%)"
        assert any(t.get_visible() and t.get_text() for t in a.get_yticklabels())
    assert twin.yaxis.get_ticks_position() == "right"


def test_3d_frames_keep_their_tick_labels_apart():
    """Issue 19 (phone layouts): with matplotlib's default ticks a 3-D frame of [-1.5, 1.5]
    had seven labels per axis (-1.5, -1.0, ..., 1.5) that ran into each other."""
    from lncourse.plotting.space3d import frame_3d

    fig, ax = figure_and_axes(n=1, projection="3d")
    frame_3d(ax, 1.5, elev=20, azim=-60)
    for axis in (ax.xaxis, ax.yaxis, ax.zaxis):
        ticks = [t for t in axis.get_majorticklocs() if -1.5 <= t <= 1.5]
        assert 3 <= len(ticks) <= 5, ticks


def test_3d_axis_labels_keep_clear_of_their_tick_labels():
    """Issue 61: in Figure 1.1 the label "x3" sat on the z axis's tick labels ("0.0").
    Every axis label of every panel is drawn clear of its own axis's tick labels."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg

    from lncourse.geometry.figures import ln_pipeline_demo

    fig = ln_pipeline_demo()
    canvas = FigureCanvasAgg(fig)
    canvas.draw()
    renderer = canvas.get_renderer()
    for ax in fig.axes:
        for axis in (ax.xaxis, ax.yaxis, ax.zaxis):
            label = axis.label.get_window_extent(renderer)
            ticks = [t.label1.get_window_extent(renderer) for t in axis.get_major_ticks()
                     if t.label1.get_visible() and t.label1.get_text()]
            assert ticks
            hits = [b for b in ticks if label.overlaps(b)]
            assert not hits, (ax.get_title(), axis.label.get_text())
