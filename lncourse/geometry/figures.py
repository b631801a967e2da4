"""Figures for chapter 1: LayerNorm as projection, scaling and affine map."""

from __future__ import annotations

import math

import numpy as np
from matplotlib.axes import Axes
from matplotlib.figure import Figure

from lncourse.plotting.interactive import interactive_figure
from lncourse.plotting.space3d import draw_ones, draw_plane, frame_3d, plane_basis
from lncourse.plotting.style import COLORS, figure_and_axes, legend_below

__all__ = ["ln_pipeline_3d", "plane_to_two_points", "ellipse_in_plane", "variance_errors",
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


def ln_pipeline_3d(points, projected, scaled, elev: float = 20.0, azim: float = 35.0,
                   ax=None) -> Figure:
    """Three panels in R^3: a cloud, its projection onto x+y+z=0, and its scaling.

    points, projected, scaled: (n, 3) arrays (input, f(x), g(f(x))). ``ax``: three 3-D
    axes, or None for a new figure.
    """
    points, projected, scaled = map(np.asarray, (points, projected, scaled))
    fig, axes = figure_and_axes(ax, 3, width=12, height=4.2, projection="3d")
    lim = float(np.abs(points).max()) * 1.05
    panels = [(points, COLORS["input"], "input x"),
              (projected, COLORS["projected"], "centred: f(x) = Px"),
              (scaled, COLORS["scaled"], "scaled: g(f(x)), radius √3")]
    for i, (a, (pts, color, title)) in enumerate(zip(axes, panels)):
        if i > 0:
            draw_plane(a, lim)
        if i == 2:
            _draw_circle(a, math.sqrt(3))
        a.scatter(pts[:, 0], pts[:, 1], pts[:, 2], s=6, color=color, depthshade=False)
        draw_ones(a, lim * 0.8)
        frame_3d(a, lim, elev, azim, title)
    return fig


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
        return ln_pipeline_3d(x, centred, scaled, elev=elev, azim=azim)

    return interactive_figure(
        draw,
        elev=dict(value=20, min=-90, max=90, step=5, description="elevation"),
        azim=dict(value=35, min=-180, max=180, step=5, description="azimuth"),
        shift=dict(value=0, min=-3, max=3, step=0.25, description="shift along 1"))
