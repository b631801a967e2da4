"""The "majority" task of Brody et al. (2023), section 4.1 (chapter 3).

A sequence of ``T`` tokens from ``C`` classes; the target at every position is the most
frequent class. A one-layer pre-LN transformer solves it by attending *uniformly*: the
attention output is then the average of the values, i.e. a function of the class counts.

This module holds the data generator, the model as the released code builds it (one
``nn.TransformerEncoderLayer``) and a functional, batched re-implementation that works
on class counts instead of tokens (:func:`multiset_forward`). The trainer lives in
:mod:`lncourse.majority_train` and is re-exported here.

Dimension names: N sequences, T positions, C classes, d ``d_model``, M models trained
together (seeds x variants), B sequences in a batch.
"""

from __future__ import annotations

import math
from typing import NamedTuple

import numpy as np
import torch
import torch.nn.functional as F
from torch import Tensor, nn

__all__ = [
    "VARIANTS", "CONTROL_VARIANTS", "ALL_VARIANTS", "PARAM_NAMES",
    "make_dataset", "stratified_split", "class_counts",
    "norm1", "MajorityModel", "get_params", "set_params", "stack_params",
    "Pairs", "present_pairs", "multiset_forward", "multiset_loss",
    "multiset_loss_and_accuracy", "effective_queries", "query_angles", "hand_built_model",
    "MajorityConfig", "train", "train_single", "initial_model", "history_arrays",
    "steps_to_threshold",
]

# The LayerNorm in front of attention, in four versions. "no_projection" is the paper's
# definition, sqrt(d) x / ||x||; "no_projection_released" is what the released code
# computes, x / (||x|| sqrt(d)): the same direction, a norm d times smaller.
VARIANTS = ("layernorm", "no_projection", "no_projection_released", "none")
# A control that is not in the paper: LayerNorm shrunk to the released variant's norm
# 1/sqrt(d). It separates the effect of the projection from the effect of the scale.
CONTROL_VARIANTS = ("layernorm_released_scale",)
ALL_VARIANTS = VARIANTS + CONTROL_VARIANTS

# The parameters of one model in a fixed order (embedding, attention, FFN, second LN).
PARAM_NAMES = ("W_E", "W_in", "W_O", "b_O", "W_1", "b_1", "W_2", "b_2", "ln2_w", "ln2_b")


# ----------------------------------------------------------------------------- data
def _partitions(n: int, min_part: int, slices: int, rng: np.random.Generator):
    """Partitions of ``n`` in the released code's order: parts non-decreasing, at most
    ``slices`` of them, the candidates for each part visited in a shuffled order.

    Like the release, the last slot takes whatever remains even when it is smaller than
    the part before it; such partitions fail the margin test and are dropped later.
    """
    if n == 0:
        yield []
        return
    if slices == 1:
        yield [n]
        return
    candidates = np.arange(min_part, n + 1)
    rng.shuffle(candidates)
    for first in candidates:
        first = int(first)
        for rest in _partitions(n - first, first, slices - 1, rng):
            yield [first] + rest


def make_dataset(n_samples: int = 100_000, seq_len: int = 50, n_classes: int = 20,
                 min_margin: int = 6, per_partition: int = 10,
                 seed: int = 0) -> tuple[Tensor, Tensor]:
    """Majority sequences generated as the released code does, but seeded.

    Partitions of ``seq_len`` into at most ``n_classes`` parts are enumerated depth first
    in a shuffled order; a partition is kept when its largest part beats the second
    largest by at least ``min_margin``. Each kept partition gives ``per_partition``
    sequences, each assigning distinct random classes to the parts (tokens sit in sorted
    blocks: without positions the order does not matter). Generation stops once more
    than ``n_samples`` sequences exist (the release's rule, hence 100,010 by default).

    Returns ``tokens`` (N, seq_len) and ``labels`` (N,), both int64.
    """
    for name, value, low in (("n_samples", n_samples, 1), ("seq_len", seq_len, 2),
                             ("n_classes", n_classes, 2), ("min_margin", min_margin, 1),
                             ("per_partition", per_partition, 1)):
        if not isinstance(value, (int, np.integer)) or value < low:
            raise ValueError(f"{name} must be an integer >= {low}, got {value!r}")
    rng = np.random.default_rng(seed)
    blocks = []
    for part in _partitions(seq_len, 1, min(seq_len, n_classes), rng):
        if len(part) == 1 or part[-1] - part[-2] < min_margin:
            continue  # a single class, or no clear majority
        seqs = np.zeros((per_partition, seq_len), dtype=np.int64)
        for i in range(per_partition):
            perm = rng.permutation(n_classes)
            seqs[i] = np.repeat(perm[: len(part)], part)
        blocks.append(seqs)
        if len(blocks) * per_partition > n_samples:
            break
    if not blocks:
        raise ValueError(f"no partition of {seq_len} into at most {n_classes} parts has a "
                         f"margin of {min_margin}; lower min_margin")
    tokens = torch.from_numpy(np.concatenate(blocks))
    labels = class_counts(tokens, n_classes).argmax(dim=1)
    return tokens, labels


def class_counts(tokens: Tensor, n_classes: int) -> Tensor:
    """How often each class occurs in each sequence: (N, T) int -> (N, C) int64."""
    if tokens.dim() != 2 or tokens.dtype not in (torch.int64, torch.int32):
        raise TypeError(f"tokens must be an integer tensor of shape (N, T), got "
                        f"{tokens.dtype} {tuple(tokens.shape)}")
    if tokens.numel() and (tokens.min() < 0 or tokens.max() >= n_classes):
        raise ValueError(f"tokens must lie in [0, {n_classes})")
    counts = torch.zeros(tokens.shape[0], n_classes, dtype=torch.int64, device=tokens.device)
    return counts.scatter_add_(1, tokens.long(), torch.ones_like(tokens, dtype=torch.int64))


def stratified_split(labels: Tensor, test_fraction: float = 0.2,
                     seed: int = 0) -> tuple[Tensor, Tensor]:
    """Indices ``(train_idx, test_idx)`` with each label split in the same proportion.

    For every label, ``round(test_fraction * count)`` of its sequences, drawn at random,
    go to the test set (the release uses scikit-learn's stratified 80/20 split).
    """
    if not 0.0 < test_fraction < 1.0:
        raise ValueError(f"test_fraction must be in (0, 1), got {test_fraction}")
    gen = torch.Generator().manual_seed(seed)
    labels = labels.cpu()
    train, test = [], []
    for label in torch.unique(labels):
        idx = torch.nonzero(labels == label).squeeze(1)
        idx = idx[torch.randperm(len(idx), generator=gen)]
        n_test = int(round(test_fraction * len(idx)))
        test.append(idx[:n_test])
        train.append(idx[n_test:])
    return torch.cat(train).sort().values, torch.cat(test).sort().values


# ---------------------------------------------------------------------------- model
def norm1(x: Tensor, variant: str) -> Tensor:
    """The normalisation in front of attention, (..., d) -> (..., d), no affine, eps 0.

    layernorm: sqrt(d) (x - mean) / ||x - mean||; no_projection: sqrt(d) x / ||x||;
    no_projection_released: x / (||x|| sqrt(d)); none: x;
    layernorm_released_scale: layernorm / d, the released variant's norm with projection.
    """
    d = x.shape[-1]
    if variant == "layernorm":
        return F.layer_norm(x, (d,), eps=0.0)
    if variant == "layernorm_released_scale":
        return F.layer_norm(x, (d,), eps=0.0) / d
    if variant == "no_projection":
        return math.sqrt(d) * x / x.norm(dim=-1, keepdim=True)
    if variant == "no_projection_released":
        return F.normalize(x, dim=-1) / math.sqrt(d)
    if variant == "none":
        return x
    raise ValueError(f"unknown variant {variant!r}; choose from {ALL_VARIANTS}")


class Norm1(nn.Module):
    """:func:`norm1` as a module (no parameters), to replace ``norm1`` of the layer."""

    def __init__(self, variant: str):
        super().__init__()
        if variant not in ALL_VARIANTS:
            raise ValueError(f"unknown variant {variant!r}; choose from {ALL_VARIANTS}")
        self.variant = variant

    def forward(self, x: Tensor) -> Tensor:
        return norm1(x, self.variant)

    def extra_repr(self) -> str:
        return self.variant


class MajorityModel(nn.Module):
    """The released model: an embedding, one pre-LN ``nn.TransformerEncoderLayer``, tied
    unembedding. 1 head, FFN width d with ReLU, no dropout, no positions, no mask, no
    attention input bias, the first norm without affine (see :func:`norm1`), the second an
    ordinary LayerNorm with eps 0. With d=8, C=20 it has 584 parameters.

    forward: tokens (B, T) -> logits (B, T, C).
    """

    def __init__(self, variant: str = "layernorm", d_model: int = 8, n_classes: int = 20):
        super().__init__()
        if variant not in ALL_VARIANTS:
            raise ValueError(f"unknown variant {variant!r}; choose from {ALL_VARIANTS}")
        if d_model < 2 or n_classes < 2:
            raise ValueError("d_model and n_classes must both be at least 2")
        self.variant, self.d_model, self.n_classes = variant, d_model, n_classes
        self.embedding = nn.Embedding(n_classes, d_model)
        self.layer = nn.TransformerEncoderLayer(
            d_model=d_model, nhead=1, dim_feedforward=d_model, dropout=0.0,
            layer_norm_eps=0.0, batch_first=True, norm_first=True)
        self.layer.norm1 = Norm1(variant)
        self.layer.self_attn.register_parameter("in_proj_bias", None)

    def forward(self, tokens: Tensor) -> Tensor:
        x = self.embedding(tokens)               # (B, T, d)
        x = self.layer(x)                        # (B, T, d)
        return x @ self.embedding.weight.T       # (B, T, C), tied unembedding


def get_params(model: MajorityModel) -> dict[str, Tensor]:
    """The model's weights under the names of :data:`PARAM_NAMES` (shared, not copied)."""
    layer = model.layer
    return {
        "W_E": model.embedding.weight,                 # (C, d)
        "W_in": layer.self_attn.in_proj_weight,        # (3d, d): W_Q, W_K, W_V stacked
        "W_O": layer.self_attn.out_proj.weight,        # (d, d)
        "b_O": layer.self_attn.out_proj.bias,          # (d,)
        "W_1": layer.linear1.weight, "b_1": layer.linear1.bias,
        "W_2": layer.linear2.weight, "b_2": layer.linear2.bias,
        "ln2_w": layer.norm2.weight, "ln2_b": layer.norm2.bias,
    }


@torch.no_grad()
def set_params(model: MajorityModel, params: dict[str, Tensor]) -> MajorityModel:
    """Copy ``params`` (names of :data:`PARAM_NAMES`, one model) into ``model``."""
    for name, p in get_params(model).items():
        p.copy_(params[name])
    return model


def stack_params(models: list[MajorityModel]) -> dict[str, Tensor]:
    """Stack the weights of several models along a new leading model axis M."""
    return {name: torch.stack([get_params(m)[name].detach() for m in models])
            for name in PARAM_NAMES}


def _norm1_grouped(W_E: Tensor, variants: tuple[str, ...]) -> Tensor:
    """Apply each model's norm1 to its embedding table: (M, C, d) -> (M, C, d)."""
    out, start = [], 0
    while start < len(variants):  # contiguous runs of one variant share one call
        stop = start
        while stop < len(variants) and variants[stop] == variants[start]:
            stop += 1
        out.append(norm1(W_E[start:stop], variants[start]))
        start = stop
    return torch.cat(out)


class Pairs(NamedTuple):
    """The (sequence, class) pairs that occur in a batch, padded to one length P.

    seq, cls: (..., P) int64; count: (..., P), how many tokens of class ``cls`` sequence
    ``seq`` holds (0 for padding, whose pairs are real but absent classes).
    """

    seq: Tensor
    cls: Tensor
    count: Tensor


def present_pairs(counts: Tensor) -> Pairs:
    """The pairs (b, i) with c_bi > 0 of every model's batch. counts: (..., B, C).

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

    Without positions and without a mask, every position holding class i computes the
    same thing, so the layer runs once per class present and attention weights each key
    class j by its count: softmax_j(S_ij + log c_bj). params: stacked (leading axis M);
    counts: (G, B, C) with M a multiple of G, model m reading batch m % G (G = M: one
    batch per model; models of the same seed share one), or (B, C) for all models;
    variants: M names. Returns (logits (M, P, C), pairs (M, P)): logits[m, p] is what each
    of the pairs.count[m, p] tokens of class pairs.cls[m, p] in sequence pairs.seq[m, p]
    predicts.
    """
    W_E = params["W_E"]
    M, C, d = W_E.shape
    if len(variants) != M:
        raise ValueError(f"got {len(variants)} variants for {M} models")
    if counts.dim() == 2:
        counts = counts.unsqueeze(0)
    if counts.dim() != 3 or counts.shape[-1] != C or M % counts.shape[0]:
        raise ValueError(f"counts must have shape (G, B, {C}) with G dividing {M}, "
                         f"or (B, {C}); got {tuple(counts.shape)}")
    G, R = counts.shape[0], M // counts.shape[0]
    if pairs is None:
        pairs = present_pairs(counts)                            # (G, P) each
    P = pairs.cls.shape[-1]
    h = _norm1_grouped(W_E, tuple(variants))                    # (M, C, d)
    W_Q, W_K, W_V = params["W_in"].chunk(3, dim=1)               # (M, d, d) each
    q, k, v = h @ W_Q.transpose(1, 2), h @ W_K.transpose(1, 2), h @ W_V.transpose(1, 2)
    S = q @ k.transpose(1, 2) / math.sqrt(d)                     # (M, C_i, C_j), one head
    # Row of scores of each pair's class, plus log c_bj of its sequence (-inf if absent).
    cls = pairs.cls.unsqueeze(-1)                                # (G, P, 1)
    log_c = torch.log(counts.to(W_E.dtype)).gather(1, pairs.seq.unsqueeze(-1).expand(G, P, C))
    rows = S.view(R, G, C, C).gather(2, cls.expand(R, G, P, C)) + log_c  # (R, G, P, C_j)
    z = torch.softmax(rows.view(M, P, C), dim=-1) @ v            # (M, P, d)
    e = W_E.view(R, G, C, d).gather(2, cls.expand(R, G, P, d)).view(M, P, d)
    x = e + z @ params["W_O"].transpose(1, 2) + params["b_O"].unsqueeze(1)  # resid_mid
    ln2 = F.layer_norm(x, (d,), eps=0.0) * params["ln2_w"].unsqueeze(1) \
        + params["ln2_b"].unsqueeze(1)
    hidden = torch.relu(ln2 @ params["W_1"].transpose(1, 2) + params["b_1"].unsqueeze(1))
    x = x + hidden @ params["W_2"].transpose(1, 2) + params["b_2"].unsqueeze(1)
    logits = x @ W_E.transpose(1, 2)                             # (M, P, C)
    return logits, Pairs(*(_per_model(t, M) for t in pairs))


def _targets(labels: Tensor, pairs: Pairs, M: int) -> Tensor:
    """The label of each pair's sequence, (M, P). labels: (B,) or (G, B)."""
    labels = labels.unsqueeze(0) if labels.dim() == 1 else labels
    return _per_model(labels, M).gather(1, pairs.seq)


def multiset_loss(logits: Tensor, pairs: Pairs, labels: Tensor) -> Tensor:
    """Per-token cross-entropy of each model, (M,): :func:`multiset_loss_and_accuracy`
    without the accuracy (what a training step needs)."""
    M, P, C = logits.shape
    target = _targets(labels, pairs, M)                          # (M, P)
    w = pairs.count.to(logits.dtype)
    ce = F.cross_entropy(logits.reshape(-1, C), target.reshape(-1),
                         reduction="none").view(M, P)
    return (ce * w).sum(dim=1) / w.sum(dim=1)


def multiset_loss_and_accuracy(logits: Tensor, pairs: Pairs,
                               labels: Tensor) -> tuple[Tensor, Tensor]:
    """Per-token cross-entropy and accuracy of each model, from pair logits.

    logits: (M, P, C); labels: (G, B) or (B,) as the counts were. Returns (loss, accuracy),
    each (M,):
    averages over the tokens, each pair counted as often as its class occurs, which
    equals the token-level averages of the released code.
    """
    M, P, C = logits.shape
    target = _targets(labels, pairs, M)                          # (M, P)
    w = pairs.count.to(logits.dtype)
    ce = F.cross_entropy(logits.reshape(-1, C), target.reshape(-1),
                         reduction="none").view(M, P)
    n_tokens = w.sum(dim=1)                                      # (M,) = B * T
    loss = (ce * w).sum(dim=1) / n_tokens
    acc = ((logits.argmax(dim=-1) == target).to(w.dtype) * w).sum(dim=1) / n_tokens
    return loss, acc


# ---------------------------------------------------------------------- the queries
def effective_queries(W_E: Tensor, W_in: Tensor, variant: str) -> Tensor:
    """The paper's "query" of every class: norm1(e) W_Q^T W_K / sqrt(d).

    W_E: (..., C, d), W_in: (..., 3d, d). Returns (..., C, d), a vector in the space of the
    keys norm1(e), so that score = query . key.
    """
    d = W_E.shape[-1]
    W_Q, W_K, _ = W_in.chunk(3, dim=-2)
    return norm1(W_E, variant) @ W_Q.transpose(-1, -2) @ W_K / math.sqrt(d)


def query_angles(queries: Tensor) -> Tensor:
    """Angle in degrees between each query and the all-ones vector, folded into [0, 90].

    queries: (..., d) -> (...). 0 means parallel (or antiparallel) to 1; 90 orthogonal.
    """
    # atan2 of the parts across and along 1 (acos of the cosine is inaccurate near 0).
    d = queries.shape[-1]
    along = queries.sum(dim=-1) / math.sqrt(d)                   # q . 1 / ||1||
    across = (queries - queries.mean(dim=-1, keepdim=True)).norm(dim=-1)
    return torch.rad2deg(torch.atan2(across, along.abs()))


# -------------------------------------------------------- a solution built by hand
def hand_built_model(n_classes: int = 20, alpha: float = 20.0) -> MajorityModel:
    """A ``layernorm`` model with d = C + 1 that solves majority without training.

    Embeddings e_i = sqrt(d) P u_i / ||P u_i|| (u_i the i-th basis vector, P the
    projection orthogonal to 1) already lie where LayerNorm puts them. W_Q = 1 w^T and
    W_K = I make every query parallel to 1, hence orthogonal to every key: all scores are
    0 and attention averages. W_V = I, W_O = alpha I, FFN off. The logit of class k is then
    s[(k == i) - 1/d + alpha (p_k - 1/d)] with p the class frequencies: the majority wins
    once alpha * (margin / T) > 1.
    """
    d = n_classes + 1
    model = MajorityModel("layernorm", d_model=d, n_classes=n_classes)
    P = torch.eye(d) - torch.full((d, d), 1.0 / d)
    E = P[:n_classes]                                            # rows P u_i
    E = math.sqrt(d) * E / E.norm(dim=1, keepdim=True)
    w = torch.zeros(d)
    w[0] = 1.0
    params = {
        "W_E": E,
        "W_in": torch.cat([torch.outer(torch.ones(d), w), torch.eye(d), torch.eye(d)]),
        "W_O": alpha * torch.eye(d), "b_O": torch.zeros(d),
        "W_1": torch.zeros(d, d), "b_1": torch.zeros(d),
        "W_2": torch.zeros(d, d), "b_2": torch.zeros(d),
        "ln2_w": torch.ones(d), "ln2_b": torch.zeros(d),
    }
    return set_params(model, params)


# The trainer is a module of its own (it imports this one); its public names are
# re-exported here lazily, so that either module can be imported first.
_TRAINER_NAMES = ("MajorityConfig", "history_arrays", "initial_model", "steps_to_threshold",
                  "train", "train_single")


def __getattr__(name: str):
    if name in _TRAINER_NAMES:
        from . import majority_train

        return getattr(majority_train, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


if __name__ == "__main__":
    from .majority_train import main

    main()
