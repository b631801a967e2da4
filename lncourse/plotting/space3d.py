"""Drawing in R^3 around the all-ones vector: the pieces every 3-D figure shares.

The plane x1 + x2 + x3 = 0 (where centring puts every vector), the direction of 1, and
a cube-shaped frame. Used by the figures of chapter 1 (:mod:`.layernorm`) and chapter 3
(:mod:`.majority`).
"""

from __future__ import annotations

import math

import numpy as np
from matplotlib.ticker import MaxNLocator

from lncourse.plotting.style import COLORS

__all__ = ["plane_basis", "draw_plane", "draw_ones", "frame_3d", "LABEL_PAD"]

# points between an axis's tick labels and its label (matplotlib's default: 4)
LABEL_PAD = 10.0


def plane_basis() -> tuple[np.ndarray, np.ndarray]:
    """An orthonormal basis (u, w) of the plane x1 + x2 + x3 = 0, each (3,)."""
    u = np.array([1.0, -1.0, 0.0]) / math.sqrt(2)
    w = np.array([1.0, 1.0, -2.0]) / math.sqrt(6)
    return u, w


def draw_plane(ax, size: float, color: str = COLORS["projected"], alpha: float = 0.12,
               disc: bool = False) -> None:
    """The plane orthogonal to 1: a square of half-side ``size``, or a disc of that radius."""
    u, w = plane_basis()
    if disc:
        t, r = np.meshgrid(np.linspace(0, 2 * np.pi, 60), np.linspace(0, size, 2))
        a, b = r * np.cos(t), r * np.sin(t)
    else:
        a, b = np.meshgrid(np.linspace(-size, size, 2), np.linspace(-size, size, 2))
    pts = a[..., None] * u + b[..., None] * w
    ax.plot_surface(pts[..., 0], pts[..., 1], pts[..., 2], color=color, alpha=alpha,
                    linewidth=0)


def draw_ones(ax, length: float, line: bool = False, label: str | None = None) -> None:
    """The direction of 1: an arrow from 0 marked "1", or (``line``) a dashed line
    through 0 from -length to +length."""
    one = np.ones(3) / math.sqrt(3)
    if line:
        ax.plot(*np.stack([-length * one, length * one]).T, color=COLORS["theory"], lw=2.0,
                linestyle="--", label=label, zorder=5)
        return
    d = one * length
    ax.quiver(0, 0, 0, *d, color=COLORS["ink"], arrow_length_ratio=0.15, lw=1.2, label=label)
    ax.text(*(d * 1.1), "1", fontsize=10)


def frame_3d(ax, lim: float, elev: float, azim: float, title: str = "",
             labels: tuple[str, str, str] = ("x1", "x2", "x3"), zoom: float = 1.0,
             z_side: str = "default") -> None:
    """A cube [-lim, lim]^3 with equal aspect, seen from (elev, azim) degrees.

    ``zoom`` (< 1) shrinks the cube inside its axes, leaving room around it for the
    labels; ``z_side`` ("default", "lower" or "upper") is the edge that carries the z
    ticks and label (matplotlib's ``set_ticks_position`` and ``set_label_position``).
    """
    ax.set_xlim(-lim, lim)
    ax.set_ylim(-lim, lim)
    ax.set_zlim(-lim, lim)
    # the labels sit further out than matplotlib's default (4 points), which put
    # "x3" on the z axis's tick labels; three ticks an axis (-4, 0, 4), not five
    for set_label, text in zip((ax.set_xlabel, ax.set_ylabel, ax.set_zlabel), labels):
        set_label(text, labelpad=LABEL_PAD)
    ax.set_box_aspect((1, 1, 1), zoom=zoom)
    # a transparent background: in a row of panels the next panel's opaque one hid
    # this panel's z label, which lies beside the cube, past the edge of its axes
    ax.set_facecolor("none")
    ax.zaxis.set_ticks_position(z_side)
    ax.zaxis.set_label_position(z_side)
    for axis in (ax.xaxis, ax.yaxis, ax.zaxis):   # five or more ticks overlapped in 3-D
        axis.set_major_locator(MaxNLocator(nbins=2))
    ax.set_title(title)
    ax.view_init(elev=elev, azim=azim)
