"""The key to chapter 5's checks (:mod:`lncourse.checks.norms`): references and known
mistakes. Teacher-only: left out of the published package."""

from __future__ import annotations

import math

import torch
from torch import Tensor

# --- DyT -----------------------------------------------------------------------------
def _dyt(x: Tensor, alpha: float, gamma: Tensor, beta: Tensor) -> Tensor:
    """gamma * tanh(alpha * x) + beta, elementwise: (..., d) -> (..., d)."""
    return gamma * torch.tanh(alpha * x) + beta

_DYT_MISTAKES = [
    ("multiply by alpha inside the tanh, tanh(alpha x), not outside it",
     lambda x, a, g, b: g * a * torch.tanh(x) + b),
    ("the gain gamma multiplies and beta shifts: gamma * tanh(alpha x) + beta",
     lambda x, a, g, b: b * torch.tanh(a * x) + g),
    ("beta is added after the gain, not inside the tanh",
     lambda x, a, g, b: g * torch.tanh(a * x + b)),
    ("gamma multiplies the tanh from outside: gamma * tanh(alpha x) + beta, not "
     "tanh(alpha gamma x) + beta (a gain inside the tanh only stretches the input)",
     lambda x, a, g, b: torch.tanh(a * g * x) + b),
    ("DyT has no division by the token's scale: it is elementwise",
     lambda x, a, g, b: g * torch.tanh(a * x / x.pow(2).mean(-1, keepdim=True).sqrt()) + b),
]


# --- the chance level of |cos(h, 1)| ----------------------------------------------------
def _chance(d: int) -> float:
    """E|cos(u, 1)| = Γ(d/2) / (√π Γ((d+1)/2)), through lgamma against overflow. The
    check allows 1e4 epsilons: the Gamma functions (or a Beta function) lose a few
    hundred at large d."""
    return math.exp(math.lgamma(d / 2) - math.lgamma((d + 1) / 2)) / math.sqrt(math.pi)

_CHANCE_MISTAKES = [
    ("√(2/(πd)) is the large-d approximation; the exercise asks for the exact value "
     "Γ(d/2) / (√π Γ((d+1)/2))", lambda d: math.sqrt(2 / (math.pi * d))),
    ("1/√d is the root-mean-square cos, sqrt(E[cos²]); the mean of |cos| is smaller",
     lambda d: 1 / math.sqrt(d)),
    ("you swapped the two Gamma functions: Γ(d/2) goes on top",
     lambda d: math.exp(math.lgamma((d + 1) / 2) - math.lgamma(d / 2)) / math.sqrt(math.pi)),
]


# --- QK-norm ---------------------------------------------------------------------------
def _rms(x: Tensor, eps: float) -> Tensor:
    return x / (x.pow(2).mean(-1, keepdim=True) + eps).sqrt()


def _qk(q: Tensor, k: Tensor, eps: float) -> Tensor:
    return _rms(q, eps) @ _rms(k, eps).transpose(-1, -2) / math.sqrt(q.shape[-1])


def _unit(x: Tensor, eps: float) -> Tensor:
    """x scaled to unit length, eps where RMSNorm has it (the sum, not the mean)."""
    return x / (x.pow(2).sum(-1, keepdim=True) + eps).sqrt()

_UNIT_COS = ("you normalised to unit length (cosine similarity): RMSNorm puts a head's "
             "vectors on the sphere of radius √dh, so the logits are dh·cos / √dh")

_UNIT_SCALED = ("you normalised q and k to unit length (dividing by the square root of "
                "the sum of squares), not to RMS 1: RMSNorm divides by the root of the "
                "mean, sqrt(mean(x²) + eps), which leaves length √dh, so your logits are "
                "dh times too small")

_QK_MISTAKES = [
    (_UNIT_COS,
     lambda q, k, e: (q / q.norm(dim=-1, keepdim=True)) @ (k / k.norm(dim=-1, keepdim=True)
                                                             ).transpose(-1, -2)),
    (_UNIT_COS, lambda q, k, e: _unit(q, e) @ _unit(k, e).transpose(-1, -2)),
    (_UNIT_SCALED, lambda q, k, e: _unit(q, e) @ _unit(k, e).transpose(-1, -2)
     / math.sqrt(q.shape[-1])),
    (_UNIT_SCALED, lambda q, k, e: (q / q.norm(dim=-1, keepdim=True))
     @ (k / k.norm(dim=-1, keepdim=True)).transpose(-1, -2) / math.sqrt(q.shape[-1])),
    ("you left out the 1/√dh of scaled dot-product attention",
     lambda q, k, e: _rms(q, e) @ _rms(k, e).transpose(-1, -2)),
    ("you centred the vectors (LayerNorm); QK-norm here is RMSNorm, with no projection",
     lambda q, k, e: _qk(q - q.mean(-1, keepdim=True), k - k.mean(-1, keepdim=True), e)),
    ("normalise each query and key over its dh channels (the last axis), not over tokens",
     lambda q, k, e: (q / (q.pow(2).mean(-2, keepdim=True) + e).sqrt())
     @ (k / (k.pow(2).mean(-2, keepdim=True) + e).sqrt()).transpose(-1, -2)
     / math.sqrt(q.shape[-1])),
]


# --- the fraction of ||h||² along 1 ----------------------------------------------------
def _along(h: Tensor) -> Tensor:
    """||proj_1 h||² / ||h||² = cos²(h, 1) = d h̄² / ||h||²: (..., d) -> (...)."""
    return h.sum(-1).pow(2) / (h.shape[-1] * h.pow(2).sum(-1))

_ALONG_MISTAKES = [
    ("divide (Σ h)² by d: the projection onto 1 is (Σ h / d)·1, of squared length (Σ h)²/d",
     lambda h: h.sum(-1).pow(2) / h.pow(2).sum(-1)),
    ("you returned the component's length over ||h||, |cos(h, 1)|; square it",
     lambda h: _along(h).sqrt()),
    ("you returned the fraction orthogonal to 1 (what LayerNorm's projection keeps)",
     lambda h: 1 - _along(h)),
    ("square the mean: the part along 1 is h̄·1, of squared length d·h̄², so the share "
     "is d·h̄² / ||h||² (you used h̄ unsquared)",
     lambda h: h.shape[-1] * h.mean(-1) / h.pow(2).sum(-1)),
    ("divide by the squared length ||h||² = Σ h², not the length ||h||",
     lambda h: h.shape[-1] * h.mean(-1).pow(2) / h.norm(dim=-1)),
    ("Σ h² / d is the squared RMS, not the part along 1: square the sum, not the entries",
     lambda h: h.pow(2).sum(-1) / (h.shape[-1] * h.pow(2).sum(-1))),
]


# --- the peak ratio of a vector (a massive activation) -------------------------------
def _peak(h: Tensor) -> Tensor:
    """max|h| / median|h| per vector, over its d entries: (..., d) -> (...)."""
    a = h.abs()
    return a.amax(-1) / a.median(-1).values


_PEAK_MISTAKES = [
    ("divide by the median |entry|, not the mean: one massive entry drags the mean up "
     "with it, so the ratio would hide the very spike it measures",
     lambda h: h.abs().amax(-1) / h.abs().mean(-1)),
    ("take absolute values first: a massive entry may be negative, and the median of the "
     "signed entries is near 0", lambda h: h.amax(-1) / h.median(-1).values),
    ("take absolute values first: a massive entry may be negative, and the median of the "
     "signed entries is near 0", lambda h: h.abs().amax(-1) / h.median(-1).values),
    ("take absolute values first: a massive entry may be negative, and the median of the "
     "signed entries is near 0", lambda h: h.amax(-1) / h.abs().median(-1).values),
    ("divide by the median |entry|, not the RMS (RMSNorm's scale): the RMS grows with "
     "the spike itself", lambda h: h.abs().amax(-1) / h.pow(2).mean(-1).sqrt()),
    ("compare each vector's entries with each other, over its last axis (its d "
     "channels), not over the first axis",
     lambda h: h.abs().amax(0) / h.abs().median(0).values),
    ("divide by the median of each vector's own |entries|, not of the whole input",
     lambda h: h.abs().amax(-1) / h.abs().median()),
]


# --- the largest logit of a QK-normed head -----------------------------------------------
def _bound(g_q: Tensor, g_k: Tensor) -> Tensor:
    """√dh · max_i |g_q,i g_k,i|: gains (..., dh) -> (...), reached by q = √dh e_i and
    k = ±√dh e_i on the channel of the largest |g_q,i g_k,i|."""
    return math.sqrt(g_q.shape[-1]) * (g_q * g_k).abs().amax(-1)

_BOUND_MISTAKES = [
    ("take the absolute value of g_q g_k: a negative product is reached with q and k of "
     "opposite signs on that channel",
     lambda q, k: math.sqrt(q.shape[-1]) * (q * k).amax(-1)),
    ("max|g_q| · max|g_k| is a bound, but only reached when both maxima share a channel; "
     "the largest logit puts q and k on the channel of the largest |g_q,i g_k,i|",
     lambda q, k: math.sqrt(q.shape[-1]) * q.abs().amax(-1) * k.abs().amax(-1)),
    ("||g_q|| ||g_k|| (Cauchy-Schwarz on the gains) is a bound that is never reached "
     "unless one channel carries all the gain; concentrate q and k on one channel",
     lambda q, k: math.sqrt(q.shape[-1]) * q.norm(dim=-1) * k.norm(dim=-1)),
    ("√dh · Σ_i |g_q,i g_k,i| is a bound, but a looser one than asked: the logit is "
     "largest with all of q's and k's length on one channel, the one of the largest "
     "|g_q,i g_k,i|, so take the max over channels, not the sum",
     lambda q, k: math.sqrt(q.shape[-1]) * (q * k).abs().sum(-1)),
    ("√dh · ||g_q ⊙ g_k|| (Cauchy-Schwarz on the product) is a bound, but a looser one "
     "than asked: put all of q's and k's length on the channel of the largest "
     "|g_q,i g_k,i| and take that max, not the norm",
     lambda q, k: math.sqrt(q.shape[-1]) * (q * k).norm(dim=-1)),
    ("after the norm q and k have length √dh (RMS 1), so q·k/√dh reaches √dh·|g_q,i g_k,i|",
     lambda q, k: (q * k).abs().amax(-1)),
    ("the logit divides q·k by √dh: dh·|g g| is q·k itself",
     lambda q, k: q.shape[-1] * (q * k).abs().amax(-1)),
]


# --- the bigram table's loss ----------------------------------------------------------
def _table(train: Tensor, v: int, smoothing: float = 1.0) -> Tensor:
    counts = torch.full((v, v), smoothing, dtype=torch.float64)
    counts.index_put_((train[:-1], train[1:]),
                      torch.ones(len(train) - 1, dtype=torch.float64), accumulate=True)
    return counts


def _bigram(train: Tensor, test: Tensor, v: int) -> float:
    counts = _table(train, v)
    p = counts / counts.sum(1, keepdim=True)
    return float(-torch.log(p[test[:-1], test[1:]]).mean())


def _unsmoothed(train, test, v):
    counts = _table(train, v, 0.0)
    p = counts / counts.sum(1, keepdim=True).clamp_min(1)
    return float(-torch.log(p[test[:-1], test[1:]]).mean())


def _transposed(train, test, v):
    counts = _table(train, v)
    p = counts / counts.sum(1, keepdim=True)
    return float(-torch.log(p[test[1:], test[:-1]]).mean())


def _columns(train, test, v):
    counts = _table(train, v)
    p = counts / counts.sum(0, keepdim=True)
    return float(-torch.log(p[test[:-1], test[1:]]).mean())


def _unigram(train, test, v):
    u = torch.bincount(train, minlength=v).double() + 1
    return float(-torch.log(u[test] / u.sum()).mean())

_BIGRAM_MISTAKES = [
    ("add one to every count (add-one smoothing): without it a pair never seen in "
     "training has probability 0, and the counts differ from the table asked for",
     _unsmoothed),
    ("the table is p(next | current): index it [current, next], rows the current id",
     _transposed),
    ("normalise each row (sum over the next id, dim=1), not each column",
     _columns),
    ("count the pairs on the training ids and read them on the test ids, not the "
     "other way round", lambda train, test, v: _bigram(test, train, v)),
    ("the loss is in nats: use the natural log, not log2",
     lambda train, test, v: _bigram(train, test, v) / math.log(2)),
    ("that is the unigram table (each id alone); the bigram table conditions on the "
     "previous id", _unigram),
]


# The known mistakes of every exercise this module checks, by the exercise's function
# name (tests/checks/test_exercises.py writes an answer for each).
MISTAKES = {
    "dyt": _DYT_MISTAKES,
    "chance_abs_cos": _CHANCE_MISTAKES,
    "qk_norm_scores": _QK_MISTAKES,
    "fraction_along_ones": _ALONG_MISTAKES,
    "peak_ratio": _PEAK_MISTAKES,
    "qk_logit_bound": _BOUND_MISTAKES,
    "bigram_loss": _BIGRAM_MISTAKES,
}

REFERENCES = {
    "dyt": _dyt,
    "chance_abs_cos": _chance,
    "qk_norm_scores": _qk,
    "fraction_along_ones": _along,
    "peak_ratio": _peak,
    "qk_logit_bound": _bound,
    "bigram_loss": _bigram,
}
