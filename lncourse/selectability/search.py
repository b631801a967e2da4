"""The searches behind :func:`lncourse.selectability.exact.selectability_batch` that find
certificates for long contexts quickly (chapter 2, n = 1,024).

* :func:`walk`: the braid-reflect walk of Grivas et al. (2022) for the undecided keys; for
  one set at a time (long contexts) its scores are one matrix product, X K^T.
* :func:`column_generation`: non-negative least squares on the lifted points (k_j, 1) of a
  few keys (the columns), which grow until a certificate appears. The NNLS residual
  r = (r_x, r_0) of a column set C is, by the KKT conditions, a query r_x under which key
  i beats every key of C; the keys that beat key i under it are added to C (the
  standard pricing step of column generation for this LP). It ends with convex weights
  over C (key i is inside the hull), or with a query under which key i beats *every*
  other key (a vertex), both checked to the tolerance: the same certificates as the full
  problem, found on tens of columns instead of n.
* :func:`warm_started`: column generation for the undecided keys of one set, taken in a
  chain (each next key the undecided one nearest to the last, in whitened coordinates,
  where the hull's shape does not bias "near"), each started from the columns that
  certified its nearest decided neighbour and from the keys that score highest under
  its own direction.

Every certificate found here is checked again by ``exact._verify``; a key left without
one falls back to full NNLS, then to the LP. Shapes: keys of one set (n, d).
"""

from __future__ import annotations

import numpy as np

__all__ = ["walk", "column_generation", "warm_started"]


def _unit(Q: np.ndarray) -> np.ndarray:
    norm = np.linalg.norm(Q, axis=-1, keepdims=True)
    return Q / np.where(norm > 0, norm, 1.0)


def walk(Kc, same, tol, idx, Q0, steps):
    """Braid-reflect walk for keys idx = (set, key) index arrays of length m, from unit
    queries Q0 (m, d). Returns (success mask (m,), final queries (m, d))."""
    b, i = idx
    one = len(b) > 0 and (b == b[0]).all()      # one set: scores by a matrix product
    K = Kc[b[0]] if one else Kc[b]              # (n, d) or (m, n, d)
    ki = Kc[b, i]                               # (m, d)
    mask = same[b, i]                           # (m, n): True for key i and its duplicates
    X = Q0.copy()
    ok = np.zeros(len(b), dtype=bool)
    rows = np.arange(len(b))
    live = rows                                 # the keys still walking
    lone = one and mask.sum() == len(b)         # one set, no duplicates: mask = own key
    for _ in range(steps):
        Xl = X[live]
        scores = Xl @ K.T if one else np.einsum("md,mnd->mn", Xl, K[live])
        if lone:
            scores[np.arange(len(live)), i[live]] = -np.inf
        else:
            np.putmask(scores, mask[live], -np.inf)
        j = scores.argmax(axis=1)
        gap = np.einsum("md,md->m", Xl, ki[live]) - scores[np.arange(len(live)), j]
        won = gap > tol[b[live]] * np.linalg.norm(Xl, axis=1)
        ok[live[won]] = True
        if won.all():
            break
        keep = ~won
        live, Xl, j = live[keep], Xl[keep], j[keep]
        w = (K[j] if one else K[live, j]) - ki[live]   # (m, d): where j beats i
        ww = np.einsum("md,md->m", w, w)
        xw = np.einsum("md,md->m", Xl, w)
        # reflect across the tie hyperplane w.x = 0, and step a little past it so that an
        # exact tie does not leave the walk where it was
        step = (2.0 * xw / ww + 1e-3 * np.linalg.norm(Xl, axis=1) / np.sqrt(ww))
        X[live] = Xl - step[:, None] * w
    return ok, X


def column_generation(K, same_i, i, s, tol, start, nnls, add: int = 8, rounds: int = 60,
                      lifted=None):
    """Certify key i of K (n, d) (centred) by NNLS on growing columns, from ``start``.

    ``same_i`` (n,): key i and its duplicates (never columns, never rivals); s: the
    scale of the keys; ``nnls``: SciPy's (passed in, so that a test can disable it);
    ``lifted``: the points (k_j / s, 1) as (d + 1, n), if already computed.
    Returns (("weights", w (n,)) or ("query", q (d,)) or None, the final columns).
    """
    n = len(K)
    L = np.vstack([K.T / s, np.ones(n)]) if lifted is None else lifted
    cols = np.unique(start[~same_i[start]])
    rhs = L[:, i]
    for _ in range(rounds):
        A = L[:, cols]
        try:
            lam, _ = nnls(A, rhs, maxiter=50 * A.shape[1])
        except RuntimeError:
            return None, cols
        total = lam.sum()
        if total > 0 and np.abs((lam / total) @ K[cols] - K[i]).max() <= tol:
            w = np.zeros(n)
            w[cols] = lam / total
            return ("weights", w), cols[lam > 0]
        q = (rhs - A @ lam)[:-1]
        q = q / (np.sqrt(q @ q) or 1.0)
        scores = K @ q
        scores[same_i] = -np.inf
        own = q @ K[i]
        if own - scores.max() > tol:
            return ("query", q), cols[lam > 0]
        scores[cols] = -np.inf                   # price: the keys that beat i under q
        new = np.flatnonzero(scores >= own - tol)
        if len(new) > add:
            new = new[np.argpartition(-scores[new], add)[:add]]
        if not len(new):
            return None, cols
        cols = np.concatenate([cols, new])
    return None, cols


def warm_started(K, same, tol, s, keys, nnls, start: int = 16):
    """Column generation for ``keys`` (indices) of one set K (n, d), centred; each key
    starts from its nearest decided neighbour's final columns and its own ``start`` best
    scorers. Returns one certificate or None per key, in the order of ``keys``."""
    n, d = K.shape
    U, S, Vt = np.linalg.svd(K, full_matrices=False)
    rank = max(1, int((S > 1e-9 * S[0]).sum())) if S[0] > 0 else 1
    white = K @ Vt[:rank].T / np.where(S[:rank] > 0, S[:rank], 1.0)
    P = white[keys]
    sq = (P * P).sum(1)
    dist = sq[:, None] + sq[None, :] - 2 * P @ P.T
    np.fill_diagonal(dist, np.inf)
    own = K[keys] @ K.T                                 # (m, n): each key's best scorers
    own[np.arange(len(keys)), keys] = -np.inf
    k = min(start, n - 1)
    best = np.argpartition(-own, k - 1, axis=1)[:, :k] if k < n else np.tile(np.arange(n),
                                                                           (len(keys), 1))
    L = np.vstack([K.T / s, np.ones(n)])
    done = np.zeros(len(keys), dtype=bool)
    kept: list = [None] * len(keys)
    out: list = [None] * len(keys)
    a = 0
    for _ in range(len(keys)):       # a chain: next, the undecided key nearest to the last
        i = keys[a]
        cols = best[a]
        if done.any():
            near = np.flatnonzero(done)[np.argmin(dist[a, done])]
            cols = np.concatenate([cols, kept[near]])
        out[a], kept[a] = column_generation(K, same[i], i, s, tol, cols, nnls, lifted=L)
        done[a] = True
        if not done.all():
            a = int(np.argmin(np.where(done, np.inf, dist[a])))
    return out
