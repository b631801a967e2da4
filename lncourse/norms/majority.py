"""Today's norms on chapter 3's majority task: the arms, readable and fused (chapter 5).

Chapter 3's one-layer model (d = 8, one head, no positions) learns majority fastest when
its query can align with 1, so that attention averages. Here the first norm ``norm1``
(and, for two arms, the attention scores) is replaced by what models use today. Every
arm keeps the rest of chapter 3's layer: the residual stream, LN2 (affine, eps 0) in
front of the ReLU FFN of width d, and the tied unembedding.

=================  ==========================================================================
arm                what attention reads (h = norm1(e), e the token's embedding)
=================  ==========================================================================
``layernorm``      chapter 3's reference: h = √d (e - mean) / ‖e - mean‖, no affine, eps 0
``no_projection``  chapter 3's paper variant: h = √d e / ‖e‖
``rmsnorm``        h = √d e / ‖e‖ ⊙ g, g a learned per-channel gain (init 1), eps 0: the
                   paper's no_projection plus the gain RMSNorm has
``qk_norm``        h as in ``layernorm``; then q = RMS(W_Q h) ⊙ g_q, k = RMS(W_K h) ⊙ g_k,
                   RMS(x) = x / sqrt(mean(x²) + 1e-6), gains learned (init 1)
``dyt``            h = γ ⊙ tanh(α e) + β; α a learned scalar (init 0.5), γ init 1, β init 0
                   (Zhu et al. 2025, arXiv 2503.10622)
``ngpt``           nGPT-style (Loshchilov et al. 2024, arXiv 2410.01131), see below
=================  ==========================================================================

Scores are q · k / √d in every arm but ``ngpt``, values v = W_V h.

**The nGPT-style arm, and what it leaves out.** Kept from nGPT: the embeddings are on the
unit sphere (e = E_c / ‖E_c‖, for the residual stream's input and for the tied
unembedding alike); attention reads them with no norm in front (h = e); queries and keys
are put on the unit sphere and scaled per channel by s_qk, q = s_qk ⊙ W_Q h / ‖W_Q h‖
(likewise k), with s_qk a learned vector of effective value 1 at init, stored as
s_qk_scale = 1/√d and multiplied by √d (nGPT's s_init / s_scale parametrisation, which
sets Adam's step on it); the scores use nGPT's softmax scale √d_k instead of 1/√d_k
(both as in the released code, NVIDIA/ngpt ``model.py``, one s_qk for q and k).
Simplifications, for a one-layer model that trains in chapter 3's fused path:
(1) weights are normalised in the forward pass (a reparametrisation) instead of being
projected back onto the sphere after each optimiser step; (2) the residual stream is
chapter 3's: x = e + W_O z + b_O, then LN2 + FFN + residual, with no hypersphere update
h ← Norm(h + α (Norm(F(h)) − h)), no eigen learning rates α_A, α_M, and LN2 kept in
front of the FFN, where nGPT has no norm; (3) the FFN has no s_u, s_v scalings and the
logits no s_z scaling (the unembedding reads the unit embeddings, the output's length is
free); (4) W_Q, W_K, W_V, W_O are not normalised (nGPT normalises their rows); (5) no
weight decay and no warm-up, which is nGPT's setting and chapter 3's. The arm is thus
nGPT's *attention* on nGPT's *embeddings*: the part that decides the uniform-query route.

Parameters: chapter 3's (:data:`lncourse.majority.task.PARAM_NAMES` but its constant
``n1_gain``) plus :func:`extra_params`, every model holding all of them so that models of
different arms stack; an arm that does not read a parameter leaves it at its initial value
(its gradient is 0, and so is Adam's step). Shapes: M models, C classes, d ``d_model``.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import Tensor

from lncourse.majority import task as majority
from lncourse.majority.multiset_fused import loss_from_tables

__all__ = ["ARMS", "REFERENCE_ARMS", "ALL_ARMS", "extra_params", "PARAM_NAMES", "initial_params",
           "attention_inputs", "unembedding", "class_tables", "fused_loss", "token_loss",
           "effective_queries", "query_angles", "uniformity"]

ARMS = ("rmsnorm", "qk_norm", "dyt", "ngpt")
REFERENCE_ARMS = ("layernorm", "no_projection")
ALL_ARMS = REFERENCE_ARMS + ARMS
# arms whose scores are bilinear in h (S = h_i W_Q^T W_K h_j / √d): a query in h's space
BILINEAR = ("layernorm", "no_projection", "rmsnorm", "dyt")
QK_EPS = 1e-6


def extra_params(d: int) -> dict[str, Tensor]:
    """The arms' own parameters at initialisation, for one model of width d."""
    return {"n1_w": torch.ones(d), "n1_b": torch.zeros(d), "n1_alpha": torch.tensor(0.5),
            "q_gain": torch.ones(d), "k_gain": torch.ones(d),
            "s_qk": torch.full((d,), 1 / math.sqrt(d))}


PARAM_NAMES = tuple(n for n in majority.PARAM_NAMES if n != "n1_gain") + tuple(extra_params(2))


def check_arm(arm: str) -> None:
    if arm not in ALL_ARMS:
        raise ValueError(f"unknown arm {arm!r}; choose from {ALL_ARMS}")


def initial_params(seed: int, d_model: int = 8, n_classes: int = 20) -> dict[str, Tensor]:
    """One model's starting weights: chapter 3's ``layernorm`` model of this seed
    (PyTorch's default init; the global random state is untouched) plus :func:`extra_params`.
    Every arm of a seed starts from them, so comparisons between arms are paired."""
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        model = majority.MajorityModel("layernorm", d_model, n_classes)
    p = {k: v.detach().clone() for k, v in majority.get_params(model).items()}
    del p["n1_gain"]
    return p | extra_params(d_model)


def _rms(x: Tensor) -> Tensor:
    return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + QK_EPS)


def attention_inputs(arm: str, p: dict[str, Tensor], x: Tensor):
    """What one arm's attention computes from embeddings, for M models at once.

    p: parameters with a leading model axis M; x: (M, N, d) embedding rows (of classes or
    of tokens). Returns (q, k, v, e), each (M, N, d): scores are q · k (the scale is
    folded into q), v the values, e what the residual stream starts from.
    """
    check_arm(arm)
    d = x.shape[-1]
    M = x.shape[0]

    def vec(name: str) -> Tensor:       # a per-model vector, broadcast over the rows
        return p[name].view(M, 1, d)

    e = x
    if arm in ("layernorm", "qk_norm"):
        h = F.layer_norm(x, (d,), eps=0.0)
    elif arm == "no_projection":
        h = math.sqrt(d) * x / x.norm(dim=-1, keepdim=True)
    elif arm == "rmsnorm":
        h = math.sqrt(d) * x / x.norm(dim=-1, keepdim=True) * vec("n1_w")
    elif arm == "dyt":
        h = vec("n1_w") * torch.tanh(p["n1_alpha"].view(M, 1, 1) * x) + vec("n1_b")
    else:  # ngpt: the embedding on the unit sphere is both the stream and attention's input
        e = h = F.normalize(x, dim=-1, eps=0.0)
    W_Q, W_K, W_V = p["W_in"].chunk(3, dim=-2)                  # (M, d, d) each
    q, k, v = h @ W_Q.transpose(-1, -2), h @ W_K.transpose(-1, -2), h @ W_V.transpose(-1, -2)
    if arm == "qk_norm":
        q, k = _rms(q) * vec("q_gain"), _rms(k) * vec("k_gain")
    if arm == "ngpt":
        s_qk = vec("s_qk") * math.sqrt(d)                       # effective value 1 at init
        q = F.normalize(q, dim=-1, eps=0.0) * s_qk * math.sqrt(d)   # softmax scale √d_k
        k = F.normalize(k, dim=-1, eps=0.0) * s_qk
    else:
        q = q / math.sqrt(d)
    return q, k, v, e


def unembedding(arm: str, W_E: Tensor) -> Tensor:
    """The table the tied unembedding reads: unit rows for ``ngpt``, else W_E itself."""
    return F.normalize(W_E, dim=-1, eps=0.0) if arm == "ngpt" else W_E


def _runs(arms: tuple[str, ...]):
    """Contiguous runs (arm, start, stop) of one arm."""
    start = 0
    while start < len(arms):
        stop = start
        while stop < len(arms) and arms[stop] == arms[start]:
            stop += 1
        yield arms[start], start, stop
        start = stop


def class_tables(params: dict[str, Tensor], arms: tuple[str, ...]):
    """Per class, for M stacked models: scores S (M, C_i, C_j), values v (M, C, d) and the
    embedding the residual stream and the unembedding read (M, C, d)."""
    if len(arms) != params["W_E"].shape[0]:
        raise ValueError(f"got {len(arms)} arms for {params['W_E'].shape[0]} models")
    S, V, E = [], [], []
    for arm, a, b in _runs(tuple(arms)):
        p = {k: t[a:b] for k, t in params.items()}
        q, k, v, e = attention_inputs(arm, p, p["W_E"])
        S.append(q @ k.transpose(-1, -2))
        V.append(v)
        E.append(e)
    return torch.cat(S), torch.cat(V), torch.cat(E)


def fused_loss(params: dict[str, Tensor], counts: Tensor, labels: Tensor,
               arms: tuple[str, ...], chunk: int | None = None, backward: bool = True):
    """(loss (M,), accuracy (M,) or None) of M models of any arms by chapter 3's fused
    path. counts: (G, B, C) with M a multiple of G (model m reads batch m % G); labels (G, B)."""
    S, v, e = class_tables(params, arms)
    weights = {k: params[k] for k in ("W_O", "b_O", "ln2_w", "ln2_b", "W_1", "b_1", "W_2",
                                      "b_2")} | {"W_E": e}
    return loss_from_tables(S, v, weights, counts, labels, chunk, backward)


def token_loss(p: dict[str, Tensor], tokens: Tensor, labels: Tensor, arm: str) -> Tensor:
    """The readable model: one model's mean cross-entropy over every token, computed token
    by token. p: one model's parameters (no model axis); tokens (B, T); labels (B,)."""
    B, T = tokens.shape
    p1 = {k: t.unsqueeze(0) for k, t in p.items()}                    # a model axis of 1
    d = p["W_E"].shape[-1]
    x = p["W_E"][tokens].reshape(1, B * T, d)                          # each token's embedding
    q, k, v, e = (t.reshape(B, T, d) for t in attention_inputs(arm, p1, x))
    attn = torch.softmax(q @ k.transpose(1, 2), dim=-1)               # (B, T, T), no mask
    x = e + (attn @ v) @ p["W_O"].T + p["b_O"]
    ln2 = F.layer_norm(x, (d,), p["ln2_w"], p["ln2_b"], eps=0.0)
    x = x + torch.relu(ln2 @ p["W_1"].T + p["b_1"]) @ p["W_2"].T + p["b_2"]
    logits = x @ unembedding(arm, p["W_E"]).T                         # (B, T, C)
    target = labels.view(B, 1).expand(B, T)
    return F.cross_entropy(logits.reshape(B * T, -1), target.reshape(-1))


# --------------------------------------------------------------------- geometry
def effective_queries(p: dict[str, Tensor], arm: str) -> Tensor:
    """Each class's query in the space of the keys' h, (C, d), for one model of a bilinear
    arm: S_ij = query_i · h_j (chapter 3's effective query; for ``layernorm`` it equals
    :func:`lncourse.majority.task.effective_queries`). Other arms raise ValueError: their
    scores are not linear in h_j (the keys are normalised after W_K)."""
    if arm not in BILINEAR:
        raise ValueError(f"{arm!r} has no query in h's space; use uniformity()")
    q, _, _, _ = attention_inputs(arm, {k: t.unsqueeze(0) for k, t in p.items()},
                                  p["W_E"].unsqueeze(0))
    return q[0] @ p["W_in"].chunk(3)[1]


def query_angles(p: dict[str, Tensor], arm: str) -> Tensor:
    """Angle in degrees of each class's query to 1 (NaN for an arm without one), (C,)."""
    if arm not in BILINEAR:
        return torch.full((p["W_E"].shape[0],), float("nan"))
    return majority.query_angles(effective_queries(p, arm))


@torch.no_grad()
def uniformity(p: dict[str, Tensor], arm: str, counts: Tensor) -> tuple[float, float]:
    """How far one model's attention is from uniform on sequences given by class counts
    (B, C): chapter 3's measure (:func:`lncourse.majority.task.scores_uniformity`), the
    total-variation distance to uniform per token and the std of the scores. float64."""
    S, _, _ = class_tables({k: t.unsqueeze(0).double() for k, t in p.items()}, (arm,))
    return majority.scores_uniformity(S[0], counts)
