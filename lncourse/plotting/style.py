"""One look for every figure in the course: colours, style, and where figures are drawn."""

from __future__ import annotations

from typing import Sequence

import matplotlib as mpl
import numpy as np
from matplotlib.axes import Axes
from matplotlib.figure import Figure

# Every colour of the course, one per model variant or role, used across all chapters.
COLORS = {
    "layernorm": "#1f77b4",
    "no_projection": "#ff7f0e",   # = RMSNorm
    "no_projection_released": "#d62728",
    "layernorm_released_scale": "#8c564b",
    "no_projection_sigma": "#bcbd22",
    "no_projection_released_value_scaled": "#e377c2",
    "no_projection_released_gain": "#17becf",
    "no_scaling": "#9467bd",
    "none": "#7f7f7f",
    "theory": "#000000",
    "paper": "#d62728",
    "ours": "#1f77b4",
    "input": "#7f7f7f",
    "projected": "#2ca02c",
    "scaled": "#1f77b4",
    "affine": "#9467bd",
    "highlight": "#d62728",
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


def figure_and_axes(ax: Axes | Sequence[Axes] | None = None, n: int = 1,
                    width: float = 6.4, height: float = 4.0, projection: str | None = None,
                    **kwargs) -> tuple[Figure, Axes | np.ndarray]:
    """Where a figure function draws: the given axes, or a new figure with ``n`` panels.

    ``ax``: one ``Axes`` (``n = 1``) or a sequence of ``n`` (a multi-panel figure drawn
    into a larger one), or None for a new :func:`blank_figure` of ``width`` x ``height``
    with ``n`` panels side by side (``projection="3d"`` for 3-D panels; ``kwargs`` go to
    ``Figure.subplots``). Returns the figure and one ``Axes`` (n = 1) or an array of n.
    """
    if ax is None:
        fig = blank_figure(width, height)
        if projection is not None:
            axes = np.array([fig.add_subplot(1, n, i + 1, projection=projection)
                             for i in range(n)])
            return fig, axes[0] if n == 1 else axes
        return fig, fig.subplots(1, n, **kwargs)
    axes = np.atleast_1d(np.asarray(ax, dtype=object))
    if axes.size != n:
        raise ValueError(f"this figure has {n} panel(s); pass {n} axes, got {axes.size}")
    if projection == "3d" and any(getattr(a, "name", "") != "3d" for a in axes):
        raise ValueError("this figure draws in 3-D: pass axes made with "
                         "fig.add_subplot(..., projection='3d')")
    return axes[0].figure, axes[0] if n == 1 else axes


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
