"""Experiments on unselectable keys (chapter 2): the paper's numbers, Figure 1c/1d, the
Gaussian proxy, keys inside a causal prefix, and the one-LP-per-key baseline.

The exact test itself is :mod:`lncourse.selectability.exact`. Shapes: a key set (n, d); S sets
(S, n, d); S contexts of T vectors (S, T, d), of which the first n form a prefix.
"""

from __future__ import annotations

import dataclasses
import math
import time
from dataclasses import dataclass

import numpy as np
import torch
from scipy.optimize import linprog

from lncourse.paper import Reported
from lncourse.modes import scaled
from lncourse.progress import progress as progress_bar
from lncourse.selectability.exact import as_keys, selectability_batch

__all__ = [
    "PAPER_FIG1C_PROB_ANY", "PAPER_FIG1C_MEAN_FRACTION", "PAPER_TABLE1", "PAPER_TABLE2",
    "GridConfig", "random_key_sets", "unselectable_grid", "paper_cells", "fade_curves",
    "prefix_fractions", "gaussian_proxy", "norm_cv", "whitened", "random_directions",
    "prefix_unselectable_fraction",
    "selectability_lp_baseline", "compare_with_baseline",
]

# ------------------------------------------------------------ the paper's numbers
PAPER_FIG1C_PROB_ANY = Reported(
    "Brody et al. (2023), Figure 1c, as the released code computes it",
    {(3, 10): 0.91, (4, 10): 0.43, (6, 30): 0.89, (8, 30): 0.18, (8, 60): 0.89,
     (10, 60): 0.30, (12, 60): 0.01},
    note="(d, n) -> probability that at least one of n keys ~ N(0, I_d) is unselectable, "
         "100 runs, seed 123 (the heatmap shows this, not the mean fraction)")
PAPER_FIG1C_MEAN_FRACTION = Reported(
    "Brody et al. (2023), released code of Figure 1c, mean fraction",
    {(3, 10): 0.18, (8, 60): 0.036},
    note="(d, n) -> mean fraction of unselectable keys (what the caption names)")
PAPER_TABLE1 = Reported(
    "Brody et al. (2023), Table 1",
    {"without scaling": [51.0, 32.2, 34.7, 36.8], "with scaling": [0.0] * 4},
    note="% unselectable among each layer's ln_1 outputs (8-D), per context of 768-1024 "
         "GPT-2 BPE tokens, averaged over contexts")
PAPER_TABLE2 = Reported(
    "Brody et al. (2023), Table 2",
    {"before LayerNorm": [44.8, 28.5, 22.3, 26.1], "after LayerNorm": [0.0] * 4},
    note="% unselectable before and after each layer's ln_1 in the model with scaling")


# ------------------------------------------------------------------ Figure 1c/1d
@dataclass(frozen=True)
class GridConfig:
    """Figure 1c/1d: n keys ~ N(0, I_d), ``runs`` sets per (d, n) cell."""

    ns: tuple[int, ...] = tuple(range(3, 61))
    ds: tuple[int, ...] = tuple(range(3, 16))
    runs: int = 100
    seed: int = 123                 # the released code's seed (its generator differs)
    fade_ds: tuple[int, ...] = tuple(range(2, 41, 2))   # "the problem fades as d grows"
    fade_ns: tuple[int, ...] = (30, 60, 120)
    fade_runs: int = 40

    @classmethod
    def paper(cls) -> "GridConfig":
        """The paper's grid: n = 3..60, d = 3..15, 100 runs per cell."""
        return cls()

    @classmethod
    def quick(cls) -> "GridConfig":
        """A coarser grid with 40 runs per cell (about 2 s on one core)."""
        return cls(ns=(5, 10, 20, 30, 40, 50, 60), ds=(3, 4, 5, 6, 8, 10, 12, 15), runs=40,
                   fade_runs=10)

    def scaled(self, scale: float) -> "GridConfig":
        """The same grid with ``runs`` and ``fade_runs`` multiplied by ``scale`` (at least
        2 each), see :mod:`lncourse.modes`."""
        return dataclasses.replace(self, runs=scaled(self.runs, scale, 2),
                                   fade_runs=scaled(self.fade_runs, scale, 2))


def random_key_sets(n: int, d: int, runs: int, seed: int = 123,
                    layer_norm: bool = False) -> np.ndarray:
    """``runs`` sets of n keys ~ N(0, I_d), optionally after LayerNorm (no affine, eps 0).

    Returns (runs, n, d) float64. The stream is derived from (seed, n, d) with NumPy's
    ``SeedSequence``, so each cell of a grid has its own stream, any cell can be recomputed
    alone, and no two (seed, n, d) share a stream by construction.
    """
    if n < 2 or d < 2 or runs < 1:
        raise ValueError(f"need n >= 2, d >= 2 and runs >= 1, got n={n}, d={d}, runs={runs}")
    if isinstance(seed, bool) or not isinstance(seed, int) or seed < 0:
        raise ValueError(f"seed must be a non-negative integer, got {seed!r}")
    state = int(np.random.SeedSequence([seed, n, d]).generate_state(1)[0])
    gen = torch.Generator().manual_seed(state)
    x = torch.randn(runs, n, d, generator=gen, dtype=torch.float64)
    if layer_norm:
        from lncourse.layernorm import layer_norm as ln
        x = ln(x)
    return x.numpy()


def unselectable_grid(grid: GridConfig, layer_norm: bool = False,
                      progress: bool = True) -> dict:
    """For every (d, n) of ``grid``: the mean fraction of unselectable keys and the
    probability that at least one is unselectable, over ``grid.runs`` random sets.

    Returns ``ns``, ``ds``, ``mean_fraction`` and ``prob_any`` ((len(ds), len(ns)) arrays)
    and ``seconds`` (wall time).
    """
    ns, ds = list(grid.ns), list(grid.ds)
    mean = np.zeros((len(ds), len(ns)))
    prob = np.zeros((len(ds), len(ns)))
    start = time.perf_counter()
    cells = [(a, b) for a in range(len(ds)) for b in range(len(ns))]
    for a, b in progress_bar(cells, desc="grid" + (" (LN)" if layer_norm else ""),
                             disable=not progress):
        keys = random_key_sets(ns[b], ds[a], grid.runs, grid.seed, layer_norm)
        frac = selectability_batch(keys).unselectable_fraction
        mean[a, b], prob[a, b] = frac.mean(), (frac > 0).mean()
    return {"ns": ns, "ds": ds, "mean_fraction": mean, "prob_any": prob,
            "seconds": time.perf_counter() - start}


def paper_cells(seed: int = 123, runs: int = 100) -> list[dict]:
    """Ours beside the paper at each cell where its Figure 1c value is known.

    One row per (d, n): ``p_paper``, ``p_ours`` (probability of at least one unselectable
    key), ``z`` (their difference in standard errors of two independent ``runs``-run
    estimates), ``mean_paper`` (or None) and ``mean_ours`` (mean fraction).
    """
    rows = []
    for (d, n), p_paper in PAPER_FIG1C_PROB_ANY.items():
        frac = selectability_batch(random_key_sets(n, d, runs, seed)).unselectable_fraction
        p_ours = float((frac > 0).mean())
        pool = (p_ours + p_paper) / 2
        se = math.sqrt(max(2 * pool * (1 - pool) / runs, 1e-4))
        rows.append({"d": d, "n": n, "p_paper": p_paper, "p_ours": p_ours,
                     "z": (p_ours - p_paper) / se,
                     "mean_paper": PAPER_FIG1C_MEAN_FRACTION.get((d, n)),
                     "mean_ours": float(frac.mean())})
    return rows


def fade_curves(grid: GridConfig, seed: int = 7) -> dict[int, list[float]]:
    """Mean unselectable fraction against d (``grid.fade_ds``) for each n of
    ``grid.fade_ns``: {n: [fraction per d]}."""
    return {n: [float(selectability_batch(random_key_sets(n, d, grid.fade_runs, seed))
                      .unselectable_fraction.mean()) for d in grid.fade_ds]
            for n in grid.fade_ns}


# ------------------------------------------------------ prefixes and the proxy
def prefix_fractions(vectors, ns) -> np.ndarray:
    """Unselectable fraction among the first n vectors of each context, for each n.

    vectors: (S, T, d) (tensor or array), ns: increasing sizes <= T -> (S, len(ns)).
    Each prefix is tested against itself only (the whole prefix, no causal mask).
    """
    V = as_keys(vectors, 3, "vectors")
    ns = [int(n) for n in ns]
    if not ns or any(not 2 <= n <= V.shape[1] for n in ns):
        raise ValueError(f"prefix sizes must be in [2, {V.shape[1]}], got {ns}")
    return np.stack([selectability_batch(V[:, :n]).unselectable_fraction for n in ns], 1)


def gaussian_proxy(ns, d: int, runs: int = 16, seed: int = 0) -> np.ndarray:
    """The unselectable fraction of n i.i.d. N(0, I_d) points: (len(ns), runs).

    Each run is one set of max(ns) points whose prefixes give every n, as the contexts
    of a model are measured. Hull vertices do not change under an invertible affine
    map, so any Gaussian with a non-degenerate covariance gives the same numbers.
    """
    keys = random_key_sets(max(int(n) for n in ns), d, runs, seed)
    return prefix_fractions(keys, ns).T


def norm_cv(vectors, whiten: bool = False) -> np.ndarray:
    """Coefficient of variation (std / mean) of the norms of each set's centred vectors.

    vectors: (S, n, d) -> (S,). With ``whiten``, each set is first mapped to identity
    covariance (an affine map, which keeps the hull's vertices), so that the value can be
    compared with a standard Gaussian's: about 1 / sqrt(2 d) for large n.
    """
    if whiten:
        norms = np.stack([np.linalg.norm(X, axis=-1) for X in whitened(vectors)])
    else:
        V = as_keys(vectors, 3, "vectors")
        norms = np.linalg.norm(V - V.mean(axis=1, keepdims=True), axis=-1)
    return norms.std(axis=1) / norms.mean(axis=1)


def whitened(vectors) -> list[np.ndarray]:
    """Each set centred and mapped to identity covariance in the span it occupies.

    vectors: (S, n, d) -> S arrays (n, r), r the set's rank (flat directions dropped).
    An affine map, so it keeps which vectors are hull vertices.
    """
    V = as_keys(vectors, 3, "vectors")
    V = V - V.mean(axis=1, keepdims=True)
    out = []
    for X in V:
        evals, evecs = np.linalg.eigh(X.T @ X / len(X))
        keep = evals > 1e-12 * evals.max()
        out.append(X @ evecs[:, keep] / np.sqrt(evals[keep]))
    return out


def random_directions(vectors, seed: int = 0) -> np.ndarray:
    """Keep each whitened vector's length, replace its direction by a uniform random one.

    vectors: (S, n, d) -> (S, n, r). What remains of the sets is exactly the spread of
    their (whitened) lengths; every arrangement of directions (clusters, lines, repeated
    tokens) is gone. Gaussian points are unchanged in distribution: their whitened
    directions are already uniform. The stream comes from ``seed`` alone.
    """
    sets = whitened(vectors)
    if len({X.shape[1] for X in sets}) != 1:
        raise ValueError("the sets span subspaces of different dimensions; pass sets of "
                         "equal rank (for example one layer's vectors)")
    gen = np.random.default_rng(np.random.SeedSequence([int(seed), 7]))
    X = np.stack(sets)                                            # (S, n, r)
    u = gen.standard_normal(X.shape)
    u /= np.linalg.norm(u, axis=-1, keepdims=True)                # uniform directions
    return u * np.linalg.norm(X, axis=-1, keepdims=True)


def prefix_unselectable_fraction(keys, positions=None) -> float:
    """Fraction of (query position t, key position s <= t) pairs where key s cannot win.

    keys: (S, T, d), S independent sequences (or heads) of T keys each. For query t the
    candidates are keys 0..t (the causal prefix). ``positions``: the query positions to
    use (default: every t >= 1; t = 0 sees a single key, which always wins).
    """
    K = as_keys(keys, 3)
    S, T, d = K.shape
    positions = range(1, T) if positions is None else positions
    unsel = total = 0
    for t in positions:
        if not 1 <= t < T:
            raise ValueError(f"query positions must be in [1, {T - 1}], got {t}")
        res = selectability_batch(K[:, : t + 1])
        unsel += int((~res.selectable).sum())
        total += res.selectable.size
    if total == 0:
        raise ValueError("no query positions given")
    return unsel / total


# ------------------------------------------------------------------- the baseline
def selectability_lp_baseline(keys) -> np.ndarray:
    """The straightforward exact method: one LP per key (Grivas et al. 2022), via HiGHS.

    For key i maximise the radius r of a ball of queries x in a box for which i wins:
    (k_j - k_i) . x + ||k_j - k_i|| r <= 0 for every j != i, -1 <= x <= 1, 0 <= r <= 1.
    Key i is selectable iff r > 0 (here r > 1e-12 times the keys' scale).
    keys: (n, d) -> bool (n,). Identical keys are dropped from each other's constraints,
    as in :func:`~lncourse.selectability.exact.selectability`.
    """
    K = as_keys(keys, 2)
    K = K - K.mean(axis=0)
    n, d = K.shape
    s = max(np.abs(K).max(), 1e-300)
    out = np.zeros(n, dtype=bool)
    c = np.zeros(d + 1)
    c[-1] = -1.0
    for i in range(n):
        diff = K - K[i]                                  # (n, d)
        keep = np.abs(diff).max(axis=1) > 1e-12 * s
        if not keep.any():
            out[i] = True
            continue
        diff = diff[keep]
        A = np.hstack([diff, np.linalg.norm(diff, axis=1, keepdims=True)])
        res = linprog(c, A_ub=A, b_ub=np.zeros(len(diff)),
                      bounds=[(-1, 1)] * d + [(0, 1)], method="highs")
        out[i] = res.status == 0 and res.x[-1] > 1e-12 * s
    return out


def compare_with_baseline(cells, runs: int, seed: int = 123,
                          layer_norm: tuple[bool, ...] = (False,)) -> dict:
    """Both methods on the same sets: seconds each, and whether every verdict agrees.

    cells: (d, n) pairs; ``runs`` random sets per cell and per entry of ``layer_norm``.
    """
    sets = [random_key_sets(n, d, runs, seed, ln) for d, n in cells for ln in layer_norm]
    t0 = time.perf_counter()
    ours = [selectability_batch(k).selectable for k in sets]
    t_ours = time.perf_counter() - t0
    t0 = time.perf_counter()
    base = [np.stack([selectability_lp_baseline(k) for k in keys]) for keys in sets]
    t_base = time.perf_counter() - t0
    return {"cells": [list(c) for c in cells], "runs": runs,
            "keys": int(sum(k.shape[0] * k.shape[1] for k in sets)),
            "seconds_ours": t_ours, "seconds_baseline": t_base, "ratio": t_base / t_ours,
            "verdicts_agree": all(np.array_equal(a, b) for a, b in zip(ours, base)),
            "unselectable_ours": int(sum((~a).sum() for a in ours)),
            "unselectable_baseline": int(sum((~b).sum() for b in base))}
