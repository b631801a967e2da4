"""The majority model on class counts: many models, exactly, at a fraction of the cost.

Without positions and without a mask, every position holding class i computes the same
thing, so a sequence acts as a multiset: the layer runs once per class present, and
attention weights key class j by its count c_bj,

    attn_b(i -> j) = exp(S_ij) c_bj / sum_l exp(S_il) c_bl,     S = q k^T / sqrt(d).

Two implementations of the same computation live here (chapter 3 explains both):

- :func:`multiset_forward` is the readable one. It lists the (sequence, class) pairs that
  occur, gathers a row of scores for each and lets autograd do the rest. The chapter shows
  it and the tests hold it equal to the token-level model.
- :func:`multiset_loss` is the fast one the trainer uses. Numerator and denominator of the
  attention above are matrix products of the counts with per-model class tables
  (:func:`class_tables`), so no (pairs x classes) softmax tensor exists; the pairs are laid
  out class by class, processed in chunks that stay in the CPU's cache, and differentiated
  by hand (one fused forward and backward, no autograd graph over pairs).
  :func:`multiset_evaluate` runs the same loop without the backward part.

Dimension names: M models, G batches (one per seed; model m reads batch m % G), B
sequences, C classes (i the query's class, j the key's), d ``d_model``, N pairs per class
(padded), n pairs per class in one chunk.
"""

from __future__ import annotations

import math
from typing import NamedTuple

import torch
import torch.nn.functional as F
from torch import Tensor

from .majority import ALL_VARIANTS, norm1

__all__ = ["norm1_stacked", "class_tables", "Pairs", "present_pairs", "multiset_forward",
           "multiset_loss_and_accuracy", "multiset_loss", "multiset_evaluate",
           "default_chunk"]

_aten = torch.ops.aten
# The per-model tensors of the fast path, in the order its Function takes them.
_WEIGHTS = ("W_E", "W_O", "b_O", "ln2_w", "ln2_b", "W_1", "b_1", "W_2", "b_2")


# ---------------------------------------------------------------- per-class tables
def norm1_stacked(W_E: Tensor, gain: Tensor, variants: tuple[str, ...]) -> Tensor:
    """Each model's gain * norm1 of its embedding table: (M, C, d), (M,) -> (M, C, d)."""
    out, start = [], 0
    while start < len(variants):  # contiguous runs of one variant share one call
        stop = start
        while stop < len(variants) and variants[stop] == variants[start]:
            stop += 1
        out.append(norm1(W_E[start:stop], variants[start]))
        start = stop
    h = torch.cat(out)
    uses_gain = torch.tensor([v.endswith("_gain") for v in variants], device=W_E.device)
    # Only the gain variant reads its gain; elsewhere it gets no gradient and stays 1.
    return torch.where(uses_gain.view(-1, 1, 1), gain.view(-1, 1, 1) * h, h)


def _check(params: dict[str, Tensor], variants: tuple[str, ...], counts: Tensor) -> Tensor:
    """Validate the inputs of every entry point; return counts as (G, B, C)."""
    M, C, _ = params["W_E"].shape
    if len(variants) != M:
        raise ValueError(f"got {len(variants)} variants for {M} models")
    for v in variants:
        if v not in ALL_VARIANTS:
            raise ValueError(f"unknown variant {v!r}; choose from {ALL_VARIANTS}")
    if counts.dim() == 2:
        counts = counts.unsqueeze(0)
    if counts.dim() != 3 or counts.shape[-1] != C or M % counts.shape[0]:
        raise ValueError(f"counts must have shape (G, B, {C}) with G dividing {M}, "
                         f"or (B, {C}); got {tuple(counts.shape)}")
    return counts


def class_tables(params: dict[str, Tensor], variants: tuple[str, ...]):
    """Everything attention needs that depends on classes only, for M models.

    Returns (S, v): scores S (M, C_i, C_j) = q_i . k_j / sqrt(d) and values v (M, C, d),
    with q, k, v the projections of each class's normalised embedding.
    """
    d = params["W_E"].shape[-1]
    h = norm1_stacked(params["W_E"], params["n1_gain"], tuple(variants))   # (M, C, d)
    W_Q, W_K, W_V = params["W_in"].chunk(3, dim=1)                         # (M, d, d)
    q, k, v = h @ W_Q.transpose(1, 2), h @ W_K.transpose(1, 2), h @ W_V.transpose(1, 2)
    return q @ k.transpose(1, 2) / math.sqrt(d), v


def _after_attention(params: dict[str, Tensor], e: Tensor, z: Tensor) -> Tensor:
    """The rest of the layer for rows of (embedding e, attention output z): (M, P, d)
    each -> logits (M, P, C). Residual, LN2, FFN, residual, tied unembedding."""
    d = e.shape[-1]
    x = e + z @ params["W_O"].transpose(1, 2) + params["b_O"].unsqueeze(1)  # resid_mid
    ln2 = F.layer_norm(x, (d,), eps=0.0) * params["ln2_w"].unsqueeze(1) \
        + params["ln2_b"].unsqueeze(1)
    hidden = torch.relu(ln2 @ params["W_1"].transpose(1, 2) + params["b_1"].unsqueeze(1))
    x = x + hidden @ params["W_2"].transpose(1, 2) + params["b_2"].unsqueeze(1)
    return x @ params["W_E"].transpose(1, 2)


# ------------------------------------------------------------ the readable version
class Pairs(NamedTuple):
    """The (sequence, class) pairs that occur in a batch, padded to one length P.

    seq, cls: (..., P) int64; count: (..., P), how many tokens of class ``cls`` sequence
    ``seq`` holds (0 for padding, whose pairs are real but absent classes).
    """

    seq: Tensor
    cls: Tensor
    count: Tensor


def present_pairs(counts: Tensor) -> Pairs:
    """The pairs (b, i) with c_bi > 0 of every batch. counts: (..., B, C).

    A sequence holds about 8.5 of the 20 classes, so working on these pairs instead of
    all B*C of them saves more than half of the work.
    """
    *lead, B, C = counts.shape
    flat = counts.reshape(*lead, B * C)
    present = flat > 0
    P = int(present.sum(dim=-1).max())
    # Stable sort puts the present pairs first, in order; the rest pads to length P.
    order = torch.argsort((~present).to(torch.int8), dim=-1, stable=True)[..., :P]
    return Pairs(seq=order // C, cls=order % C, count=flat.gather(-1, order))


def _per_model(t: Tensor, M: int) -> Tensor:
    """Repeat a per-batch tensor (G, ...) for M models, model m reading batch m % G."""
    G = t.shape[0]
    return t.unsqueeze(0).expand(M // G, *t.shape).reshape(M, *t.shape[1:])


def multiset_forward(params: dict[str, Tensor], counts: Tensor, variants: tuple[str, ...],
                     pairs: Pairs | None = None) -> tuple[Tensor, Pairs]:
    """Logits of M models for every (sequence, class) pair, computed from class counts.

    Attention weights each key class j by its count: softmax_j(S_ij + log c_bj).
    params: stacked (leading axis M); counts: (G, B, C) with M a multiple of G, model m
    reading batch m % G, or (B, C) for all models; variants: M names. Returns
    (logits (M, P, C), pairs (M, P)): logits[m, p] is what each of the pairs.count[m, p]
    tokens of class pairs.cls[m, p] in sequence pairs.seq[m, p] predicts.
    """
    counts = _check(params, variants, counts)
    W_E = params["W_E"]
    M, C, d = W_E.shape
    G, R = counts.shape[0], M // counts.shape[0]
    if pairs is None:
        pairs = present_pairs(counts)                            # (G, P) each
    P = pairs.cls.shape[-1]
    S, v = class_tables(params, variants)                        # (M, C, C), (M, C, d)
    # Row of scores of each pair's class, plus log c_bj of its sequence (-inf if absent).
    cls = pairs.cls.unsqueeze(-1)                                # (G, P, 1)
    log_c = torch.log(counts.to(W_E.dtype)).gather(1, pairs.seq.unsqueeze(-1).expand(G, P, C))
    rows = S.view(R, G, C, C).gather(2, cls.expand(R, G, P, C)) + log_c  # (R, G, P, C_j)
    z = torch.softmax(rows.view(M, P, C), dim=-1) @ v            # (M, P, d)
    e = W_E.view(R, G, C, d).gather(2, cls.expand(R, G, P, d)).view(M, P, d)
    return _after_attention(params, e, z), Pairs(*(_per_model(t, M) for t in pairs))


def multiset_loss_and_accuracy(logits: Tensor, pairs: Pairs,
                               labels: Tensor) -> tuple[Tensor, Tensor]:
    """Per-token cross-entropy and accuracy of each model, from pair logits.

    logits: (M, P, C); labels: (G, B) or (B,) as the counts were. Returns (loss, accuracy),
    each (M,): averages over the tokens, each pair counted as often as its class occurs,
    which equals the token-level averages of the released code.
    """
    M, P, C = logits.shape
    labels = labels.unsqueeze(0) if labels.dim() == 1 else labels
    target = _per_model(labels, M).gather(1, pairs.seq)          # (M, P)
    w = pairs.count.to(logits.dtype)
    ce = F.cross_entropy(logits.reshape(-1, C), target.reshape(-1),
                         reduction="none").view(M, P)
    n_tokens = w.sum(dim=1)                                      # (M,) = B * T
    loss = (ce * w).sum(dim=1) / n_tokens
    acc = ((logits.argmax(dim=-1) == target).to(w.dtype) * w).sum(dim=1) / n_tokens
    return loss, acc


# ------------------------------------------------------------------ the fast version
def default_chunk(device: torch.device, n_classes: int, n_per_class: int) -> int:
    """Pairs per class in one chunk: about 800 rows per model on a CPU, so that a
    chunk's tensors stay in cache; everything at once on a GPU."""
    if device.type == "cpu":
        return max(1, min(n_per_class, 800 // n_classes))
    return max(1, n_per_class)


def _class_major(counts: Tensor, labels: Tensor, chunk: int | None, dtype: torch.dtype):
    """Lay out each batch's pairs class by class, N per class (padded to a multiple of
    the chunk): for class i, the sequences that contain it.

    counts: (G, B, C) int; labels: (G, B). Returns the counts of each pair's sequence
    (G, C_i, N, C_j) in ``dtype``, the loss weight of each pair (its count over the
    batch's tokens; 0 for padding) (G, C_i, N), its label (G, C_i, N) and the chunk.
    """
    G, B, C = counts.shape
    present = (counts > 0).transpose(1, 2).contiguous()        # (G, C, B)
    position = present.cumsum(-1) - 1                            # place in its class's list
    N = int(position[..., -1].max()) + 1
    chunk = chunk or default_chunk(counts.device, C, N)
    N += (-N) % chunk
    # Scatter each present sequence to its place; absent ones go to a spare column N.
    order = torch.zeros(G, C, N + 1, dtype=torch.long, device=counts.device)
    order.scatter_(-1, torch.where(present, position, N),
                   torch.arange(B, device=counts.device).expand(G, C, B))
    order = order[..., :N]                                       # padding reads sequence 0
    g = torch.arange(G, device=counts.device).view(G, 1, 1)
    own = torch.arange(C, device=counts.device).view(1, C, 1)
    flat = (order + B * g).view(-1)                             # rows of (G B, C_j)
    rows = counts.to(dtype).view(G * B, C).index_select(0, flat).view(G, C, N, C)
    n_tokens = counts.sum(dim=(1, 2)).to(dtype).view(G, 1, 1)
    weight = rows.gather(-1, own.expand(G, C, N).unsqueeze(-1)).squeeze(-1) / n_tokens
    weight = torch.where(torch.arange(N, device=counts.device) <= position[..., -1:],
                         weight, torch.zeros((), dtype=dtype, device=counts.device))
    return rows, weight, labels[g, order], chunk


def _pair_pass(tables: Tensor, weights: dict[str, Tensor], rows: Tensor, weight: Tensor,
               target: Tensor, chunk: int, backward: bool):
    """Forward (and, with ``backward``, the hand-written backward) of everything after
    the class tables, chunk by chunk, in a layout with the features first.

    tables: (M, C_i, d+1, C_j) with tables[m, i, :d, j] = exp(S_ij - max_l S_il) v_j and
    tables[m, i, d, j] = exp(S_ij - max_l S_il); rows, weight, target from
    :func:`_class_major`. Returns (loss (M,), accuracy (M,), gradients or None) where
    the gradients are those of sum(loss) with respect to tables and every weight.
    """
    W_E, W_O, b_O = weights["W_E"], weights["W_O"], weights["b_O"]
    W_1, b_1, W_2, b_2 = weights["W_1"], weights["b_1"], weights["W_2"], weights["b_2"]
    M, C, d1, _ = tables.shape
    d, n = d1 - 1, chunk
    G, _, N, _ = rows.shape
    R, L = M // G, C * n                      # models per batch; rows of a chunk, (i, n)
    dt, dev = tables.dtype, tables.device
    # Models are ordered with the batch index inner (m = r G + g): per r, one product
    # of the (G C) count blocks with that r's tables, without repeating the counts.
    T = tables.reshape(R, G * C, d1, C)
    P = (torch.eye(d, dtype=dt, device=dev) - 1.0 / d).expand(M, d, d)   # centring
    mean = torch.full((1, 1, d), 1.0 / d, dtype=dt, device=dev).expand(M, 1, d)
    ones = torch.ones((1, 1, d), dtype=dt, device=dev).expand(M, 1, d)
    # Embedding plus attention bias of each row's class, (M, d, L) for every chunk.
    e_b = (W_E + b_O.unsqueeze(1)).transpose(1, 2).unsqueeze(-1).expand(M, d, C, n)
    e_b = e_b.reshape(M, d, L)
    lw, lb = weights["ln2_w"].unsqueeze(-1), weights["ln2_b"].unsqueeze(-1)  # (M, d, 1)
    b1, b2 = b_1.unsqueeze(-1), b_2.unsqueeze(-1)
    loss = torch.zeros(M, dtype=dt, device=dev)
    correct = torch.zeros(M, dtype=dt, device=dev)
    Y = torch.empty(R, G * C, d1, n, dtype=dt, device=dev)
    Yv = Y.view(M, C, d1, n)
    # Buffers in the features-first layout, written through transposed views (one pass
    # instead of a division followed by a copy).
    z_buf = torch.empty(M, d, C, n, dtype=dt, device=dev)
    den_buf = torch.empty(M, 1, C, n, dtype=dt, device=dev)
    z, den = z_buf.view(M, d, L), den_buf.view(M, 1, L)
    if backward:
        g_T = torch.zeros(T.shape, dtype=dt, device=dev)
        grads = {k: torch.zeros(w.shape, dtype=dt, device=dev) for k, w in weights.items()}
        g_E_t = torch.zeros(M, d, C, dtype=dt, device=dev)   # the unembedding's share
        dY_buf = torch.empty(M, C, d1, n, dtype=dt, device=dev)
        dY = dY_buf.view(R, G * C, d1, n)
    for s in range(0, N, n):
        counts = rows[:, :, s:s + n].reshape(G * C, n, C)             # (G C, n, C_j)
        w = weight[:, :, s:s + n].reshape(1, G, 1, L).expand(R, G, 1, L).reshape(M, 1, L)
        y = target[:, :, s:s + n].reshape(1, G, 1, L).expand(R, G, 1, L).reshape(M, 1, L)
        for r in range(R):                                            # numerator, denominator
            torch.bmm(T[r], counts.transpose(1, 2), out=Y[r])         # (G C, d+1, n)
        den_buf.transpose(1, 2).copy_(Yv[:, :, d:])                   # (M, 1, L)
        torch.div(Yv[:, :, :d], Yv[:, :, d:], out=z_buf.transpose(1, 2))  # z: (M, d, L)
        x1 = torch.baddbmm(e_b, W_O, z)                               # resid_mid
        xc = torch.bmm(P, x1)
        rstd = torch.bmm(mean, xc * xc).rsqrt_()                      # (M, 1, L)
        nrm = xc.mul_(rstd)                                           # LN2 without affine
        ln2 = torch.addcmul(lb, nrm, lw)
        a = torch.baddbmm(b1, W_1, ln2)
        hidden = torch.relu(a)
        x2 = torch.baddbmm(x1.add_(b2), W_2, hidden)                  # resid_post
        logits = torch.bmm(W_E, x2)                                   # (M, C, L)
        # log-softmax over the classes (dim 1) written out: torch's kernel for a dim that
        # is not the last was measured 3x slower than these few passes
        top = logits.amax(dim=1, keepdim=True)                        # (M, 1, L)
        e = (logits - top).exp_()
        total = e.sum(dim=1, keepdim=True)
        loss -= ((logits.gather(1, y) - top - total.log()) * w).sum((1, 2))
        if not backward:  # evaluation: count the tokens whose class is predicted
            # (max(...).indices, the first maximum as argmax gives, is much faster than
            # argmax over a dimension that is not the last)
            correct += ((logits.max(dim=1, keepdim=True).indices == y) * w).sum((1, 2))
            continue
        # d(loss)/d(logits) = w (softmax - onehot); w is applied on the narrower side.
        g = e.div_(total).scatter_add_(1, y, torch.full_like(w, -1.0))
        g_E_t.baddbmm_(x2 * w, g.transpose(1, 2))                     # (M, d, C)
        dx2 = torch.bmm(W_E.transpose(1, 2), g).mul_(w)               # (M, d, L)
        grads["W_2"].baddbmm_(dx2, hidden.transpose(1, 2))
        grads["b_2"] += dx2.sum(2)
        da = _aten.threshold_backward(torch.bmm(W_2.transpose(1, 2), dx2), a, 0)
        grads["W_1"].baddbmm_(da, ln2.transpose(1, 2))
        grads["b_1"] += da.sum(2)
        dln2 = torch.bmm(W_1.transpose(1, 2), da)
        grads["ln2_w"] += (dln2 * nrm).sum(2)
        grads["ln2_b"] += dln2.sum(2)
        dn = dln2.mul_(lw)
        u = (dn - nrm * torch.bmm(mean, dn * nrm)).mul_(rstd)         # LN backward, uncentred
        dx1 = torch.baddbmm(dx2, P, u)
        grads["W_E"] += dx1.view(M, d, C, n).sum(-1).transpose(1, 2)  # the residual e_i
        grads["W_O"].baddbmm_(dx1, z.transpose(1, 2))
        grads["b_O"] += dx1.sum(2)
        dz = torch.bmm(W_O.transpose(1, 2), dx1)                      # (M, d, L)
        # numerator z den and denominator den: d/dnum = dz / den, d/dden = -(dz . z) / den
        dden = torch.bmm(ones, dz * z).div_(den).neg_()               # (M, 1, L)
        torch.div(dz.view(M, d, C, n), den_buf, out=dY_buf[:, :, :d].transpose(1, 2))
        dY_buf[:, :, d:].transpose(1, 2).copy_(dden.view(M, 1, C, n))
        for r in range(R):
            g_T[r].baddbmm_(dY[r], counts)
    if not backward:
        return loss, correct, None
    grads["W_E"] += g_E_t.transpose(1, 2)
    return loss, correct, (g_T.view(M, C, d1, C), grads)


class _MultisetLoss(torch.autograd.Function):
    """Loss of M models with the hand-written backward of :func:`_pair_pass`."""

    @staticmethod
    def forward(ctx, tables, rows, weight, target, chunk, *weights):
        named = dict(zip(_WEIGHTS, weights))
        loss, _, (g_T, grads) = _pair_pass(tables, named, rows, weight, target, chunk, True)
        ctx.save_for_backward(g_T, *(grads[k] for k in _WEIGHTS))
        return loss

    @staticmethod
    def backward(ctx, grad_loss):
        per_model = [g * grad_loss.view(-1, *([1] * (g.dim() - 1))) for g in ctx.saved_tensors]
        return (per_model[0], None, None, None, None, *per_model[1:])


def _fast_inputs(params, counts, labels, variants, chunk):
    counts = _check(params, tuple(variants), counts)
    labels = labels.unsqueeze(0) if labels.dim() == 1 else labels
    if labels.shape != counts.shape[:2]:
        raise ValueError(f"labels must have shape {tuple(counts.shape[:2])}, "
                         f"got {tuple(labels.shape)}")
    S, v = class_tables(params, variants)                        # (M, C, C), (M, C, d)
    A = torch.exp(S - S.amax(dim=-1, keepdim=True))              # (M, C_i, C_j)
    v1 = torch.cat([v, torch.ones_like(v[..., :1])], dim=-1)     # (M, C_j, d+1)
    tables = (A.unsqueeze(2) * v1.transpose(1, 2).unsqueeze(1)).contiguous()  # (M, i, d+1, j)
    return (tables, *_class_major(counts, labels, chunk, tables.dtype))


def multiset_loss(params: dict[str, Tensor], counts: Tensor, labels: Tensor,
                  variants: tuple[str, ...], chunk: int | None = None) -> Tensor:
    """Per-token cross-entropy of each of M models, (M,), differentiable.

    The same value as :func:`multiset_loss_and_accuracy` of :func:`multiset_forward`
    (the tests hold them equal), computed by the fast path. counts: (G, B, C) or (B, C);
    labels: (G, B) or (B,); chunk: pairs per class per chunk (default:
    :func:`default_chunk`).
    """
    tables, rows, weight, target, chunk = _fast_inputs(params, counts, labels, variants, chunk)
    return _MultisetLoss.apply(tables, rows, weight, target, chunk,
                               *(params[k] for k in _WEIGHTS))


@torch.no_grad()
def multiset_evaluate(params: dict[str, Tensor], counts: Tensor, labels: Tensor,
                      variants: tuple[str, ...],
                      chunk: int | None = None) -> tuple[Tensor, Tensor]:
    """Per-token (loss, accuracy) of each of M models, (M,) each, by the fast path."""
    tables, rows, weight, target, chunk = _fast_inputs(params, counts, labels, variants, chunk)
    loss, correct, _ = _pair_pass(tables, {k: params[k] for k in _WEIGHTS}, rows, weight,
                                  target, chunk, backward=False)
    return loss, correct
