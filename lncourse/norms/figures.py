"""Figures of chapter 5: what real models' norms read, by depth, and their per-channel map."""

from __future__ import annotations

import numpy as np
from matplotlib.axes import Axes
from matplotlib.figure import Figure

from lncourse.plotting.style import COLORS, figure_and_axes

__all__ = ["by_depth", "channel_map"]

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
