"""Figures of chapter 4 (NoPE): variance against position, attention, probes."""

from __future__ import annotations

import matplotlib.pyplot as plt
import numpy as np
from matplotlib.axes import Axes
from matplotlib.figure import Figure

from lncourse.plotting.style import COLORS, SERIES, figure_and_axes, legend_below

__all__ = ["variance_loglog", "variance_with_ratios", "cumulative_attention", "sigma_sweep", "probe_errors",
           "lemma4_signal", "trained_layers", "stream_probe"]


def _measured_style(under_corrected: bool) -> dict:
    """A measured curve's line: broad and light where the corrected prediction runs on
    it (so that one shows on top), else an ordinary solid line."""
    return {"lw": 3.5, "alpha": 0.45} if under_corrected else {"lw": 1.5}


def _corrected_line(ax: Axes, m: np.ndarray, corrected, label: str) -> None:
    """The corrected prediction: a thin dotted vermillion line with circles at about a
    dozen log-spaced positions, drawn above the measured curve it follows closely."""
    marks = np.unique(np.geomspace(1, len(m), 12).round().astype(int)) - 1
    ax.plot(m, np.asarray(corrected, dtype=float), color=COLORS["paper"], ls=":", lw=1.2,
            marker="o", ms=4, markevery=marks.tolist(), zorder=4, label=label)


def variance_loglog(measured, theory, corrected=None, labels: dict | None = None,
                    ax: Axes | None = None) -> Figure:
    """Variance of the attention output against position m, log-log (the paper's Figure 4).

    measured: (T,) or a dict label -> (T,) for several curves; theory and corrected: (T,).
    """
    fig, ax = figure_and_axes(ax)
    curves = measured if isinstance(measured, dict) else {"measured": measured}
    colors = [COLORS["ours"], COLORS["no_projection"], COLORS["no_scaling"], COLORS["none"]]
    for (label, v), c in zip(curves.items(), colors):
        v = np.asarray(v, dtype=float)
        ax.plot(np.arange(1, len(v) + 1), v, color=c, label=label,
                **_measured_style(corrected is not None))
    t = np.asarray(theory, dtype=float)
    m = np.arange(1, len(t) + 1)
    ax.plot(m, t, color=COLORS["theory"], ls="--", lw=1.2,
            label=(labels or {}).get("theory", "Lemma 3: d²σ⁴/m"))
    if corrected is not None:
        _corrected_line(ax, m, corrected,
                        (labels or {}).get("corrected", "with the softmax correction"))
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel("position m")
    ax.set_ylabel("variance of the attention output")
    ax.legend()
    return fig


def variance_with_ratios(measured, theory, corrected, ax=None) -> Figure:
    """Figure 4 with the gap made visible: the variance against m (log-log, as
    :func:`variance_loglog`), and beside it measured / prediction for Lemma 3 and for
    the corrected prediction, where 1 is a perfect prediction. On the log-log panel the
    two predictions differ by a few per cent and lie on each other; the ratios do not.

    measured, theory, corrected: (T,). ``ax``: two axes, or None for a new figure.
    """
    fig, (left, right) = figure_and_axes(ax, 2, width=9.6, height=3.8)
    variance_loglog(measured, theory, corrected, ax=left)
    measured = np.asarray(measured, dtype=float)
    m = np.arange(1, len(measured) + 1)
    right.axhline(1.0, color=COLORS["input"], lw=1.0)
    right.plot(m, measured / np.asarray(theory, dtype=float), color=COLORS["theory"],
               ls="--", lw=1.2, label="measured / Lemma 3")
    _corrected_line(right, m, measured / np.asarray(corrected, dtype=float),
                    "measured / corrected")
    right.set_xscale("log")
    right.set_xlabel("position m")
    right.set_ylabel("measured / prediction")
    right.legend()
    return fig


def cumulative_attention(mean_weights, positions=None, ax: Axes | None = None) -> Figure:
    """Cumulative attention of a few query positions against key position (Figure 3).

    mean_weights: (T, T) attention weights averaged over samples and heads. A uniform row
    over m keys would be the straight line n / m.
    """
    fig, ax = figure_and_axes(ax)
    w = np.asarray(mean_weights, dtype=float)
    T = w.shape[0]
    positions = positions or sorted({max(1, T // 8), T // 4, T // 2, T})
    for i, m in enumerate(positions):
        n = np.arange(1, m + 1)
        color = SERIES[i % len(SERIES)]
        ax.plot(n, np.cumsum(w[m - 1, :m]), lw=2.0, color=color, label=f"query m = {m}",
                alpha=0.85)
        # uniform attention over m keys, drawn on top in ink so it shows where it coincides
        ax.plot(n, n / m, lw=1.0, ls=(0, (4, 3)), color=COLORS["ink"], zorder=3,
                label="uniform over m keys" if i == 0 else None)
    ax.set_xlabel("key position n")
    ax.set_ylabel("cumulative attention weight")
    ax.legend()
    return fig


def sigma_sweep(results: dict, ax: Axes | None = None) -> Figure:
    """Measured and theoretical variance for several σ (Figure 5), one panel each.

    results: σ -> (measured (T,), theory (T,)) or (measured, theory, corrected).
    ``ax``: one axes per σ, or None for a new figure.
    """
    n = len(results)
    fig, axes = figure_and_axes(ax, n, width=3.2 * n, height=3.2)
    axes = np.atleast_1d(axes)
    for a, (sigma, curves) in zip(axes, results.items()):
        v, t = np.asarray(curves[0], dtype=float), np.asarray(curves[1], dtype=float)
        m = np.arange(1, len(v) + 1)
        a.plot(m, v, color=COLORS["ours"], label="measured",
               **_measured_style(len(curves) > 2))
        a.plot(m, t, color=COLORS["theory"], ls="--", lw=1.2, label="d²σ⁴/m")
        if len(curves) > 2:
            _corrected_line(a, m, curves[2], "corrected")
        a.set_xscale("log")
        a.set_yscale("log")
        a.set_title(f"σ = {sigma:g}")
        a.set_xlabel("position m")
    axes[0].set_ylabel("variance of the attention output")
    axes[0].legend()
    return fig


def probe_errors(results: dict, baseline: float, paper: dict | None = None,
                 ax: Axes | None = None, spread: dict | None = None) -> Figure:
    """Mean absolute error of the position probe against depth (Figure 2).

    results: label -> (layers, mae); baseline: the error of always guessing the middle;
    spread: label -> standard deviation over seeds per layer (error bars), optional.
    """
    fig, ax = figure_and_axes(ax)
    colors = [COLORS["ours"], COLORS["no_projection"], COLORS["no_scaling"]]
    for (label, (layers, mae)), c in zip(results.items(), colors):
        err = (spread or {}).get(label)
        ax.errorbar(layers, mae, yerr=err, marker="o", color=c, label=label, capsize=2)
    ax.axhline(baseline, color=COLORS["theory"], ls="--", lw=1, label="guess the middle")
    for label, (layers, mae) in (paper or {}).items():
        ax.plot(layers, mae, marker="s", ls=":", color=COLORS["paper"], label=label)
    ax.set_xlabel("number of layers")
    ax.set_ylabel("mean absolute error of the position")
    ax.set_ylim(bottom=0)
    ax.legend()
    return fig


def lemma4_signal(resid, ln_mean, amplitude: dict, predicted, ax=None) -> Figure:
    """The final LayerNorm erases the shrinkage but keeps Lemma 4's pattern (two panels).

    Left: mean variance of x + o and of LN(x + o) against m. Right: the amplitude of
    Lemma 4's per-dimension pattern, measured in bins of positions (``amplitude``:
    ``m``, ``mean``, ``err`` arrays) with error bars, against the prediction
    ``predicted`` (T,). ``ax``: two axes.
    """
    fig, axes = figure_and_axes(ax, 2, width=9.0, height=3.6)
    m = np.arange(1, len(resid) + 1)
    axes[0].plot(m, np.asarray(resid, dtype=float), color=COLORS["none"], label="x + o")
    axes[0].plot(m, np.asarray(ln_mean, dtype=float), color=COLORS["layernorm"],
                 label="LN(x + o)")
    axes[0].set_xscale("log")
    axes[0].set_yscale("log")
    axes[0].set_xlabel("position m")
    axes[0].set_ylabel("variance, averaged over dimensions")
    axes[0].legend()
    axes[1].plot(m, np.asarray(predicted, dtype=float), color=COLORS["theory"], ls="--",
                 label="Lemma 4")
    axes[1].errorbar(amplitude["m"], amplitude["mean"], yerr=amplitude["err"], fmt="o",
                     ms=4, capsize=2, color=COLORS["layernorm"], label="measured")
    axes[1].axhline(0, color=COLORS["none"], lw=0.8)
    axes[1].set_xscale("log")
    axes[1].set_xlabel("position m")
    axes[1].set_ylabel("amplitude of Lemma 4's pattern")
    axes[1].legend()
    return fig


def trained_layers(before: list, after: list, ax=None) -> Figure:
    """Every layer's attention-output variance against position, log-log, at
    initialisation (left) and after training (right), each curve divided by its value at
    m = 1 so that the layers share an axis; the dashed line is 1/m.

    before, after: [layer] -> (T,) the mean over groups of windows."""
    fig, panels = figure_and_axes(ax, n=2, width=7.2, height=3.6, sharey=True)
    cmap = plt.get_cmap("viridis")
    for panel, curves, title in zip(panels, (before, after), ("initialisation", "trained")):
        for layer, v in enumerate(curves):
            v = np.asarray(v, dtype=float)
            m = np.arange(1, len(v) + 1)
            panel.loglog(m, v / v[0], color=cmap(layer / max(len(curves) - 1, 1)), lw=1.5,
                      label=f"layer {layer}")
        panel.loglog(m, 1.0 / m, color=COLORS["theory"], ls="--", lw=1.0, label="1/m")
        panel.set_title(title)
        panel.set_xlabel("position m")
    panels[0].set_ylabel("variance / its value at m = 1")
    legend_below(panels[0], ncol=5)
    return fig


def stream_probe(summary: dict, baseline: float, uniform: float, ax=None) -> Figure:
    """The all-positions probe run against depth (two panels): left, the error of each
    probe (mean over seeds, 95% interval as a band) with guessing the middle and guessing
    at random; right, the correlation of the probe's answer with the position.

    summary: :func:`lncourse.evidence.nope.stream_read.summary` (kind -> probe -> {"mae",
    "corr": per depth (mean, low, high)})."""
    fig, panels = figure_and_axes(ax, n=2, width=9.0, height=3.8)
    style = {("causal", "classifier"): (COLORS["layernorm"], "-"),
             ("causal", "regression"): (COLORS["no_projection"], "-"),
             ("bidirectional", "classifier"): (COLORS["layernorm"], ":"),
             ("bidirectional", "regression"): (COLORS["no_projection"], ":")}
    for (kind, probe), (color, ls) in style.items():
        if kind not in summary:
            continue
        s = summary[kind][probe]
        for panel, q in zip(panels, ("mae", "corr")):
            mean = np.array([e[0] for e in s[q]])
            depth = np.arange(len(mean))
            panel.plot(depth, mean, color=color, ls=ls, marker="o", ms=3,
                       label=f"{probe}, {kind} ({len(s['seeds'])})")
            if s[q][0][1] is not None:
                panel.fill_between(depth, [e[1] for e in s[q]], [e[2] for e in s[q]],
                                   color=color, alpha=0.15, lw=0)
    panels[0].axhline(baseline, color=COLORS["theory"], ls="--", lw=1,
                      label="guess the middle")
    panels[0].axhline(uniform, color=COLORS["none"], ls="-.", lw=1,
                      label="guess at random")
    panels[0].set_ylabel("mean absolute error (positions)")
    panels[1].axhline(0, color=COLORS["none"], lw=0.8)
    panels[1].set_ylabel("correlation of answer and position")
    for panel in panels:
        panel.set_xlabel("number of layers")
    legend_below(panels[0], ncol=3)
    return fig
