"""One look for every figure in the course: colours, style, and where figures are drawn."""

from __future__ import annotations

from typing import Sequence

import matplotlib as mpl
import numpy as np
from matplotlib.axes import Axes
from matplotlib.figure import Figure

# Every colour of the course, one per model variant or role, used across all chapters.
# Okabe and Ito's colour-blind-safe palette (with two of Paul Tol's for the ninth and
# tenth variants): no two variants that share a figure differ only in red against
# brown or green (issue 19 found red and brown series hard to tell apart).
COLORS = {
    "layernorm": "#0072b2",                          # blue
    "no_projection": "#e69f00",   # = RMSNorm        # orange
    "no_projection_released": "#d55e00",             # vermillion
    "layernorm_released_scale": "#56b4e9",           # sky blue
    "no_projection_sigma": "#009e73",                # bluish green
    "no_projection_released_value_scaled": "#cc79a7",  # reddish purple
    "no_projection_released_gain": "#882255",        # wine (Tol)
    "no_scaling": "#332288",                         # indigo (Tol)
    "none": "#7f7f7f",
    "theory": "#000000",
    "paper": "#d55e00",
    "ours": "#0072b2",
    "input": "#7f7f7f",
    "projected": "#009e73",
    "scaled": "#0072b2",
    "affine": "#cc79a7",
    "highlight": "#d55e00",
    "ink": "#000000",             # arrows, outlines and markers that are not data
    "background": "#ffffff",      # open markers, text on dark cells
}
# Several curves of one kind (e.g. query positions), in this order.
SERIES = tuple(COLORS[k] for k in ("layernorm", "no_projection", "projected", "highlight",
                                   "no_scaling", "layernorm_released_scale", "none"))


def use_style() -> None:
    """Set the course's matplotlib style (call once, in a chapter's set-up cell).

    In a notebook it also switches on inline figures right away: the course's figures
    are ``Figure`` objects that a cell shows by ending with them, and IPython renders
    them as images only once the inline backend is active.
    """
    try:
        from IPython import get_ipython
        shell = get_ipython()
    except ImportError:
        shell = None
    if shell is not None and getattr(shell, "kernel", None) is not None:
        shell.run_line_magic("matplotlib", "inline")
        # Figures display as PNGs at twice their size (sharp on HiDPI screens), their
        # text enlarged where the figure is wider than the page's column (figure_png).
        shell.display_formatter.formatters["image/png"].for_type(Figure, figure_png)
    mpl.rcParams.update({
        "figure.dpi": 100,
        "savefig.dpi": 150,
        "figure.figsize": (6.4, 4.0),
        "axes.grid": True,
        "grid.alpha": 0.3,
        "axes.spines.top": False,
        "axes.spines.right": False,
        "axes.titlesize": 11,
        "axes.labelsize": 10,
        "legend.fontsize": 9,
        "legend.frameon": False,
        "font.size": 10,
    })


def blank_figure(width: float = 6.4, height: float = 4.0) -> Figure:
    """An empty figure that pyplot does not manage.

    Built with ``matplotlib.figure.Figure`` rather than ``plt.figure``, so a notebook
    shows it exactly once, when a cell ends with it, and nothing needs closing.
    """
    return Figure(figsize=(width, height), layout="constrained")


def new_figure(nrows: int = 1, ncols: int = 1, width: float = 6.4, height: float = 4.0,
               **kwargs) -> tuple[Figure, Axes | np.ndarray]:
    """A figure (see :func:`blank_figure`) and its axes, as ``plt.subplots`` returns them."""
    fig = blank_figure(width, height)
    axes = fig.subplots(nrows, ncols, **kwargs)
    return fig, axes


COLUMN_INCHES = 7.2    # the site's column at figure.dpi = 100 (COLUMN_PX below)


def _grid(n: int, width: float) -> tuple[int, int]:
    """Rows and columns for ``n`` panels of a figure ``width`` inches wide: side by side
    when they fit the column (within 40 %), else in rows of two (issue 19: three panels
    side by side were shrunk to about half size on the site)."""
    if n <= 2 or width <= 1.4 * COLUMN_INCHES:
        return 1, n
    return -(-n // 2), 2


def figure_and_axes(ax: Axes | Sequence[Axes] | None = None, n: int = 1,
                    width: float = 6.4, height: float = 4.0, projection: str | None = None,
                    **kwargs) -> tuple[Figure, Axes | np.ndarray]:
    """Where a figure function draws: the given axes, or a new figure with ``n`` panels.

    ``ax``: one ``Axes`` (``n = 1``) or a sequence of ``n`` (a multi-panel figure drawn
    into a larger one), or None for a new :func:`blank_figure` of ``width`` x ``height``
    with ``n`` panels side by side, or in rows of two when they would be too wide for the
    site's column (``projection="3d"`` for 3-D panels; ``kwargs`` go to
    ``Figure.subplots``). Returns the figure and one ``Axes`` (n = 1) or an array of n.
    """
    if ax is None:
        rows, cols = _grid(n, width)
        fig = blank_figure(width * cols / n, height * rows)
        if projection is not None:
            axes = np.array([fig.add_subplot(rows, cols, i + 1, projection=projection)
                             for i in range(n)])
            return fig, axes[0] if n == 1 else axes
        if rows == 1:
            return fig, fig.subplots(1, n, **kwargs)
        grid = np.asarray(fig.subplots(rows, cols, **kwargs)).ravel()
        for extra in grid[n:]:
            extra.remove()
        return fig, grid[:n]
    axes = np.atleast_1d(np.asarray(ax, dtype=object))
    if axes.size != n:
        raise ValueError(f"this figure has {n} panel(s); pass {n} axes, got {axes.size}")
    if projection == "3d" and any(getattr(a, "name", "") != "3d" for a in axes):
        raise ValueError("this figure draws in 3-D: pass axes made with "
                         "fig.add_subplot(..., projection='3d')")
    return axes[0].figure, axes[0] if n == 1 else axes


def legend_below(ax: Axes, ncol: int = 2, **kwargs) -> None:
    """``ax``'s legend under the figure, off the data (constrained layout makes room)."""
    handles, labels = ax.get_legend_handles_labels()
    ax.figure.legend(handles, labels, loc="outside lower center", ncol=ncol, **kwargs)


def band(ax: Axes, x, values, label: str | None = None, color: str | None = None,
         alpha: float = 0.2) -> None:
    """Mean line and a ±1 standard deviation band over seeds. values: (n_seeds, n_points)."""
    values = np.asarray(values, dtype=float)
    if values.ndim == 1:
        values = values[None]
    mean = values.mean(axis=0)
    std = values.std(axis=0)
    (line,) = ax.plot(x, mean, label=label, color=color)
    ax.fill_between(x, mean - std, mean + std, color=line.get_color(), alpha=alpha, lw=0)


# The width of the site's text column at a 1280 px window, in CSS pixels, measured in
# Chromium (tests/book/test_site.py checks what a reader then sees); a figure wider than this
# is shrunk to fit, its text with it.
COLUMN_PX = 720
MIN_TEXT_PX = 10.0      # the smallest text a figure may show on the site, in CSS pixels
PNG_TEXT_KEY = "lncourse-min-text-px"   # PNG text chunk: smallest text, in 1x pixels


def _texts(fig: Figure):
    return [t for t in fig.findobj(mpl.text.Text) if t.get_visible() and t.get_text().strip()]


def fit_text_to_column(fig: Figure, column_px: float = COLUMN_PX,
                       min_px: float = MIN_TEXT_PX) -> float:
    """Enlarge all text of ``fig`` so that, shrunk to a column ``column_px`` wide, none is
    smaller than ``min_px``; returns the factor (1 when nothing needed it). Constrained
    layout then makes room for the larger text."""
    texts = _texts(fig)
    if not texts:
        return 1.0
    width_px = fig.get_figwidth() * fig.dpi
    shrink = min(1.0, column_px / width_px)
    smallest = min(t.get_fontsize() for t in texts) * fig.dpi / 72 * shrink
    factor = min(max(1.0, min_px / smallest), 2.0)
    if factor > 1.0:
        for t in texts:
            t.set_fontsize(t.get_fontsize() * factor)
    return factor


def figure_png(fig: Figure) -> tuple[bytes, dict]:
    """The PNG a notebook shows for ``fig``: text fitted to the column, drawn at twice the
    figure's resolution, with ``width``/``height`` metadata at its 1x size (so it is shown
    at that size, sharp on HiDPI screens), and its smallest text size in 1x pixels stored
    in the PNG (``PNG_TEXT_KEY``) for the site's test to check. For the site's build, the
    PNG also carries the phone's layout of the figure (``lncourse.plotting.phone``)."""
    import io

    from PIL import Image

    from lncourse.plotting import phone

    extra = {}
    if phone.site_figures():   # the site also serves narrow screens a phone's layout
        data = phone.phone_png(fig, PNG_TEXT_KEY, COLORS["background"])
        if data is not None:
            extra[phone.PHONE_PNG_KEY] = phone.encode(data)
    fit_text_to_column(fig)
    for _ in range(3):   # the tight bounding box may be wider than the figure: fit again
        smallest = min((t.get_fontsize() for t in _texts(fig)), default=0.0) * fig.dpi / 72
        buffer = io.BytesIO()
        fig.savefig(buffer, format="png", dpi=2 * fig.dpi, bbox_inches="tight",
                    facecolor="white", metadata={PNG_TEXT_KEY: f"{smallest:.2f}", **extra})
        data = buffer.getvalue()
        width, height = Image.open(io.BytesIO(data)).size
        if not smallest or smallest * min(1.0, 2 * COLUMN_PX / width) >= MIN_TEXT_PX - 0.05:
            break
        fit_text_to_column(fig, column_px=COLUMN_PX * fig.get_figwidth() * fig.dpi * 2 / width)
    return data, {"width": width // 2, "height": height // 2}
