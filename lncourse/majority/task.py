"""The "majority" task of Brody et al. (2023), section 4.1: data and model (chapter 3).

A sequence of ``T`` tokens from ``C`` classes; the target at every position is the most
frequent class. A one-layer pre-LN transformer solves it by attending *uniformly*: the
attention output is then the average of the values, i.e. a function of the class counts.

This module holds the data generator, the model as the released code builds it (one
``nn.TransformerEncoderLayer``) with its variants of the first norm, the geometry of its
queries, and a model built by hand. Training on class counts lives in
:mod:`lncourse.majority.multiset`; the trainer and its command line in :mod:`lncourse.majority.train`.

Dimension names: N sequences, T positions, C classes, d ``d_model``, M models trained
together, B sequences in a batch.
"""

from __future__ import annotations

import math

import numpy as np
import torch
import torch.nn.functional as F
from torch import Tensor, nn

__all__ = [
    "VARIANTS", "CONTROL_VARIANTS", "READING_VARIANTS", "INTERVENTION_VARIANTS",
    "ALL_VARIANTS", "PARAM_NAMES", "NORM_OF", "make_dataset", "stratified_split",
    "class_counts", "norm1", "MajorityModel", "get_params", "set_params", "stack_params",
    "effective_queries", "query_angles", "attention_uniformity", "scores_uniformity",
    "hand_built_model"]

# The norm in front of attention, in the paper's four versions. "no_projection" is the
# paper's definition, sqrt(d) x / ||x||; "no_projection_released" is what the released
# code computes, x / (||x|| sqrt(d)): the same direction, a norm d times smaller.
VARIANTS = ("layernorm", "no_projection", "no_projection_released", "none")
# A control that is not in the paper: LayerNorm shrunk to the released variant's norm
# 1/sqrt(d). With the two no-projection variants it makes a 2 x 2 design, projection x
# scale, that separates the effect of the projection from the effect of the scale.
CONTROL_VARIANTS = ("layernorm_released_scale",)
# The other literal reading of the paper's "numerator of simply x": x / sigma(x - mean),
# the LayerNorm denominator kept, the centring of the numerator dropped.
READING_VARIANTS = ("no_projection_sigma",)
# Two interventions on the released variant that test why it learns slowly. Both keep its
# norm1; "value_scaled" multiplies W_V by d at initialisation (values as long as with the
# paper's scale, scores still d^2 times smaller); "gain" multiplies norm1's output by a
# learned scalar, initialised to 1.
INTERVENTION_VARIANTS = ("no_projection_released_value_scaled", "no_projection_released_gain")
ALL_VARIANTS = VARIANTS + CONTROL_VARIANTS + READING_VARIANTS + INTERVENTION_VARIANTS

# The normalisation each variant applies (the interventions reuse the released one).
NORM_OF = {v: v for v in VARIANTS + CONTROL_VARIANTS + READING_VARIANTS} | {
    v: "no_projection_released" for v in INTERVENTION_VARIANTS}

# The parameters of one model in a fixed order (embedding, attention, FFN, second LN,
# the gain after norm1; the gain is a constant 1 in every variant but "..._gain").
PARAM_NAMES = ("W_E", "W_in", "W_O", "b_O", "W_1", "b_1", "W_2", "b_2", "ln2_w", "ln2_b",
               "n1_gain")


def _check_variant(variant: str) -> None:
    if variant not in ALL_VARIANTS:
        raise ValueError(f"unknown variant {variant!r}; choose from {ALL_VARIANTS}")


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
    if seq_len < min_margin + 2:
        # The best split is a majority of seq_len - 1 against one token: a margin of
        # seq_len - 2. Refuse now rather than after enumerating every partition.
        raise ValueError(f"no sequence of length {seq_len} has a majority margin of "
                         f"{min_margin} (at most {seq_len - 2}); lower min_margin")
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
    layernorm_released_scale: layernorm / d, the released variant's norm with projection;
    no_projection_sigma: x / sigma(x - mean) = sqrt(d) x / ||x - mean||.
    The interventions apply the released norm (their gain is a parameter of the model).
    """
    _check_variant(variant)
    d = x.shape[-1]
    norm = NORM_OF[variant]
    if norm == "layernorm":
        return F.layer_norm(x, (d,), eps=0.0)
    if norm == "layernorm_released_scale":
        return F.layer_norm(x, (d,), eps=0.0) / d
    if norm == "no_projection":
        return math.sqrt(d) * x / x.norm(dim=-1, keepdim=True)
    if norm == "no_projection_released":
        return F.normalize(x, dim=-1) / math.sqrt(d)
    if norm == "no_projection_sigma":
        return math.sqrt(d) * x / (x - x.mean(dim=-1, keepdim=True)).norm(dim=-1, keepdim=True)
    return x  # "none"


class Norm1(nn.Module):
    """:func:`norm1` as a module, times ``gain``: a learned scalar in the ``..._gain``
    intervention, a constant 1 (a buffer, never trained) in every other variant."""

    def __init__(self, variant: str):
        super().__init__()
        _check_variant(variant)
        self.variant = variant
        one = torch.ones(())
        if variant == "no_projection_released_gain":
            self.gain = nn.Parameter(one)
        else:
            self.register_buffer("gain", one)

    def forward(self, x: Tensor) -> Tensor:
        return norm1(x, self.variant) * self.gain

    def extra_repr(self) -> str:
        return self.variant


class MajorityModel(nn.Module):
    """The released model: an embedding, one pre-LN ``nn.TransformerEncoderLayer``, tied
    unembedding. 1 head, FFN width d with ReLU, no dropout, no positions, no mask, no
    attention input bias, the first norm without affine (see :func:`norm1`), the second an
    ordinary LayerNorm with eps 0. With d=8, C=20 it has 584 parameters (585 with the
    learned gain of the ``..._gain`` intervention).

    forward: tokens (B, T) -> logits (B, T, C).
    """

    def __init__(self, variant: str = "layernorm", d_model: int = 8, n_classes: int = 20):
        super().__init__()
        _check_variant(variant)
        if d_model < 2 or n_classes < 2:
            raise ValueError("d_model and n_classes must both be at least 2")
        self.variant, self.d_model, self.n_classes = variant, d_model, n_classes
        self.embedding = nn.Embedding(n_classes, d_model)
        self.layer = nn.TransformerEncoderLayer(
            d_model=d_model, nhead=1, dim_feedforward=d_model, dropout=0.0,
            layer_norm_eps=0.0, batch_first=True, norm_first=True)
        self.layer.norm1 = Norm1(variant)
        self.layer.self_attn.register_parameter("in_proj_bias", None)
        if variant == "no_projection_released_value_scaled":
            with torch.no_grad():  # rows 2d..3d of the stacked in-projection are W_V
                self.layer.self_attn.in_proj_weight[2 * d_model:].mul_(d_model)

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
        "n1_gain": layer.norm1.gain,                   # ()
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


# ---------------------------------------------------------------------- the queries
def effective_queries(W_E: Tensor, W_in: Tensor, variant: str,
                      gain: Tensor | float = 1.0) -> Tensor:
    """The paper's "query" of every class: g norm1(e) W_Q^T W_K / sqrt(d).

    W_E: (..., C, d), W_in: (..., 3d, d), gain: the gain g after norm1 (1 but in the
    ``..._gain`` variant). Returns (..., C, d), a vector in the space of the keys
    g norm1(e), so that score = query . key.
    """
    d = W_E.shape[-1]
    W_Q, W_K, _ = W_in.chunk(3, dim=-2)
    return gain * norm1(W_E, variant) @ W_Q.transpose(-1, -2) @ W_K / math.sqrt(d)


def query_angles(queries: Tensor) -> Tensor:
    """Angle in degrees between each query and the all-ones vector, folded into [0, 90].

    queries: (..., d) -> (...). 0 means parallel (or antiparallel) to 1; 90 orthogonal.
    """
    # atan2 of the parts across and along 1 (acos of the cosine is inaccurate near 0).
    d = queries.shape[-1]
    along = queries.sum(dim=-1) / math.sqrt(d)                   # q . 1 / ||1||
    across = (queries - queries.mean(dim=-1, keepdim=True)).norm(dim=-1)
    return torch.rad2deg(torch.atan2(across, along.abs()))


def attention_uniformity(W_E: Tensor, W_in: Tensor, variant: str, counts: Tensor,
                         gain: Tensor | float = 1.0) -> tuple[float, float]:
    """How far one model's attention is from uniform over the positions, on sequences
    given by their class counts: the total-variation distance 1/2 sum_j |a_ij - c_bj/T|
    averaged over tokens, and the standard deviation of the scores S_ij. W_E: (C, d),
    W_in: (3d, d), counts: (B, C). Computed in float64."""
    h = gain * norm1(W_E.double(), variant)                           # (C, d)
    W_Q, W_K, _ = W_in.double().chunk(3)
    S = (h @ W_Q.T) @ (h @ W_K.T).T / math.sqrt(W_E.shape[-1])       # (C_i, C_j)
    return scores_uniformity(S, counts)


def scores_uniformity(S: Tensor, counts: Tensor) -> tuple[float, float]:
    """:func:`attention_uniformity` from one model's class scores S (C_i, C_j), however
    computed (chapter 5's norms); counts (B, C). float64."""
    # softmax_j(S_ij + log c_bj) = c_bj E_ij / Z_bi, E = exp(S - max), Z = c E^T, and
    # tv_bi = 1/2 sum_j c_bj |E_ij/Z_bi - 1/T_b|; the (b, C, C) gaps 512 sequences at a
    # time, in place, stay in the cache (6.5x faster at B = 20,004, C = 20).
    S, c = S.double(), counts.double()                                # c: (B, C)
    E = torch.exp(S - S.max(-1, keepdim=True).values)                 # (C_i, C_j)
    Z, inv_T, tv = c @ E.T, 1 / c.sum(1), S.new_zeros(())             # (B, C_i), (B,)
    for s in range(0, c.shape[0], 512):
        gap = (E / Z[s:s + 512].unsqueeze(-1)).sub_(inv_T[s:s + 512, None, None]).abs_()
        tv += 0.5 * torch.einsum("bij,bj,bi->", gap, c[s:s + 512], c[s:s + 512])
    return float(tv / c.sum()), float(S.std())


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
        "ln2_w": torch.ones(d), "ln2_b": torch.zeros(d), "n1_gain": torch.ones(()),
    }
    return set_params(model, params)
