"""One look for every figure in the course."""

from __future__ import annotations

import matplotlib as mpl
import numpy as np
from matplotlib.axes import Axes
from matplotlib.figure import Figure

# One colour per model variant or role, used across all chapters.
COLORS = {
    "layernorm": "#1f77b4",
    "no_projection": "#ff7f0e",
    "no_projection_released": "#d62728",
    "no_scaling": "#9467bd",
    "rmsnorm": "#ff7f0e",
    "none": "#7f7f7f",
    "theory": "#000000",
    "paper": "#d62728",
    "ours": "#1f77b4",
    "input": "#7f7f7f",
    "projected": "#2ca02c",
    "scaled": "#1f77b4",
    "affine": "#9467bd",
    "highlight": "#d62728",
}


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
