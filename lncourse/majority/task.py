"""The "majority" task of Brody et al. (2023), section 4.1: data and model (chapter 3).

A sequence of ``T`` tokens from ``C`` classes; the target at every position is the most
frequent class. A one-layer pre-LN transformer solves it by attending *uniformly*: the
attention output is then the average of the values, i.e. a function of the class counts.

This module holds the model as the released code builds it (one
``nn.TransformerEncoderLayer``) with its variants of the first norm, the geometry of its
queries, and a model built by hand. The data (the generator, class counts, the split)
live in :mod:`lncourse.majority.data`, imported here; training on class counts lives in
:mod:`lncourse.majority.multiset`; the trainer and its command line in :mod:`lncourse.majority.train`.

Dimension names: N sequences, T positions, C classes, d ``d_model``, M models trained
together, B sequences in a batch.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import Tensor, nn

# the data generator lives in its own module; its names stay importable from here
from lncourse.majority.data import class_counts, make_dataset, stratified_split

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
