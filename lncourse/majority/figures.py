"""Figures of chapter 3 (majority): training curves with seed bands, the d = 3 keys and
queries, steps to a target accuracy."""

from __future__ import annotations

import numpy as np
from matplotlib.axes import Axes
from matplotlib.figure import Figure

from lncourse.plotting.space3d import draw_ones, draw_plane, frame_3d
from lncourse.plotting.style import COLORS, band, figure_and_axes, legend_below

__all__ = ["VARIANT_LABELS", "majority_curves", "keys_queries_3d", "steps_to_accuracy",
           "effects_forest", "grid_summary"]

VARIANT_LABELS = {
    "layernorm": "LayerNorm",
    "no_projection": "no projection (paper: √d·x/‖x‖)",
    "no_projection_released": "no projection (released: x/(‖x‖√d))",
    "none": "no norm",
    "layernorm_released_scale": "LayerNorm at the released scale (LN(x)/d)",
    "no_projection_sigma": "no projection (other reading: x/σ(x−μ))",
    "no_projection_released_value_scaled": "released, W_V × d at init",
    "no_projection_released_gain": "released, learned gain",
}


def _color(variant: str) -> str | None:
    return COLORS.get(variant)


def _label(variant: str) -> str:
    return VARIANT_LABELS.get(variant, variant.replace("_", " "))


def majority_curves(step, curves: dict[str, np.ndarray], ylabel: str,
                    paper: dict[str, tuple] | None = None, ax: Axes | None = None,
                    logy: bool = False) -> Figure:
    """One band (mean ± std over seeds) per variant.

    step: (P,); curves: variant -> (n_seeds, P); paper: optional variant -> (steps,
    values) read off the paper's figure, drawn as markers in the variant's colour.
    """
    fig, ax = figure_and_axes(ax)
    step = np.asarray(step)
    for variant, values in curves.items():
        values = np.asarray(values, dtype=float)
        if values.shape[-1] != len(step):
            raise ValueError(f"{variant}: {values.shape[-1]} points for {len(step)} steps")
        band(ax, step, values, label=_label(variant), color=_color(variant))
    for variant, (ps, pv) in (paper or {}).items():
        ax.plot(ps, pv, linestyle="none", marker="D", markersize=6,
                markerfacecolor=COLORS["background"], color=_color(variant) or COLORS["paper"],
                label=f"paper, {_label(variant).split(' (')[0]}")
    if logy:
        ax.set_yscale("log")
    ax.set_xlabel("training step")
    ax.set_ylabel(ylabel)
    legend_below(ax, ncol=2)
    return fig


def _ones_and_plane(ax, radius: float) -> None:
    """The all-ones direction and a disc of the plane orthogonal to it."""
    draw_ones(ax, 1.3 * radius, line=True, label="direction of 1")
    draw_plane(ax, radius, color=COLORS["input"], alpha=0.15, disc=True)


def keys_queries_3d(panels: dict[str, tuple[np.ndarray, np.ndarray]],
                    elev: float = 8.0, azim: float = -45.0, width: float = 9.0,
                    query_length: float | None = 0.9, ax=None) -> Figure:
    """Figure 1a/1b: keys (norm1 of the embeddings) and effective queries of d = 3 models.

    panels: title -> (keys (n, 3), queries (n, 3)). Each panel also shows the direction
    of 1 and the plane orthogonal to it, where LayerNorm puts every key. Only a query's
    direction matters for which key wins, so by default queries are drawn with length
    ``query_length`` times the largest key (None: as they are). ``ax``: one 3-D axes
    per panel, or None for a new figure.
    """
    fig, axes = figure_and_axes(ax, len(panels), width=width,
                                height=width / len(panels) + 0.4, projection="3d")
    for k, (ax, (title, (keys, queries))) in enumerate(zip(np.atleast_1d(axes),
                                                           panels.items())):
        keys, queries = np.asarray(keys, float), np.asarray(queries, float)
        if keys.shape[-1] != 3 or queries.shape[-1] != 3:
            raise ValueError("keys and queries must be 3-dimensional")
        key_len = float(np.linalg.norm(keys, axis=1).max())
        if query_length is not None:
            norms = np.linalg.norm(queries, axis=1, keepdims=True)
            queries = query_length * key_len * queries / np.maximum(norms, 1e-12)
        radius = max(key_len, float(np.linalg.norm(queries, axis=1).max())) * 1.05
        _ones_and_plane(ax, radius)
        for i, (vecs, name, color, marker) in enumerate(
                [(keys, "keys", COLORS["highlight"], "o"),
                 (queries, "queries", COLORS["theory"], "^")]):
            for j, v in enumerate(vecs):
                ax.plot([0, v[0]], [0, v[1]], [0, v[2]], color=color, lw=1, marker=marker,
                        markersize=3, markevery=[1], label=name if j == 0 else None)
        # a smaller cube leaves room for the z label beside its own panel
        frame_3d(ax, radius, elev, azim, title, labels=("x", "y", "z"), zoom=0.85)
        if k == 0:
            legend_below(ax, ncol=2)
    return fig


def steps_to_accuracy(steps_by_variant: dict[str, np.ndarray], threshold: float,
                      max_step: float | None = None, ax: Axes | None = None) -> Figure:
    """Steps each seed needed to reach ``threshold`` test accuracy, one row per variant.

    Seeds that never reached it (NaN) are drawn at ``max_step`` as open markers.
    """
    fig, ax = figure_and_axes(ax, height=0.6 + 0.55 * len(steps_by_variant))
    names = list(steps_by_variant)
    for row, variant in enumerate(names):
        s = np.asarray(steps_by_variant[variant], dtype=float)
        color = _color(variant)
        ok = ~np.isnan(s)
        jitter = np.linspace(-0.12, 0.12, len(s)) if len(s) > 1 else np.zeros(1)
        ax.plot(s[ok], row + jitter[ok], "o", color=color, alpha=0.8)
        if (~ok).any() and max_step is not None:
            ax.plot(np.full((~ok).sum(), max_step), row + jitter[~ok], "o", color=color,
                    markerfacecolor="none")
        if ok.all():
            mean, std = s.mean(), s.std()
            ax.errorbar(mean, row + 0.3, xerr=std, fmt="s", color=color, capsize=3)
    ax.set_yticks(range(len(names)), [_label(v) for v in names])
    ax.invert_yaxis()
    ax.set_xlabel(f"training steps to {threshold:.0%} test accuracy")
    return fig


def effects_forest(effects: dict[str, tuple[float, float, float]], xlabel: str,
                   ax: Axes | None = None) -> Figure:
    """Paired effects as a forest plot: each row a (mean, low, high) interval, with the
    line of no effect. effects: row label -> (mean, low, high), drawn top to bottom."""
    fig, ax = figure_and_axes(ax, height=0.7 + 0.45 * len(effects))
    labels = list(effects)
    for row, label in enumerate(labels):
        mean, low, high = effects[label]
        ax.errorbar(mean, row, xerr=[[mean - low], [high - mean]], fmt="o",
                    color=COLORS["ours"], capsize=4)
    ax.axvline(0.0, color=COLORS["theory"], lw=1, linestyle="--")
    ax.set_yticks(range(len(labels)), labels)
    ax.invert_yaxis()
    ax.set_xlabel(xlabel)
    return fig


def grid_summary(cells: dict[tuple[int, float], dict[str, np.ndarray]], ylabel: str,
                 ax: Axes | None = None) -> Figure:
    """One group of dots per (batch size, learning rate) cell, one colour per variant:
    each seed's value and the mean (a bar). cells: (batch, lr) -> variant -> (n_seeds,)."""
    fig, ax = figure_and_axes(ax, width=8.0, height=4.0)
    keys = list(cells)
    variants = list(dict.fromkeys(v for cell in cells.values() for v in cell))
    width = 0.8 / len(variants)
    for col, key in enumerate(keys):
        for k, variant in enumerate(variants):
            if variant not in cells[key]:
                continue
            vals = np.asarray(cells[key][variant], dtype=float)
            x = col - 0.4 + (k + 0.5) * width
            ax.plot(np.full(len(vals), x), vals, ".", color=_color(variant), alpha=0.7)
            ax.plot([x - width / 2, x + width / 2], [vals.mean()] * 2, color=_color(variant),
                    lw=2.5, label=_label(variant) if col == 0 else None)
    ax.set_xticks(range(len(keys)), [f"batch {b}\nlr {lr:g}" for b, lr in keys])
    ax.set_ylabel(ylabel)
    ax.legend(fontsize=8)
    return fig
