"""Which keys can win attention? Exact selectability with certificates (chapter 2).

A key k_i among keys k_1..k_n is *selectable* when some query q gives it a strictly higher
score q . k_i than every other key. Theorem 1 of Brody et al. (2023): a key is selectable
exactly when it is a vertex of the convex hull of the keys; a key inside the hull (a convex
combination of the others) never wins. Every verdict here comes with its certificate:

* selectable key i: a unit query ``queries[i]`` with q . k_i - max_j q . k_j > tol;
* unselectable key i: convex weights ``weights[i]`` (>= 0, sum 1, zero on key i and on
  its duplicates) with || sum_j w_j k_j - k_i ||_inf <= tol.

Both are checked before a result is returned. The search is cheap first, exact last:

1. the key's own direction (q = k_i and q = k_i - mean), for every key at once;
2. the "braid reflect" walk of Grivas et al. (2022): while another key j wins, reflect q
   across the hyperplane where i and j tie (batched over all undecided keys);
3. non-negative least squares on the lifted points (k_j, 1): a zero residual gives the
   convex weights; a non-zero residual r = (r_x, r_0) is, by the KKT conditions, a query
   r_x under which k_i wins by ||r||^2 (so this step is exact in exact arithmetic);
4. an LP solved by SciPy's HiGHS for whatever the steps above leave uncertified.

Conventions. Keys that are identical (equal within ``tol`` in every coordinate) count as
one point: such a key is selectable when that point is a vertex, and it need only beat
the keys that differ from it. Tolerances: with s the largest |coordinate| of the centred
keys, tol = rtol * s (default rtol = 1e-12, a few hundred times
the rounding error of float64 scores); all tests run on the centred keys, which
changes no verdict (adding a vector to every key adds the same number to every score).
Shapes: keys (n, d); batched keys (B, n, d); n keys, d dimensions.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

import numpy as np
import torch
from scipy.optimize import linprog, nnls

__all__ = [
    "Selectability", "selectability", "selectability_batch", "selectability_lp_baseline",
    "random_key_sets", "unselectable_grid", "prefix_unselectable_fraction",
    "PAPER_FIG1C_PROB_ANY", "PAPER_FIG1C_MEAN_FRACTION", "PAPER_TABLE1", "PAPER_TABLE2",
]

# Reference values from Brody et al. (2023) and their released code (see REFERENCE.md).
# Figure 1c heatmap as the released code computes it: P(at least one key unselectable).
PAPER_FIG1C_PROB_ANY = {(3, 10): 0.91, (4, 10): 0.43, (6, 30): 0.89, (8, 30): 0.18,
                        (8, 60): 0.89, (10, 60): 0.30, (12, 60): 0.01}  # (d, n) -> value
PAPER_FIG1C_MEAN_FRACTION = {(3, 10): 0.18, (8, 60): 0.036}
# Table 1: % unselectable before attention, per layer, in the model without scaling / with.
PAPER_TABLE1 = {"without scaling": [51.0, 32.2, 34.7, 36.8], "with scaling": [0.0] * 4}
# Table 2: % unselectable before and after the LayerNorm, per layer.
PAPER_TABLE2 = {"before LayerNorm": [44.8, 28.5, 22.3, 26.1], "after LayerNorm": [0.0] * 4}

METHODS = ("own direction", "walk", "nnls", "lp")


@dataclass(frozen=True)
class Selectability:
    """Verdicts and certificates. Shapes for one key set (batched: a leading B axis).

    selectable: bool (n,); queries: (n, d), a unit witness query per selectable key (NaN
    rows elsewhere); weights: (n, n), convex weights per unselectable key (NaN rows
    elsewhere); decided_by: (n,) index into ``METHODS`` (which step certified the key);
    tol: the tolerance used (per set).
    """

    selectable: np.ndarray
    queries: np.ndarray
    weights: np.ndarray
    decided_by: np.ndarray
    tol: np.ndarray | float

    @property
    def unselectable_fraction(self) -> np.ndarray | float:
        """Fraction of keys that are unselectable (per set when batched)."""
        return 1.0 - self.selectable.mean(axis=-1)

    def __getitem__(self, b: int) -> "Selectability":
        return Selectability(self.selectable[b], self.queries[b], self.weights[b],
                             self.decided_by[b], float(np.asarray(self.tol)[b]))


# ------------------------------------------------------------------------------ input
def _as_keys(keys, ndim: int, name: str = "keys") -> np.ndarray:
    if isinstance(keys, torch.Tensor):
        if not keys.is_floating_point():
            raise TypeError(f"{name} must be floating point, got {keys.dtype}")
        keys = keys.detach().to("cpu", torch.float64).numpy()
    elif isinstance(keys, np.ndarray):
        if not np.issubdtype(keys.dtype, np.floating):
            raise TypeError(f"{name} must be floating point, got {keys.dtype}")
        keys = keys.astype(np.float64)
    else:
        raise TypeError(f"{name} must be a torch.Tensor or a NumPy array, got "
                        f"{type(keys).__name__}")
    if keys.ndim != ndim:
        want = "(n, d)" if ndim == 2 else "(B, n, d)"
        raise ValueError(f"{name} must have shape {want}, got {keys.shape}"
                         + ("; use selectability_batch for a batch of key sets"
                            if ndim == 2 and keys.ndim == 3 else ""))
    if keys.shape[-2] < 2:
        raise ValueError(f"selectability needs at least 2 keys, got {keys.shape[-2]}")
    if keys.shape[-1] < 1:
        raise ValueError("keys need at least one dimension")
    if not np.isfinite(keys).all():
        raise ValueError(f"{name} contains NaN or infinite values; no score is defined "
                         "for them. Find where they came from upstream.")
    return keys


# ------------------------------------------------------------------- certificate checks
def _margins(Kc: np.ndarray, Q: np.ndarray, same: np.ndarray) -> np.ndarray:
    """Margin of key i under query Q[..., i, :]: q.k_i - max over keys that differ.

    Kc: (B, n, d), Q: (B, n, d) (unit rows), same: (B, n, n) -> (B, n); +inf when no
    other point exists.
    """
    scores = np.einsum("bid,bjd->bij", Q, Kc)  # (B, n, n): query i against key j
    own = np.einsum("bii->bi", scores)
    others = np.where(same, -np.inf, scores).max(axis=-1)
    return own - others


def _unit(Q: np.ndarray) -> np.ndarray:
    norm = np.linalg.norm(Q, axis=-1, keepdims=True)
    return Q / np.where(norm > 0, norm, 1.0)


def _verify(Kc, same, tol, sel, Q, W) -> None:
    """Raise unless every verdict's certificate holds (see the module docstring)."""
    margin = _margins(Kc, np.nan_to_num(Q), same)
    bad_q = sel & ~(margin > tol[:, None])
    Wz = np.nan_to_num(W)
    recon = np.einsum("bij,bjd->bid", Wz, Kc)
    err = np.abs(recon - Kc).max(axis=-1)
    bad_w = ~sel & ~((Wz >= 0).all(-1) & (np.abs(Wz.sum(-1) - 1) <= 1e-9)
                     & ~(same & (Wz > 0)).any(-1) & (err <= tol[:, None]))
    if bad_q.any() or bad_w.any():
        raise RuntimeError(f"{int(bad_q.sum())} witness queries and {int(bad_w.sum())} "
                           "convex weights failed verification; please report this with "
                           "the keys that caused it")


def _identical(Kc: np.ndarray, tol: np.ndarray, chunk: int = 4_000_000) -> np.ndarray:
    """same[b, i, j]: keys i and j of set b agree to within tol[b] in every coordinate.

    Computed in blocks of about ``chunk`` differences, so that long contexts in wide
    models (say 256 keys in 384 dimensions) do not need gigabytes at once.
    """
    B, n, d = Kc.shape
    same = np.empty((B, n, n), dtype=bool)
    sets = max(1, chunk // (n * n * d))
    rows = max(1, chunk // (n * d))
    for b0 in range(0, B, sets):
        blk = Kc[b0:b0 + sets]                        # (b, n, d)
        t = tol[b0:b0 + sets, None, None]
        for i0 in range(0, n, rows):
            diff = np.abs(blk[:, i0:i0 + rows, None, :] - blk[:, None, :, :]).max(-1)
            same[b0:b0 + sets, i0:i0 + rows] = diff <= t
    return same


# --------------------------------------------------------------------------- the steps
def _walk(Kc, same, tol, idx, Q0, steps):
    """Braid-reflect walk for keys idx = (b, i) arrays; returns (success mask, queries)."""
    b, i = idx
    K = Kc[b]                       # (m, n, d)
    ki = Kc[b, i]                   # (m, d)
    mask = same[b, i]               # (m, n): True for key i and its duplicates
    X = Q0.copy()                   # (m, d)
    ok = np.zeros(len(b), dtype=bool)
    rows = np.arange(len(b))
    for _ in range(steps):
        scores = np.einsum("md,mnd->mn", X, K)
        scores = np.where(mask, -np.inf, scores)
        j = scores.argmax(axis=1)
        gap = np.einsum("md,md->m", X, ki) - scores[rows, j]
        ok |= gap > tol[b] * np.linalg.norm(X, axis=1)
        live = ~ok
        if not live.any():
            break
        w = K[rows, j] - ki          # (m, d): the direction in which j beats i
        ww = np.einsum("md,md->m", w, w)
        xw = np.einsum("md,md->m", X, w)
        # reflect across the tie hyperplane w.x = 0, and step a little past it so that an
        # exact tie does not leave the walk where it was
        step = (2.0 * xw / ww + 1e-3 * np.linalg.norm(X, axis=1) / np.sqrt(ww))
        X = np.where(live[:, None], X - step[:, None] * w, X)
    return ok, X


def _nnls_one(Kc_b, same_bi, i, s):
    """NNLS on lifted points: returns ('w', weights) or ('q', query) or (None, None)."""
    others = np.flatnonzero(~same_bi)
    A = np.vstack([Kc_b[others].T / s, np.ones(len(others))])  # (d + 1, m)
    rhs = np.append(Kc_b[i] / s, 1.0)
    try:
        lam, _ = nnls(A, rhs, maxiter=50 * A.shape[1])
    except RuntimeError:
        return None, None
    r = rhs - A @ lam
    w = np.zeros(len(same_bi))
    if lam.sum() > 0:
        w[others] = lam / lam.sum()
    return w, r[:-1]


def _lp_one(Kc_b, same_bi, i, tol):
    """HiGHS: hull membership (weights) first, then the largest-margin query."""
    others = np.flatnonzero(~same_bi)
    m, d = len(others), Kc_b.shape[1]
    A_eq = np.vstack([Kc_b[others].T, np.ones(m)])
    b_eq = np.append(Kc_b[i], 1.0)
    opts = {"primal_feasibility_tolerance": 1e-10, "dual_feasibility_tolerance": 1e-10}
    res = linprog(np.zeros(m), A_eq=A_eq, b_eq=b_eq, bounds=(0, None), method="highs",
                  options=opts)
    w = np.zeros(len(same_bi))
    if res.status == 0:
        lam = np.clip(res.x, 0, None)
        # polish: HiGHS is feasible to ~1e-10; a vertex solution has at most d + 1
        # affinely independent keys in its support, where the equations solve exactly
        support = lam > 1e-9 * lam.max()
        exact = np.linalg.lstsq(A_eq[:, support], b_eq, rcond=None)[0]
        if (exact >= 0).all():
            lam = np.zeros(m)
            lam[support] = exact
        w[others] = lam / lam.sum()
        if np.abs(w @ Kc_b - Kc_b[i]).max() <= tol:
            return "w", w
    # maximise t subject to q.(k_j - k_i) + t <= 0 for every other j, -1 <= q <= 1
    c = np.zeros(d + 1)
    c[-1] = -1.0
    A_ub = np.hstack([Kc_b[others] - Kc_b[i], np.ones((m, 1))])
    res = linprog(c, A_ub=A_ub, b_ub=np.zeros(m), bounds=[(-1, 1)] * d + [(None, 1)],
                  method="highs", options=opts)
    if res.status == 0 and res.x[-1] > 0:
        return "q", res.x[:d]
    return None, w


def selectability_batch(keys, *, rtol: float = 1e-12, walk_steps: int = 20) -> Selectability:
    """Selectability of every key in a batch of key sets. keys: (B, n, d) -> per-set results.

    See the module docstring for the method, the certificates and the tolerance.
    """
    K = _as_keys(keys, 3)
    if not (0 < rtol < 1e-2):
        raise ValueError(f"rtol must be in (0, 0.01), got {rtol}")
    B, n, d = K.shape
    Kc = K - K.mean(axis=1, keepdims=True)             # (B, n, d), translation-free
    s = np.abs(Kc).max(axis=(1, 2))                    # (B,)
    tol = rtol * s
    same = _identical(Kc, tol)                        # (B, n, n)
    sel = np.zeros((B, n), dtype=bool)
    Q = np.full((B, n, d), np.nan)
    W = np.full((B, n, n), np.nan)
    how = np.full((B, n), -1, dtype=np.int8)
    # a set whose keys are all identical: one point, a vertex; any query "wins"
    single = same.all(axis=(1, 2))
    if single.any():
        sel[single], how[single] = True, 0
        Q[single] = np.eye(1, d)[0]
    s_safe = np.where(s > 0, s, 1.0)

    # step 1: own direction, raw and centred
    for cand in (K, Kc):
        Qc = _unit(cand)
        ok = (_margins(Kc, Qc, same) > tol[:, None]) & ~sel & ~single[:, None]
        Q[ok], sel[ok], how[ok] = Qc[ok], True, 0

    # step 2: braid-reflect walk
    todo_b, todo_i = np.nonzero(~sel)
    per_chunk = max(1, 4_000_000 // (n * d))          # keys walked together
    for c0 in range(0, len(todo_b) if walk_steps > 0 else 0, per_chunk):
        idx = (todo_b[c0:c0 + per_chunk], todo_i[c0:c0 + per_chunk])
        ok, X = _walk(Kc, same, tol, idx, _unit(Kc[idx]), walk_steps)
        b, i = idx[0][ok], idx[1][ok]
        Q[b, i], sel[b, i], how[b, i] = _unit(X[ok]), True, 1

    # steps 3 and 4: NNLS, then HiGHS, one key at a time
    for b, i in zip(*np.nonzero(~sel)):
        decided = False
        w, rx = _nnls_one(Kc[b], same[b, i], i, s_safe[b])
        if w is not None:
            if np.abs(w @ Kc[b] - Kc[b, i]).max() <= tol[b] and abs(w.sum() - 1) < 1e-9:
                W[b, i], how[b, i], decided = w, 2, True
            else:
                q = _unit(rx[None, None])[0, 0]
                if _margins(Kc[b:b + 1], np.broadcast_to(q, (1, n, d)).copy(),
                            same[b:b + 1])[0, i] > tol[b]:
                    Q[b, i], sel[b, i], how[b, i], decided = q, True, 2, True
        if not decided:
            kind, cert = _lp_one(Kc[b], same[b, i], i, tol[b])
            if kind == "w":
                W[b, i], how[b, i] = cert, 3
            elif kind == "q":
                Q[b, i], sel[b, i], how[b, i] = _unit(cert), True, 3
            else:
                raise RuntimeError(
                    f"key {i} of set {b} lies within the tolerance of the hull of the "
                    "others but no convex weights reproduce it to tol; rescale the keys "
                    "or raise rtol")
    _verify(Kc, same, tol, sel, Q, W)
    return Selectability(sel, Q, W, how, tol)


def selectability(keys, *, rtol: float = 1e-12, walk_steps: int = 20) -> Selectability:
    """Decide, with certificates, which of the keys (n, d) can receive the highest score.

    Returns a :class:`Selectability` with ``selectable`` (n,), ``queries`` (n, d),
    ``weights`` (n, n). Accepts torch tensors or NumPy arrays of floats; raises on fewer
    than 2 keys, NaN or inf, or a tensor that is not 2-D. Introduced in chapter 2.
    """
    K = _as_keys(keys, 2)
    return selectability_batch(K[None], rtol=rtol, walk_steps=walk_steps)[0]


def selectability_lp_baseline(keys) -> np.ndarray:
    """The straightforward exact method: one LP per key (Grivas et al. 2022), via HiGHS.

    For key i maximise the radius r of a ball of queries x in a box for which i wins:
    (k_j - k_i) . x + ||k_j - k_i|| r <= 0 for every j != i, -1 <= x <= 1, 0 <= r <= 1.
    Key i is selectable iff r > 0 (here r > 1e-12 times the keys' scale). keys: (n, d) -> bool (n,).
    Identical keys are dropped from each other's constraints, as in :func:`selectability`.
    """
    K = _as_keys(keys, 2)
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


# ---------------------------------------------------------------- Figure 1c/1d helpers
def random_key_sets(n: int, d: int, runs: int, seed: int = 123,
                    layer_norm: bool = False) -> np.ndarray:
    """``runs`` sets of n keys ~ N(0, I_d), optionally after LayerNorm (no affine, eps 0).

    Returns (runs, n, d) float64. The seed is mixed with (n, d) so each cell of a grid
    has its own stream and any cell can be recomputed alone.
    """
    if n < 2 or d < 2 or runs < 1:
        raise ValueError(f"need n >= 2, d >= 2 and runs >= 1, got n={n}, d={d}, runs={runs}")
    gen = torch.Generator().manual_seed(seed * 1_000_003 + 1009 * d + n)
    x = torch.randn(runs, n, d, generator=gen, dtype=torch.float64)
    if layer_norm:
        from .layernorm import layer_norm as ln
        x = ln(x)
    return x.numpy()


def unselectable_grid(ns, ds, runs: int = 100, seed: int = 123, layer_norm: bool = False,
                      progress: bool = True) -> dict:
    """Figure 1c/1d: for every (d, n), the mean fraction of unselectable keys and the
    probability that at least one key is unselectable, over ``runs`` random sets.

    Returns a dict with ``ns``, ``ds``, ``mean_fraction`` and ``prob_any`` (len(ds),
    len(ns)) arrays, and ``seconds`` (wall time).
    """
    from .progress import progress as bar
    ns, ds = [int(v) for v in ns], [int(v) for v in ds]
    mean = np.zeros((len(ds), len(ns)))
    prob = np.zeros((len(ds), len(ns)))
    start = time.perf_counter()
    cells = [(a, b) for a in range(len(ds)) for b in range(len(ns))]
    for a, b in bar(cells, desc="grid" + (" (LN)" if layer_norm else ""),
                    disable=not progress):
        keys = random_key_sets(ns[b], ds[a], runs, seed, layer_norm)
        frac = selectability_batch(keys).unselectable_fraction
        mean[a, b], prob[a, b] = frac.mean(), (frac > 0).mean()
    return {"ns": ns, "ds": ds, "mean_fraction": mean, "prob_any": prob,
            "seconds": time.perf_counter() - start}


# ----------------------------------------------------- keys inside a causal attention
def prefix_unselectable_fraction(keys, positions=None) -> float:
    """Fraction of (query position t, key position s <= t) pairs where key s cannot win.

    keys: (S, T, d), S independent sequences (or heads) of T keys each. For query t the
    candidates are keys 0..t (the causal prefix). ``positions``: the query positions to
    use (default: every t >= 1; t = 0 sees a single key, which always wins).
    """
    K = _as_keys(keys, 3)
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
