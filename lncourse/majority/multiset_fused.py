"""The fast path of the multiset model: the loss of many models, fused and
differentiated by hand (chapter 3).

It computes what :func:`lncourse.majority.multiset.multiset_forward` and
:func:`~lncourse.majority.multiset.multiset_loss_and_accuracy` compute (the tests hold them equal),
without their (pairs x classes) tensors. Numerator and denominator of the attention

    attn_b(i -> j) = exp(S_ij) c_bj / sum_l exp(S_il) c_bl

are matrix products of each sequence's counts with per-model class tables
(:func:`lncourse.majority.multiset.class_tables`). The pairs are laid out class by class and
processed in chunks that stay in the CPU's cache, forward and backward in one pass with
no autograd graph over pairs. :func:`multiset_loss` is what the trainer differentiates;
:func:`multiset_evaluate` runs the same loop without the backward part.

Dimension names: M models, G batches (one per seed; model m reads batch m % G), B
sequences, C classes (i the query's class, j the key's), d ``d_model``, N pairs per class
(padded), n pairs per class in one chunk.
"""

from __future__ import annotations

import torch
from torch import Tensor

from lncourse.majority.multiset import check_inputs, class_tables

__all__ = ["multiset_loss", "multiset_evaluate", "default_chunk", "attention_tables",
           "loss_from_tables"]

_aten = torch.ops.aten
# The per-model tensors of the fast path, in the order its Function takes them.
_WEIGHTS = ("W_E", "W_O", "b_O", "ln2_w", "ln2_b", "W_1", "b_1", "W_2", "b_2")


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
    counts = check_inputs(params, tuple(variants), counts)
    labels = labels.unsqueeze(0) if labels.dim() == 1 else labels
    if labels.shape != counts.shape[:2]:
        raise ValueError(f"labels must have shape {tuple(counts.shape[:2])}, "
                         f"got {tuple(labels.shape)}")
    return (attention_tables(*class_tables(params, variants)),
            *_class_major(counts, labels, chunk, params["W_E"].dtype))


def attention_tables(S: Tensor, v: Tensor) -> Tensor:
    """The tables of :func:`_pair_pass` from scores S (M, C_i, C_j) and values v (M, C, d):
    (M, C_i, d+1, C_j), exp(S_ij - max_l S_il) times (v_j, 1)."""
    A = torch.exp(S - S.amax(dim=-1, keepdim=True))              # (M, C_i, C_j)
    v1 = torch.cat([v, torch.ones_like(v[..., :1])], dim=-1)     # (M, C_j, d+1)
    return (A.unsqueeze(2) * v1.transpose(1, 2).unsqueeze(1)).contiguous()  # (M, i, d+1, j)


def loss_from_tables(S: Tensor, v: Tensor, weights: dict[str, Tensor], counts: Tensor,
                     labels: Tensor, chunk: int | None = None,
                     backward: bool = True) -> tuple[Tensor, Tensor | None]:
    """The fast path for any attention whose scores S and values v are given per class
    (chapter 5's norms): ``weights`` holds the tensors named in ``_WEIGHTS`` (``W_E`` is
    the embedding the residual stream and the tied unembedding read). counts: (G, B, C);
    labels: (G, B). Returns (loss (M,), differentiable when ``backward``; accuracy (M,)
    when not ``backward``, else None)."""
    rows, weight, target, chunk = _class_major(counts, labels, chunk, S.dtype)
    tables = attention_tables(S, v)
    if backward:
        return _MultisetLoss.apply(tables, rows, weight, target, chunk,
                                   *(weights[k] for k in _WEIGHTS)), None
    with torch.no_grad():
        loss, correct, _ = _pair_pass(tables, {k: weights[k].detach() for k in _WEIGHTS},
                                      rows, weight, target, chunk, backward=False)
    return loss, correct


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
