"""Figures for chapter 1: LayerNorm as projection, scaling and affine map."""

from __future__ import annotations

import math

import numpy as np
from matplotlib.axes import Axes
from matplotlib.figure import Figure

from lncourse.plotting.interactive import interactive_figure
from lncourse.plotting.space3d import draw_ones, draw_plane, frame_3d, plane_basis
from lncourse.plotting.style import COLORS, figure_and_axes, legend_below

__all__ = ["ln_pipeline_3d", "ln_pipeline_demo", "plane_to_two_points", "ellipse_in_plane", "variance_errors",
           "attention_inputs", "folding_errors", "explore_ln_3d"]


def _draw_circle(ax, radius: float, center=(0.0, 0.0, 0.0), gamma=(1.0, 1.0, 1.0),
                 color=None, label=None) -> None:
    """The circle of ``radius`` in the plane orthogonal to 1, then gamma * . + center."""
    u, w = plane_basis()
    t = np.linspace(0, 2 * np.pi, 200)
    circle = radius * (np.cos(t)[:, None] * u + np.sin(t)[:, None] * w)
    circle = circle * np.asarray(gamma) + np.asarray(center)
    ax.plot(circle[:, 0], circle[:, 1], circle[:, 2], color=color or COLORS["scaled"],
            lw=1.5, label=label)


PIPELINE_GAMMA = (1.6, 0.7, 1.1)    # the gamma and beta that Figure 1.1 draws, the ones
PIPELINE_BETA = (0.5, -0.3, 0.8)    # chapter 1's ellipse section measures
PIPELINE_ZOOM = 0.8                  # the cubes of Figure 1.1, smaller than their axes


def _segments(ax, starts, ends, color, every: int = 1) -> None:
    """Thin lines from each start to its end (every ``every``-th pair)."""
    for a, b in zip(starts[::every], ends[::every]):
        ax.plot(*np.stack([a, b]).T, color=color, lw=0.6, alpha=0.55)


def ln_pipeline_3d(points, projected, scaled, gamma=PIPELINE_GAMMA, beta=PIPELINE_BETA,
                   elev: float = 20.0, azim: float = 35.0, side_view=(8.0, -40.0),
                   ax=None) -> Figure:
    """LayerNorm's three steps in R^3, one panel each, in one row.

    1. centring: each input x (grey) moves along 1 (thin lines, all parallel to the
       arrow) to Px on the plane x1 + x2 + x3 = 0 (green);
    2. scaling: each Px moves along its own ray from 0 (thin lines) to the circle of
       radius sqrt(3) in that plane (blue);
    3. the affine map gamma * y + beta takes the circle to an ellipse around beta (purple).

    points, projected, scaled: (n, 3) arrays (x, f(x), g(f(x))); gamma, beta: (3,).
    The first panel is seen from ``side_view`` (elevation, azimuth), nearly along the
    plane, so the moves along 1 show as parallel lines; the other two from (``elev``,
    ``azim``), nearly along 1, so the circle and the ellipse show their shape.
    ``ax``: three 3-D axes, or None for a new figure (one row, narrow enough for the
    site's column, so it is never split into rows).
    """
    points, projected, scaled = map(np.asarray, (points, projected, scaled))
    gamma, beta = np.asarray(gamma, dtype=float), np.asarray(beta, dtype=float)
    affine = scaled * gamma + beta
    fig, axes = figure_and_axes(ax, 3, width=9.6, height=3.6, projection="3d")
    lim = float(max(np.abs(points).max(), np.abs(affine).max())) * 1.05
    every = max(1, len(points) // 40)     # enough lines to see the direction, not a blur

    a = axes[0]
    draw_plane(a, lim)
    _segments(a, points, projected, COLORS["input"], every)
    a.scatter(*points.T, s=5, color=COLORS["input"], depthshade=False)
    a.scatter(*projected.T, s=5, color=COLORS["projected"], depthshade=False)
    draw_ones(a, lim * 0.8)
    # side by side, the first panel's z ticks (on its right) and the second's z label (on
    # its left) met: "x3" sat on "0.0". The first panel's z axis goes to its left edge, and
    # every cube is drawn smaller (ZOOM) so each z label has room beside its own ticks.
    frame_3d(a, lim, *side_view, "1. centre: move along 1", zoom=PIPELINE_ZOOM,
             z_side="lower")

    a = axes[1]
    draw_plane(a, lim)
    _draw_circle(a, math.sqrt(3))
    _segments(a, projected, scaled, COLORS["projected"], every)
    a.scatter(*projected.T, s=5, color=COLORS["projected"], depthshade=False)
    a.scatter(*scaled.T, s=6, color=COLORS["scaled"], depthshade=False)
    draw_ones(a, lim * 0.8)
    frame_3d(a, lim, elev, azim, "2. scale: to radius √3", zoom=PIPELINE_ZOOM)

    a = axes[2]
    draw_plane(a, lim)
    _draw_circle(a, math.sqrt(3))
    _draw_circle(a, math.sqrt(3), center=beta, gamma=gamma, color=COLORS["affine"])
    a.scatter(*affine.T, s=6, color=COLORS["affine"], depthshade=False)
    a.scatter(*beta, s=50, color=COLORS["ink"], marker="x", depthshade=False)
    draw_ones(a, lim * 0.8)
    frame_3d(a, lim, elev, azim, "3. γ ⊙ y + β: an ellipse", zoom=PIPELINE_ZOOM)
    return fig


def ln_pipeline_demo(n: int = 200, seed: int = 0, ax=None) -> Figure:
    """Figure 1.1 for pages without chapter 1's cells (the course's front page): a
    fixed cloud, centred and scaled by :mod:`lncourse.layernorm`, drawn by
    :func:`ln_pipeline_3d`."""
    import torch

    from lncourse.layernorm import project, scale

    g = torch.Generator().manual_seed(seed)
    cloud = (torch.randn(n, 3, generator=g, dtype=torch.float64)
             * torch.tensor([0.9, 0.6, 0.3], dtype=torch.float64)
             + torch.tensor([1.9, 1.5, 1.7], dtype=torch.float64))
    centred = project(cloud)
    return ln_pipeline_3d(cloud.numpy(), centred.numpy(), scale(centred).numpy(), ax=ax)


def plane_to_two_points(plane_points, images, v, ones_coeff, ax=None) -> Figure:
    """Points s v + t 1 of a plane (coloured by the sign of s) and their two images.

    plane_points, images: (n, 3); v: (3,); ones_coeff: the s of each point, (n,).
    ``ax``: a 3-D axes, or None for a new figure.
    """
    plane_points, images, v = map(np.asarray, (plane_points, images, v))
    s_positive = np.asarray(ones_coeff) > 0
    fig, ax = figure_and_axes(ax, width=6.4, height=5.0, projection="3d")
    lim = float(np.abs(plane_points).max()) * 1.05
    for mask, color, name in [(s_positive, COLORS["layernorm"], "s > 0"),
                              (~s_positive, COLORS["highlight"], "s < 0")]:
        ax.scatter(*plane_points[mask].T, s=5, color=color, alpha=0.35,
                   label=f"x = s v + t 1, {name}", depthshade=False)
        ax.scatter(*images[mask].T, s=120, color=color, marker="*", edgecolor=COLORS["ink"],
                   label=f"LN(x), {name}", depthshade=False)
    draw_plane(ax, lim)
    draw_ones(ax, lim * 0.8)
    frame_3d(ax, lim, 20, 35)
    ax.legend(loc="upper left", fontsize=8)
    return fig


def ellipse_in_plane(scaled, affine, gamma, beta, ax=None) -> Figure:
    """The circle g(f(x)) and its image gamma * y + beta: an ellipse in a shifted plane.

    scaled, affine: (n, 3); gamma, beta: (3,). ``ax``: a 3-D axes, or None.
    """
    scaled, affine = np.asarray(scaled), np.asarray(affine)
    fig, ax = figure_and_axes(ax, width=6.4, height=5.0, projection="3d")
    lim = float(max(np.abs(scaled).max(), np.abs(affine).max())) * 1.05
    draw_plane(ax, lim)
    _draw_circle(ax, math.sqrt(3), label="sphere ∩ plane (radius √3)")
    _draw_circle(ax, math.sqrt(3), center=beta, gamma=gamma, color=COLORS["affine"],
                 label="after γ, β: an ellipse around β")
    ax.scatter(*scaled.T, s=8, color=COLORS["scaled"], depthshade=False)
    ax.scatter(*affine.T, s=8, color=COLORS["affine"], depthshade=False)
    ax.scatter(*np.asarray(beta), s=60, color=COLORS["ink"], marker="x", depthshade=False)
    draw_ones(ax, lim * 0.8)
    frame_3d(ax, lim, 20, 35)
    ax.legend(loc="upper left", fontsize=8)
    return fig


def variance_errors(offsets, errors: dict[str, np.ndarray], ax: Axes | None = None
                    ) -> Figure:
    """Relative error of a variance computed in low precision, against the mean offset.

    errors: label -> array of relative errors (same length as ``offsets``).
    """
    fig, ax = figure_and_axes(ax, width=6.4, height=4.0)
    styles = {"one-pass": "--", "two-pass": "-"}
    for label, err in errors.items():
        style = next((s for k, s in styles.items() if k in label), "-")
        ax.plot(offsets, np.maximum(np.asarray(err, dtype=float), 1e-8), style, marker="o",
                ms=3, label=label)
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel("mean of the vector (offset), its spread fixed at 1")
    ax.set_ylabel("relative error of the variance")
    legend_below(ax, ncol=2)
    return fig


def attention_inputs(stats: dict[str, dict[str, list[float]]], ax=None) -> Figure:
    """Per layer: how far the attention input is from the LayerNorm sphere (two panels).

    stats: placement -> {"mean_abs_mean": [...], "norm_over_sqrt_d": [...]}. ``ax``: two
    axes, or None for a new figure.
    """
    fig, axes = figure_and_axes(ax, 2, width=9.0, height=3.4)
    for placement, s in stats.items():
        layers = np.arange(len(s["mean_abs_mean"]))
        axes[0].plot(layers, s["mean_abs_mean"], marker="o", label=f"{placement}-LN")
        axes[1].plot(layers, s["norm_over_sqrt_d"], marker="o", label=f"{placement}-LN")
    axes[0].set_ylabel("mean |mean of the vector|")
    axes[1].set_ylabel("mean ‖x‖ / √d")
    for a in axes:
        a.set_xlabel("layer")
        a.set_xticks(layers)
        a.legend()
    return fig


def folding_errors(layers, errors: dict[str, list[float]], ax: Axes | None = None) -> Figure:
    """Largest absolute difference between original and folded quantities, per layer."""
    fig, ax = figure_and_axes(ax, width=6.4, height=3.4)
    width = 0.8 / len(errors)
    for i, (label, err) in enumerate(errors.items()):
        ax.bar(np.asarray(layers) + (i - (len(errors) - 1) / 2) * width, err, width=width,
               label=label)
    ax.set_yscale("log")
    ax.set_xlabel("layer")
    ax.set_ylabel("largest |original - folded|")
    ax.legend()
    return fig


def explore_ln_3d(points):
    """An ipywidgets explorer of :func:`ln_pipeline_3d`: turn the view, shift the cloud.

    Returns the widget (end a Jupyter or Colab cell with it). points: (n, 3).
    """
    points = np.asarray(points, dtype=float)

    def draw(elev: float, azim: float, shift: float) -> Figure:
        x = points + shift
        centred = x - x.mean(axis=1, keepdims=True)
        scaled = math.sqrt(3) * centred / np.linalg.norm(centred, axis=1, keepdims=True)
        # the first panel keeps its side view, turned with the others
        return ln_pipeline_3d(x, centred, scaled, elev=elev, azim=azim,
                              side_view=(elev - 12.0, azim - 75.0))

    return interactive_figure(
        draw,
        elev=dict(value=20, min=-90, max=90, step=5, description="elevation"),
        azim=dict(value=35, min=-180, max=180, step=5, description="azimuth"),
        shift=dict(value=0, min=-3, max=3, step=0.25, description="shift along 1"))
