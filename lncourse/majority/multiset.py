"""The majority model on class counts: many models, exactly, at a fraction of the cost.

Without positions and without a mask, every position holding class i computes the same
thing, so a sequence acts as a multiset: the layer runs once per class present, and
attention weights key class j by its count c_bj,

    attn_b(i -> j) = exp(S_ij) c_bj / sum_l exp(S_il) c_bl,     S = q k^T / sqrt(d).

This module holds the readable implementation, :func:`multiset_forward`: it lists the
(sequence, class) pairs that occur, gathers a row of scores for each and lets autograd do
the rest. The chapter shows it, and the tests hold it equal to the token-level model. The
trainer runs the same computation fused and differentiated by hand
(:mod:`lncourse.majority.multiset_fused`); both start from the per-model class tables here
(:func:`class_tables`).

Dimension names: M models, G batches (one per seed; model m reads batch m % G), B
sequences, C classes (i the query's class, j the key's), d ``d_model``, P pairs.
"""

from __future__ import annotations

import math
from typing import NamedTuple

import torch
import torch.nn.functional as F
from torch import Tensor

from lncourse.majority.task import ALL_VARIANTS, norm1

__all__ = ["norm1_stacked", "class_tables", "check_inputs", "Pairs", "present_pairs",
           "multiset_forward", "multiset_loss_and_accuracy"]


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


def check_inputs(params: dict[str, Tensor], variants: tuple[str, ...], counts: Tensor) -> Tensor:
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
    counts = check_inputs(params, variants, counts)
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
