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
   r_x under which k_i wins by ||r||^2 (so this step is exact in exact arithmetic). It
   runs first on a few columns grown by column generation, warm-started from the
   nearest decided key (:mod:`lncourse.selectability.search`), then on all keys;
4. an LP solved by SciPy's HiGHS for whatever the steps above leave uncertified.

Each verdict records which step certified it (:class:`Method`).

Conventions. Keys that are identical (equal within ``tol`` in every coordinate) count as
one point: such a key is selectable when that point is a vertex, and it need only beat
the keys that differ from it. Tolerances: with s the largest |coordinate| of the centred
keys, tol = rtol * s (default rtol = 1e-12, a few hundred times
the rounding error of float64 scores); all tests run on the centred keys, which
changes no verdict (adding a vector to every key adds the same number to every score).
Keys that lie on a hyperplane must be computed in float64: float32 rounding gives them a
thickness of about 1e-7 of their size, which this exact test resolves as a dimension.
Shapes: keys (n, d); a batch of key sets (S, n, d): S sets of n keys in d dimensions.
The experiments built on this (Figure 1c/1d, the Gaussian proxy, keys inside a causal
prefix) are in :mod:`lncourse.selectability.experiments`.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass

import numpy as np
import torch
from scipy.optimize import linprog, nnls

from lncourse.selectability.search import walk, warm_started

__all__ = ["Method", "Selectability", "selectability", "selectability_batch"]


class Method(enum.IntEnum):
    """The step that certified a verdict (``Selectability.decided_by``)."""

    OWN_DIRECTION = 0   # q = k_i or k_i - mean
    WALK = 1            # the braid-reflect walk
    NNLS = 2            # non-negative least squares on the lifted points
    LP = 3              # HiGHS


@dataclass(frozen=True)
class Selectability:
    """Verdicts and certificates. Shapes for one key set (batched: a leading S axis).

    selectable: bool (n,); queries: (n, d), a unit witness query per selectable key (NaN
    rows elsewhere); weights: (n, n), convex weights per unselectable key (NaN rows
    elsewhere); decided_by: int8 (n,), the :class:`Method` that certified each key;
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

    def method_counts(self) -> dict[str, int]:
        """How many keys each step certified: {method name: count}."""
        return {m.name.lower(): int((self.decided_by == m).sum()) for m in Method}


# ------------------------------------------------------------------------------ input
def as_keys(keys, ndim: int, name: str = "keys") -> np.ndarray:
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
        want = "(n, d)" if ndim == 2 else "(S, n, d)"
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

    Kc: (S, n, d), Q: (S, n, d) (unit rows), same: (S, n, n) -> (S, n); +inf when no
    other point exists.
    """
    scores = Q @ Kc.transpose(0, 2, 1)         # (S, n, n): query i against key j
    own = np.einsum("bii->bi", scores).copy()
    np.putmask(scores, same, -np.inf)
    return own - scores.max(axis=-1)


def _unit(Q: np.ndarray) -> np.ndarray:
    norm = np.linalg.norm(Q, axis=-1, keepdims=True)
    return Q / np.where(norm > 0, norm, 1.0)


def _verify(Kc, same, tol, sel, Q, W) -> None:
    """Raise unless every verdict's certificate holds (see the module docstring)."""
    margin = _margins(Kc, np.nan_to_num(Q), same)
    bad_q = sel & ~(margin > tol[:, None])
    Wz = np.nan_to_num(W)
    recon = Wz @ Kc
    err = np.abs(recon - Kc).max(axis=-1)
    bad_w = ~sel & ~((Wz >= 0).all(-1) & (np.abs(Wz.sum(-1) - 1) <= 1e-9)
                     & ~(same & (Wz > 0)).any(-1) & (err <= tol[:, None]))
    if bad_q.any() or bad_w.any():
        raise RuntimeError(f"{int(bad_q.sum())} witness queries and {int(bad_w.sum())} "
                           "convex weights failed verification; please report this with "
                           "the keys that caused it")


def _identical(Kc: np.ndarray, tol: np.ndarray) -> np.ndarray:
    """same[b, i, j]: keys i and j of set b agree to within tol[b] in every coordinate.

    Keys sorted by their first coordinate: only keys within tol[b] of each other there
    are compared in full, so a set costs O(n log n) unless many keys nearly coincide.
    """
    S, n, d = Kc.shape
    same = np.zeros((S, n, n), dtype=bool)
    for b in range(S):
        order = np.argsort(Kc[b, :, 0], kind="stable")
        X = Kc[b, order]                              # (n, d), sorted by coordinate 0
        reach = np.searchsorted(X[:, 0], X[:, 0] + tol[b], side="right")
        for off in range(int((reach - np.arange(n)).max())):
            p = np.flatnonzero(np.arange(off, n) < reach[:n - off])
            eq = np.abs(X[p] - X[p + off]).max(-1) <= tol[b]
            i, j = order[p[eq]], order[p[eq] + off]
            same[b, i, j] = same[b, j, i] = True
    return same


# --------------------------------------------------------------------------- the steps
class _Verdicts:
    """The verdicts being filled in for S sets of n keys in d dimensions."""

    def __init__(self, S: int, n: int, d: int):
        self.sel = np.zeros((S, n), dtype=bool)
        self.Q = np.full((S, n, d), np.nan)
        self.W = np.full((S, n, n), np.nan)
        self.how = np.full((S, n), -1, dtype=np.int8)

    def selectable(self, where, queries, method: Method) -> None:
        self.Q[where], self.sel[where], self.how[where] = queries, True, method

    def unselectable(self, where, weights, method: Method) -> None:
        self.W[where], self.how[where] = weights, method


def _own_direction(v: _Verdicts, K, Kc, same, tol) -> None:
    """Step 1, every key at once: q = k_i, then q = k_i - mean (on a sphere both win)."""
    single = same.all(axis=(1, 2))       # all keys of a set identical: one point, a vertex
    v.selectable(single, np.eye(1, K.shape[2])[0], Method.OWN_DIRECTION)
    for cand in (K, Kc):
        Qc = _unit(cand)
        ok = (_margins(Kc, Qc, same) > tol[:, None]) & ~v.sel
        v.selectable(ok, Qc[ok], Method.OWN_DIRECTION)


def _walk_undecided(v: _Verdicts, Kc, same, tol, steps: int) -> None:
    """Step 2: the walk for every undecided key, in chunks of about 4e6 numbers (for
    long contexts, n >= 256, one set at a time: its scores are one matrix product)."""
    if steps <= 0:
        return
    todo_b, todo_i = np.nonzero(~v.sel)
    S, n, d = Kc.shape
    per_chunk = n if n >= 256 else max(1, 4_000_000 // (n * d))
    starts = [0]
    while starts[-1] < len(todo_b):
        c0 = starts[-1]
        stop = min(c0 + per_chunk, len(todo_b))
        if n >= 256:                                   # end the chunk with its set
            stop = c0 + int(np.searchsorted(todo_b[c0:], todo_b[c0], side="right"))
        starts.append(stop)
    for c0, c1 in zip(starts, starts[1:]):
        idx = (todo_b[c0:c1], todo_i[c0:c1])
        ok, X = walk(Kc, same, tol, idx, _unit(Kc[idx]), steps)
        v.selectable((idx[0][ok], idx[1][ok]), _unit(X[ok]), Method.WALK)


def _nnls_certificate(Kc_b, same_bi, i, s, tol):
    """Step 3 for key i of one set (Kc_b (n, d)): NNLS on the lifted points (k_j, 1).

    Returns ("weights", w (n,)) when the convex weights reproduce k_i to tol,
    ("query", q (d,)) when the residual's key part is a unit query under which k_i wins
    by more than tol, and None when NNLS fails or neither certificate passes.
    """
    others = np.flatnonzero(~same_bi)
    A = np.vstack([Kc_b[others].T / s, np.ones(len(others))])  # (d + 1, m)
    rhs = np.append(Kc_b[i] / s, 1.0)
    try:
        lam, _ = nnls(A, rhs, maxiter=50 * A.shape[1])
    except RuntimeError:
        return None
    if lam.sum() > 0:
        w = np.zeros(len(same_bi))
        w[others] = lam / lam.sum()
        if np.abs(w @ Kc_b - Kc_b[i]).max() <= tol:
            return "weights", w
    q = _unit((rhs - A @ lam)[:-1])
    if q @ Kc_b[i] - (Kc_b[others] @ q).max() > tol:
        return "query", q
    return None


def _lp_certificate(Kc_b, same_bi, i, tol):
    """Step 4, HiGHS: hull membership (weights) first, then the largest-margin query.

    Same returns as :func:`_nnls_certificate`.
    """
    others = np.flatnonzero(~same_bi)
    m, d = len(others), Kc_b.shape[1]
    A_eq = np.vstack([Kc_b[others].T, np.ones(m)])
    b_eq = np.append(Kc_b[i], 1.0)
    opts = {"primal_feasibility_tolerance": 1e-10, "dual_feasibility_tolerance": 1e-10}
    res = linprog(np.zeros(m), A_eq=A_eq, b_eq=b_eq, bounds=(0, None), method="highs",
                  options=opts)
    if res.status == 0:
        lam = np.clip(res.x, 0, None)
        # polish: HiGHS is feasible to ~1e-10; a vertex solution has at most d + 1
        # affinely independent keys in its support, where the equations solve exactly
        support = lam > 1e-9 * lam.max()
        exact = np.linalg.lstsq(A_eq[:, support], b_eq, rcond=None)[0]
        if (exact >= 0).all():
            lam = np.zeros(m)
            lam[support] = exact
        w = np.zeros(len(same_bi))
        w[others] = lam / lam.sum()
        if np.abs(w @ Kc_b - Kc_b[i]).max() <= tol:
            return "weights", w
    # maximise t subject to q.(k_j - k_i) + t <= 0 for every other j, -1 <= q <= 1
    c = np.zeros(d + 1)
    c[-1] = -1.0
    A_ub = np.hstack([Kc_b[others] - Kc_b[i], np.ones((m, 1))])
    res = linprog(c, A_ub=A_ub, b_ub=np.zeros(m), bounds=[(-1, 1)] * d + [(None, 1)],
                  method="highs", options=opts)
    if res.status == 0 and res.x[-1] > 0:
        return "query", _unit(res.x[:d])
    return None


def _decide_exactly(v: _Verdicts, Kc, same, tol, s, b: int, i: int) -> None:
    """Steps 3 and 4 for key i of set b; raise if neither certifies it."""
    for method, found in ((Method.NNLS, lambda: _nnls_certificate(Kc[b], same[b, i], i,
                                                                   s[b], tol[b])),
                          (Method.LP, lambda: _lp_certificate(Kc[b], same[b, i], i, tol[b]))):
        cert = found()
        if cert is not None:
            kind, value = cert
            if kind == "weights":
                v.unselectable((b, i), value, method)
            else:
                v.selectable((b, i), value, method)
            return
    raise RuntimeError(f"key {i} of set {b} lies within the tolerance of the hull of the "
                       "others but no convex weights reproduce it to tol; rescale the keys "
                       "or raise rtol")


def selectability_batch(keys, *, rtol: float = 1e-12, walk_steps: int = 20) -> Selectability:
    """Selectability of every key in a batch of key sets. keys: (S, n, d) -> per-set results.

    See the module docstring for the method, the certificates and the tolerance.
    """
    K = as_keys(keys, 3)
    if not (0 < rtol < 1e-2):
        raise ValueError(f"rtol must be in (0, 0.01), got {rtol}")
    S, n, d = K.shape
    Kc = K - K.mean(axis=1, keepdims=True)             # (S, n, d), translation-free
    s = np.abs(Kc).max(axis=(1, 2))                    # (S,)
    tol = rtol * s
    same = _identical(Kc, tol)                         # (S, n, n)
    v = _Verdicts(S, n, d)
    _own_direction(v, K, Kc, same, tol)
    _walk_undecided(v, Kc, same, tol, walk_steps)
    s_safe = np.where(s > 0, s, 1.0)
    for b in np.flatnonzero((~v.sel).any(axis=1)):
        keys = np.flatnonzero(~v.sel[b])
        for i, cert in zip(keys, warm_started(Kc[b], same[b], tol[b], s_safe[b], keys, nnls)):
            if cert is None:
                _decide_exactly(v, Kc, same, tol, s_safe, b, i)
            elif cert[0] == "weights":
                v.unselectable((b, i), cert[1], Method.NNLS)
            else:
                v.selectable((b, i), cert[1], Method.NNLS)
    _verify(Kc, same, tol, v.sel, v.Q, v.W)
    return Selectability(v.sel, v.Q, v.W, v.how, tol)


def selectability(keys, *, rtol: float = 1e-12, walk_steps: int = 20) -> Selectability:
    """Decide, with certificates, which of the keys (n, d) can receive the highest score.

    Returns a :class:`Selectability` with ``selectable`` (n,), ``queries`` (n, d),
    ``weights`` (n, n). Accepts torch tensors or NumPy arrays of floats; raises on fewer
    than 2 keys, NaN or inf, or a tensor that is not 2-D. Introduced in chapter 2.
    """
    K = as_keys(keys, 2)
    return selectability_batch(K[None], rtol=rtol, walk_steps=walk_steps)[0]
