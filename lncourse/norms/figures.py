"""Figures of chapter 5: what real models' norms read, by depth, and their per-channel map;
the unselectable keys of trained heads under each norm; the V lens per norm."""

from __future__ import annotations

import numpy as np
from matplotlib.axes import Axes
from matplotlib.figure import Figure

from lncourse.plotting.style import COLORS, figure_and_axes, legend_below

__all__ = ["by_depth", "channel_map", "trained_heads", "v_lens", "logit_growth", "keys_by_norm"]

_MODEL_COLORS = [COLORS["no_projection"], COLORS["layernorm"]]   # RMSNorm, LayerNorm


def by_depth(curves: dict[str, dict], ylabel: str, chance: dict[str, float] | None = None,
             baseline: dict[str, np.ndarray] | None = None, log: bool = False,
             ax: Axes | None = None) -> Figure:
    """One statistic of each norm's input against relative depth (0: the first norm,
    1: the last), mean over passages with its confidence band.

    curves: label -> {"mean", "low", "high"} (lists over norms); chance: label -> a level
    drawn dashed; baseline: label -> values over norms drawn dotted (random directions).
    """
    fig, ax = figure_and_axes(ax)
    for (label, c), color in zip(curves.items(), _MODEL_COLORS):
        mean = np.asarray(c["mean"], dtype=float)
        x = np.linspace(0, 1, len(mean))
        ax.plot(x, mean, color=color, lw=1.5, label=label)
        ax.fill_between(x, c["low"], c["high"], color=color, alpha=0.25, lw=0)
        if chance and label in chance:
            ax.axhline(chance[label], color=color, ls="--", lw=1.0,
                       label=f"{label}: isotropic chance")
        if baseline and label in baseline:
            ax.plot(x, baseline[label], color=color, ls=":", lw=1.2,
                    label=f"{label}: random directions")
    if log:
        ax.set_yscale("log")
    ax.set_xlabel("relative depth of the norm (0: first, 1: last)")
    ax.set_ylabel(ylabel)
    ax.legend()
    return fig


def channel_map(x: np.ndarray, y: np.ndarray, channels: list[int], ax: Axes | None = None
                ) -> Figure:
    """A norm's output against its input, one colour per channel, one point per token.
    x, y: (T, d) the norm's input and output (before its gain)."""
    fig, ax = figure_and_axes(ax)
    for c in channels:
        ax.scatter(x[:, c], y[:, c], s=6, alpha=0.6, label=f"channel {c}")
    ax.axhline(0, color="0.7", lw=0.6)
    ax.axvline(0, color="0.7", lw=0.6)
    ax.set_xlabel("input of the norm, one channel")
    ax.set_ylabel("output (before the gain)")
    ax.legend(markerscale=3)
    return fig


_VARIANT_COLORS = {"Pre-LN": COLORS["layernorm"], "RMSNorm": COLORS["no_projection"],
                   "QK-norm": COLORS["no_projection_sigma"], "DyT": COLORS["no_scaling"]}


def trained_heads(summary: dict, ax: Axes | None = None) -> Figure:
    """The unselectable share of each head's keys by layer, per norm: mean over seeds
    (each seed's value a mean over heads and contexts) with its 95% interval, after
    training (solid) and at initialisation (dashed, no interval).

    summary: variant -> {"init"|"trained": {"layers": [[mean, low, high], ...]}}, as
    :func:`lncourse.evidence.norms.trained.summarize` returns it.
    """
    fig, ax = figure_and_axes(ax)
    for k, (variant, stages) in enumerate(summary.items()):
        color = _VARIANT_COLORS.get(variant)
        trained = np.asarray(stages["trained"]["layers"], dtype=float) * 100
        init = np.asarray(stages["init"]["layers"], dtype=float) * 100
        x = np.arange(1, len(trained) + 1) + (k - 1.5) * 0.06
        ax.errorbar(x, trained[:, 0], yerr=[trained[:, 0] - trained[:, 1],
                                            trained[:, 2] - trained[:, 0]],
                    color=color, marker="o", lw=1.5, capsize=3, label=f"{variant}, trained")
        ax.plot(x, init[:, 0], color=color, ls="--", lw=1.0, marker=".",
                label=f"{variant}, initialisation")
    ax.set_xticks(np.arange(1, len(trained) + 1))
    ax.set_xlabel("layer")
    ax.set_ylabel("unselectable keys per head (%)")
    ax.set_ylim(bottom=0)
    legend_below(ax, ncol=2)
    return fig


_ARM_STYLE = {"layernorm": ("LayerNorm", COLORS["layernorm"], "-"),
              "rmsnorm": ("RMSNorm", COLORS["no_projection"], ":"),
              "qk_norm": ("QK-norm", COLORS["no_projection_sigma"], "-"),
              "dyt": ("DyT", COLORS["no_scaling"], "-")}


def v_lens(measured: dict[str, np.ndarray], predicted: dict[str, dict],
           share: dict[str, np.ndarray], ax=None) -> Figure:
    """Two panels. Left: m x the attention output's variance over the 1/m law's constant
    dσ²·dσ²·s_in, measured (mean over groups, solid) and the lens's prediction with its
    floor (dashed), against m; 1 is exact 1/m shrinkage with uniform attention. Right:
    the attention output's share of the block output's variance against m, log-log.

    measured: arm -> attention variance (T,); predicted: arm -> :func:`lncourse.norms.
    vlens.predicted`'s dict with ``scale`` (dσ²·dσ²·s_in) added; share: arm -> (T,).
    """
    fig, (left, right) = figure_and_axes(ax, n=2, width=7.2, height=3.6)
    for arm, attn in measured.items():
        label, color, ls = _ARM_STYLE[arm]
        m = np.arange(1, len(attn) + 1)
        scale = predicted[arm]["scale"]
        left.plot(m, m * np.asarray(attn) / scale, color=color, ls=ls, lw=1.5, label=label)
        left.plot(m, m * predicted[arm]["attn"] / scale, color=color, ls="--", lw=1.0)
        right.loglog(m, share[arm], color=color, ls=ls, lw=1.5)
    left.axhline(1.0, color=COLORS["theory"], lw=0.8)
    left.set_xscale("log")
    left.set_xlabel("position m")
    left.set_ylabel("m x variance / (1/m law's constant)")
    right.set_xlabel("position m")
    right.set_ylabel("attention's share of the block output")
    left.plot([], [], color=COLORS["theory"], ls="--", lw=1.0,
              label="lens, with its floor")
    legend_below(left, ncol=3)
    return fig


def logit_growth(result: dict, ax=None, references: dict[str, float] | None = None
                 ) -> Figure:
    """Two panels against the peak learning rate (log x), per variant, each seed a dot
    and the mean a line (geometric on the right). Left: the final test loss (nats per character; a diverged
    model is not drawn). Right: the largest attention logit after training (max over
    layers, log y).

    result: a stored (or freshly run) :mod:`lncourse.evidence.norms.logits` payload;
    references: {"bigram": ..., "unigram": ...}, the data's table losses, drawn as
    horizontal lines on the loss panel.
    """
    fig, (left, right) = figure_and_axes(ax, n=2, width=7.2, height=3.4)
    lrs = np.asarray(result["config"]["lrs"], dtype=float)
    for variant, runs in result["models"].items():
        color = _VARIANT_COLORS.get(variant)
        for key, panel in (("test_loss", left), ("final_max_logit", right)):
            values = np.full((len(lrs), len({r["seed"] for r in runs})), np.nan)
            seeds = sorted({r["seed"] for r in runs})
            for r in runs:
                v = r[key] if key == "test_loss" else (
                    None if None in r[key] else max(r[key]))
                values[r["lr_index"], seeds.index(r["seed"])] = np.nan if v is None else v
            for column in values.T:
                panel.plot(lrs, column, "o", color=color, ms=3, alpha=0.5)
            centre = (np.nanmean(values, axis=1) if panel is left      # log y: the
                      else np.exp(np.nanmean(np.log(values), axis=1)))  # geometric mean
            panel.plot(lrs, centre, "-", color=color, lw=1.5,
                       label=variant if panel is left else None)
    for panel in (left, right):
        panel.set_xscale("log")
        panel.set_xlabel("peak learning rate")
    right.set_yscale("log")
    styles = {"unigram": ":", "bigram": "-."}    # the caption names these styles
    for name, loss in (references or {}).items():
        left.axhline(loss, color=COLORS["theory"], ls=styles.get(name, "--"), lw=1.0,
                     label=f"{name} table")
    left.set_ylabel("final test loss (nats)")
    right.set_ylabel("largest attention logit")
    legend_below(left, ncol=2)
    return fig


def keys_by_norm(keys: dict[str, np.ndarray], ax=None) -> Figure:
    """One panel per norm: a head's keys in the plane (d_h = 2), the convex hull of
    each panel's keys outlined, its vertices (the selectable keys) filled and the
    keys inside it (unselectable) hollow.

    keys: panel label -> (n, 2) keys.
    """
    from scipy.spatial import ConvexHull

    fig, axes = figure_and_axes(ax, n=len(keys), width=7.2, height=2.7)
    for panel, (label, k) in zip(np.atleast_1d(axes), keys.items()):
        k = np.asarray(k, dtype=float)
        hull = ConvexHull(k)
        ring = np.append(hull.vertices, hull.vertices[0])
        inside = np.setdiff1d(np.arange(len(k)), hull.vertices)
        panel.plot(k[ring, 0], k[ring, 1], color=COLORS["theory"], lw=0.8)
        panel.scatter(k[inside, 0], k[inside, 1], s=10, facecolors="none",
                      edgecolors="0.45", lw=0.7, label="inside: unselectable")
        panel.scatter(k[hull.vertices, 0], k[hull.vertices, 1], s=12,
                      color=COLORS["layernorm"], label="vertex: selectable")
        panel.set_aspect("equal", adjustable="datalim")
        panel.set_xlabel(label)
        panel.set_xticks([])
        panel.set_yticks([])
    legend_below(np.atleast_1d(axes)[0], ncol=2)
    return fig
