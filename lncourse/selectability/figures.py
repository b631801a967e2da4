"""Figures for chapter 2 (unselectable keys): hulls, heatmaps, per-layer fractions."""

from __future__ import annotations

import numpy as np
from matplotlib.axes import Axes
from matplotlib.figure import Figure

from lncourse.plotting.style import COLORS, figure_and_axes, legend_below

__all__ = ["keys_hull_2d", "key_idea", "unselectable_heatmaps", "fraction_vs_dimension",
           "lm_loss_curves", "layer_fractions", "fraction_vs_context", "fraction_vs_step"]


def _ordered_hull(points: np.ndarray, vertex: np.ndarray) -> np.ndarray:
    v = points[vertex]
    c = v.mean(axis=0)
    return v[np.argsort(np.arctan2(v[:, 1] - c[1], v[:, 0] - c[0]))]


def keys_hull_2d(keys, selectable, angle: float | None = None,
                 ax: Axes | None = None) -> Figure:
    """Keys in the plane, their convex hull, and (optionally) the query at ``angle``.

    keys: (n, 2); selectable: bool (n,). The winning key under the query is circled;
    interior (unselectable) keys are grey crosses.
    """
    keys, selectable = np.asarray(keys, dtype=float), np.asarray(selectable, dtype=bool)
    if keys.ndim != 2 or keys.shape[1] != 2:
        raise ValueError(f"keys_hull_2d draws keys of shape (n, 2), got {keys.shape}")
    fig, ax = figure_and_axes(ax, width=5.0, height=5.0)
    hull = _ordered_hull(keys, selectable)
    ax.fill(hull[:, 0], hull[:, 1], color=COLORS["layernorm"], alpha=0.08, lw=0)
    closed = np.vstack([hull, hull[:1]])
    ax.plot(closed[:, 0], closed[:, 1], color=COLORS["layernorm"], lw=1)
    ax.scatter(*keys[selectable].T, color=COLORS["layernorm"], s=30, zorder=3,
               label="selectable (vertex)")
    ax.scatter(*keys[~selectable].T, color=COLORS["none"], marker="x", s=30, zorder=3,
               label="unselectable (inside)")
    if angle is not None:
        q = np.array([np.cos(angle), np.sin(angle)])
        c = keys.mean(axis=0)
        span = np.abs(keys - c).max()
        ax.annotate("", xy=c + 0.8 * span * q, xytext=c,
                    arrowprops=dict(arrowstyle="->", color=COLORS["highlight"], lw=2))
        ax.text(*(c + 0.85 * span * q), "q", color=COLORS["highlight"])
        # level line of the winning score: every key lies on its side
        win = int(np.argmax(keys @ q))
        t = np.array([-q[1], q[0]])
        line = keys[win] + np.outer(np.linspace(-span, span, 2), t)
        ax.plot(line[:, 0], line[:, 1], ls="--", color=COLORS["highlight"], lw=1)
        ax.scatter(*keys[win], s=160, facecolors="none", edgecolors=COLORS["highlight"],
                   lw=2, zorder=4, label="highest score")
    ax.set_aspect("equal")
    ax.set_xlabel("key coordinate 1")
    ax.set_ylabel("key coordinate 2")
    ax.legend(loc="upper left", fontsize=8)
    return fig


def key_idea(panels: dict, ax=None) -> Figure:
    """The chapter's idea in one row: per panel {title: (keys (n, 2), selectable (n,))},
    each drawn by :func:`keys_hull_2d` (no query), the legend once, under the row."""
    fig, axes = figure_and_axes(ax, n=len(panels), width=7.2, height=3.0)
    for a, (title, (keys, selectable)) in zip(np.atleast_1d(axes), panels.items()):
        keys_hull_2d(keys, selectable, ax=a)
        a.get_legend().remove()
        a.set_aspect("equal", adjustable="datalim")
        inside = int(np.size(selectable) - np.count_nonzero(selectable))
        a.set_title(f"{title}\n{inside} of {len(keys)} inside", fontsize=9)
        a.set_xlabel("")
        a.set_ylabel("")
        a.set_xticks([])
        a.set_yticks([])
    legend_below(np.atleast_1d(axes)[0], ncol=2)
    return fig


def _edges(values: np.ndarray) -> np.ndarray:
    values = np.asarray(values, dtype=float)
    if len(values) == 1:
        return np.array([values[0] - 0.5, values[0] + 0.5])
    mid = (values[1:] + values[:-1]) / 2
    return np.concatenate([[2 * values[0] - mid[0]], mid, [2 * values[-1] - mid[-1]]])


def unselectable_heatmaps(ns, ds, panels: dict, reference: dict | None = None,
                          vmax: float = 1.0, ax=None) -> Figure:
    """One heatmap per panel (title -> array (len(ds), len(ns))), d up, n across.

    reference: {(d, n): value} printed on the first panel (the paper's numbers).
    ``ax``: one axes per panel, or None for a new figure.
    """
    ns, ds = np.asarray(ns), np.asarray(ds)
    fig, axes = figure_and_axes(ax, len(panels), width=4.2 * len(panels), height=3.6)
    axes = np.atleast_1d(axes)
    for ax, (title, values) in zip(axes, panels.items()):
        # cell edges halfway between grid values, so uneven grids draw correctly
        im = ax.pcolormesh(_edges(ns), _edges(ds), np.asarray(values), vmin=0, vmax=vmax,
                           cmap="viridis")
        ax.set_title(title)
        ax.set_xlabel("number of keys n")
        ax.set_ylabel("dimension d")
        ax.grid(False)
        if np.ptp(np.asarray(values, dtype=float)) == 0:   # one value everywhere: say so
            ax.text(0.5, 0.5, f"{float(np.asarray(values).flat[0]):g} in every cell",
                    transform=ax.transAxes, ha="center", va="center", fontsize=11,
                    bbox=dict(fc=COLORS["background"], lw=0, pad=4))
        if reference and ax is axes[0]:
            for (d, n), val in reference.items():
                ax.text(n, d, f"{val:.2f}", color=COLORS["background"], ha="center",
                        va="center", fontsize=7,
                        bbox=dict(fc=COLORS["paper"], alpha=0.7, lw=0, pad=1))
        fig.colorbar(im, ax=ax, shrink=0.85)
    return fig


def fraction_vs_dimension(ds, curves: dict, ylabel: str, ax: Axes | None = None,
                          logy: bool = False) -> Figure:
    """Lines over the dimension d, one per label: curves {label: values (len(ds),)}."""
    fig, ax = figure_and_axes(ax, width=5.6, height=3.6)
    for label, values in curves.items():
        ax.plot(ds, values, marker="o", ms=3, label=label)
    ax.set_xlabel("dimension d")
    ax.set_ylabel(ylabel)
    if logy:
        ax.set_yscale("symlog", linthresh=1e-3)
    ax.legend()
    return fig


def lm_loss_curves(histories: dict, colors: dict | None = None, ax=None) -> Figure:
    """Training and test loss per step, one line per model: {label: history from train_lm}.

    Two panels (training, test): ``ax`` is two axes, or None for a new figure.
    """
    fig, axes = figure_and_axes(ax, 2, width=9.0, height=3.4, sharey=True)
    for label, h in histories.items():
        c = (colors or {}).get(label)
        axes[0].plot(h["step"][1:], h["train_loss"][1:], label=label, color=c)
        axes[1].plot(h["step"], h["test_loss"], label=label, color=c)
    for ax, name in zip(axes, ("training loss", "test loss")):
        ax.set_xlabel("step")
        ax.set_ylabel(name)
    axes[1].legend()
    return fig


def layer_fractions(series: dict, ax: Axes | None = None, colors: dict | None = None,
                    hatched: tuple = ()) -> Figure:
    """Grouped bars: % unselectable per layer for each label, series {label: (L,) values}.

    Labels in ``hatched`` (the paper's numbers) are drawn hatched.
    """
    fig, ax = figure_and_axes(ax, width=7.0, height=3.6)
    labels = list(series)
    L = len(next(iter(series.values())))
    width = 0.8 / len(labels)
    for k, label in enumerate(labels):
        x = np.arange(L) + (k - (len(labels) - 1) / 2) * width
        ax.bar(x, series[label], width, label=label, color=(colors or {}).get(label),
               hatch="//" if label in hatched else None, alpha=0.6 if label in hatched else 1)
    ax.set_xticks(np.arange(L), [f"layer {i + 1}" for i in range(L)])
    ax.set_ylabel("unselectable keys (%)")
    ax.legend(fontsize=8)
    return fig


def fraction_vs_context(ns, panels: dict, proxy: dict | None = None, ax=None) -> Figure:
    """Unselectable fraction against the context length n (log scale), one panel each.

    panels: {title: {label: (len(ns),) values in %}}; a label ending in "(fast)" is drawn
    dotted. proxy: {title: (label, (len(ns),) values)}, the Gaussian proxy of that panel,
    drawn dashed in black. ``ax``: one axes per panel (a multi-panel figure).
    """
    n_panels = len(panels)
    fig, axes = figure_and_axes(ax, n_panels, width=4.8 * n_panels, height=3.8,
                                sharey=True, squeeze=False)
    axes = np.atleast_1d(axes).ravel()
    # one colour per series, the same in every panel (four colours for six series made
    # two pairs of series in one panel look the same)
    palette = [COLORS["layernorm"], COLORS["no_scaling"], COLORS["no_projection"],
               COLORS["projected"], COLORS["highlight"], COLORS["layernorm_released_scale"]]
    labels = list(dict.fromkeys(label for series in panels.values() for label in series))
    for a, (title, series) in zip(axes, panels.items()):
        for label, values in series.items():
            values = np.asarray(values, dtype=float)
            a.plot(ns[:len(values)], values, marker="o", ms=3, label=label,
                   color=palette[labels.index(label) % len(palette)],
                   ls=":" if label.endswith("(fast)") else "-")
        if proxy and title in proxy:
            label, values = proxy[title]
            a.plot(ns[:len(values)], np.asarray(values, dtype=float), color=COLORS["theory"],
                   ls="--", lw=1.2, label=label)
        a.set_xscale("log", base=2)
        a.set_xticks(list(ns), [str(n) for n in ns])
        a.set_title(title)
        a.set_xlabel("context length n (tokens)")
        a.legend(fontsize=7)
    axes[0].set_ylabel("unselectable vectors (%)")
    return fig


def fraction_vs_step(steps, series: dict, ax: Axes | None = None) -> Figure:
    """Unselectable fraction (%) at each evaluation step, one line per label."""
    fig, ax = figure_and_axes(ax, width=5.6, height=3.4)
    for label, values in series.items():
        ax.plot(steps[:len(values)], values, marker="o", ms=3, label=label)
    ax.set_xlabel("training step")
    ax.set_ylabel("unselectable vectors (%)")
    ax.set_ylim(bottom=0)
    ax.legend(fontsize=8)
    return fig
