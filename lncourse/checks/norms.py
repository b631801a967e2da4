"""Checks for the exercises of chapter 5 (today's normalisations through the lenses)."""

from __future__ import annotations

import math
from collections.abc import Callable

import torch
from torch import Tensor

from lncourse.checks._core import case, drawn_ints, generator, run_check

__all__ = ["check_dyt", "check_chance_abs_cos", "check_qk_norm_scores",
           "check_fraction_along_ones", "check_peak_ratio", "check_qk_logit_bound",
           "check_bigram_loss"]


# --- DyT -----------------------------------------------------------------------------
def _dyt(x: Tensor, alpha: float, gamma: Tensor, beta: Tensor) -> Tensor:
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


def check_dyt(fn: Callable, *, hidden: bool = False) -> None:
    """dyt(x, alpha, gamma, beta): (..., d) -> (..., d), gamma * tanh(alpha * x) + beta."""
    g = generator(50)
    x = torch.randn(5, 6, generator=g, dtype=torch.float64) * 3
    gamma = torch.rand(6, generator=g, dtype=torch.float64) + 0.5
    beta = torch.randn(6, generator=g, dtype=torch.float64)
    cases = [case(x, 0.5, gamma, beta), case(x, 2.0, gamma, beta),
             case(x[:1], 1.0, torch.ones(6, dtype=torch.float64),
                  torch.zeros(6, dtype=torch.float64))]
    if hidden:
        big = torch.randn(2, 3, 4, generator=g, dtype=torch.float64) * 100
        cases += [case(big, 0.1, gamma[:4], beta[:4]), case(x.float(), 0.7, gamma.float(),
                                                            beta.float()),
                  case(x, -1.5, gamma, beta)]
    run_check(fn, "dyt", ["x", "alpha", "gamma", "beta"], cases, reference=_dyt,
              mistakes=_DYT_MISTAKES)


# --- the chance level of |cos(h, 1)| ----------------------------------------------------
def _chance(d: int) -> float:
    return math.exp(math.lgamma(d / 2) - math.lgamma((d + 1) / 2)) / math.sqrt(math.pi)


_CHANCE_MISTAKES = [
    ("√(2/(πd)) is the large-d approximation; the exercise asks for the exact value "
     "Γ(d/2) / (√π Γ((d+1)/2))", lambda d: math.sqrt(2 / (math.pi * d))),
    ("1/√d is the root-mean-square cos, sqrt(E[cos²]); the mean of |cos| is smaller",
     lambda d: 1 / math.sqrt(d)),
    ("you swapped the two Gamma functions: Γ(d/2) goes on top",
     lambda d: math.exp(math.lgamma((d + 1) / 2) - math.lgamma(d / 2)) / math.sqrt(math.pi)),
]


def check_chance_abs_cos(fn: Callable[[int], float], *, hidden: bool = False) -> None:
    """chance_abs_cos(d): E|cos(u, 1)| for u uniform on the sphere in d dimensions."""
    cases = [case(1), case(2), case(3), case(384), case(576)]
    if hidden:
        # sizes drawn from the grader's key: small, a model's, and very large
        cases += [case(d) for d in (*drawn_ints(50, 4, 60), *drawn_ints(51, 600, 5000),
                                    *drawn_ints(52, 10_000, 200_000))]
    # the Gamma functions (or a Beta function) lose a few hundred epsilons at large d
    run_check(fn, "chance_abs_cos", ["d"], cases, reference=_chance,
              mistakes=_CHANCE_MISTAKES, slack=lambda eps: 1e4 * eps)


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


def check_qk_norm_scores(fn: Callable, *, hidden: bool = False) -> None:
    """qk_norm_scores(q, k, eps): (..., Tq, dh), (..., Tk, dh) -> (..., Tq, Tk)."""
    g = generator(51)
    q = torch.randn(2, 5, 4, generator=g, dtype=torch.float64) * 3 + 1
    k = torch.randn(2, 5, 4, generator=g, dtype=torch.float64) * 0.1 - 0.5
    cases = [case(q, k, 1e-6), case(q[0, :3], k[0], 1e-6), case(q, 7 * q, 0.0)]
    if hidden:
        cases += [case(torch.randn(3, 2, 6, 8, generator=g, dtype=torch.float64),
                       torch.randn(3, 2, 6, 8, generator=g, dtype=torch.float64), 1e-5),
                  case(q.float(), k.float(), 1e-6),
                  case(torch.randn(1, 2, generator=g, dtype=torch.float64) * 1e3,
                       torch.randn(4, 2, generator=g, dtype=torch.float64), 1e-6)]
    run_check(fn, "qk_norm_scores", ["q", "k", "eps"], cases, reference=_qk,
              mistakes=_QK_MISTAKES)


# --- the fraction of ||h||² along 1 ----------------------------------------------------
def _along(h: Tensor) -> Tensor:
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


def check_fraction_along_ones(fn: Callable[[Tensor], Tensor], *, hidden: bool = False) -> None:
    """fraction_along_ones(h): (..., d) -> (...), ||proj_1 h||² / ||h||² = cos²(h, 1)."""
    g = generator(52)
    cases = [case(torch.randn(6, 5, generator=g, dtype=torch.float64) + 0.7),
             case(torch.ones(2, 3, dtype=torch.float64)),
             case(torch.tensor([[1.0, -1.0, 0.0, 2.0]], dtype=torch.float64))]
    if hidden:
        cases += [case(torch.randn(2, 3, 576, generator=g, dtype=torch.float64)),
                  case(torch.randn(4, 8, generator=g) * 50 + 3),
                  case(torch.randn(7, generator=g, dtype=torch.float64))]
    run_check(fn, "fraction_along_ones", ["h"], cases, reference=_along,
              mistakes=_ALONG_MISTAKES)


# --- the peak ratio of a vector (a massive activation) -------------------------------
def _peak(h: Tensor) -> Tensor:
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


def _spiked(g: torch.Generator, rows: int, d: int, size: float) -> Tensor:
    """Gaussian vectors of width d (odd, so the median is one entry) with one entry of
    ``size`` (either sign) in a random channel of the first vector."""
    h = torch.randn(rows, d, generator=g, dtype=torch.float64)
    c = int(torch.randint(d, (1,), generator=g))
    h[0, c] = size * (1 if torch.rand(1, generator=g) < 0.5 else -1)
    return h


def check_peak_ratio(fn: Callable[[Tensor], Tensor], *, hidden: bool = False) -> None:
    """peak_ratio(h): (..., d) -> (...), per vector max|h| / median|h| over its d entries
    (every d here is odd, so the median is the middle entry under any convention)."""
    g = generator(55)
    spike = torch.randn(4, 9, generator=g, dtype=torch.float64)
    spike[0, 3], spike[2, 6] = -60.0, 25.0
    cases = [case(torch.randn(6, 7, generator=g, dtype=torch.float64) * 2 + 0.3),
             case(spike),
             case(torch.randn(11, generator=g, dtype=torch.float64) - 1),
             case(torch.randn(2, 3, 5, generator=g, dtype=torch.float64))]
    if hidden:
        # widths, sizes and spikes drawn from the grader's key (odd widths)
        d1, d2 = (2 * k + 1 for k in drawn_ints(56, 3, 300, 2))
        (size,) = drawn_ints(57, 20, 5000)
        cases += [case(_spiked(g, 8, d1, float(size))),
                  case(_spiked(g, 5, d2, 3.0).float() * 100),
                  case(_spiked(g, 12, d1, float(size)).reshape(3, 4, d1))]
    run_check(fn, "peak_ratio", ["h"], cases, reference=_peak, mistakes=_PEAK_MISTAKES)


# --- the largest logit of a QK-normed head -----------------------------------------------
def _bound(g_q: Tensor, g_k: Tensor) -> Tensor:
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


def check_qk_logit_bound(fn: Callable, *, hidden: bool = False) -> None:
    """qk_logit_bound(g_q, g_k): gains (..., dh) -> (...), the largest attention logit a
    QK-normed head can produce, √dh · max_i |g_q,i g_k,i|."""
    g = generator(53)
    g_q = torch.tensor([[1.0, -3.0, 0.5, 2.0], [0.2, 0.1, 1.5, 1.0]], dtype=torch.float64)
    g_k = torch.tensor([[2.0, 1.0, 4.0, 0.5], [-3.0, 5.0, 0.3, 1.1]], dtype=torch.float64)
    cases = [case(g_q, g_k), case(g_k[1], g_q[1]),
             case(torch.ones(16, dtype=torch.float64), torch.ones(16, dtype=torch.float64))]
    if hidden:
        cases += [case(torch.randn(3, 4, 8, generator=g, dtype=torch.float64),
                       torch.randn(3, 4, 8, generator=g, dtype=torch.float64)),
                  case(torch.randn(12, 16, generator=g) * 3, torch.randn(12, 16, generator=g)),
                  case(torch.tensor([-2.5], dtype=torch.float64),
                       torch.tensor([4.0], dtype=torch.float64))]
    run_check(fn, "qk_logit_bound", ["g_q", "g_k"], cases, reference=_bound,
              mistakes=_BOUND_MISTAKES)


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


def _shakespeare(chars: int, start: int = 0) -> tuple[Tensor, Tensor, int]:
    """Consecutive training and test ids from the plays chapter 5's models read."""
    from lncourse.text import CharTokenizer, load_shakespeare, split_text

    text = load_shakespeare()[start:start + chars]
    train, test = split_text(text)
    tok = CharTokenizer.from_text(text)
    return (torch.as_tensor(tok.encode(train)), torch.as_tensor(tok.encode(test)),
            tok.vocab_size)


def check_bigram_loss(fn: Callable, *, hidden: bool = False) -> None:
    """bigram_loss(train_ids, test_ids, vocab_size): the test cross-entropy in nats of
    the add-one bigram table counted on train_ids, as a float."""
    g = generator(54)
    toy = (torch.tensor([0, 1, 2, 0, 1, 2, 2, 0]), torch.tensor([0, 1, 2, 2]), 3)
    cases = [case(*toy),
             case(torch.randint(0, 5, (400,), generator=g),
                  torch.randint(0, 5, (90,), generator=g), 5),
             case(*_shakespeare(40_000))]
    if hidden:
        cases += [case(torch.randint(0, 3, (50,), generator=g),
                       torch.randint(0, 7, (30,), generator=g), 7),   # unseen ids
                  case(torch.tensor([4, 4]), torch.tensor([4, 4, 0]), 6),
                  case(*_shakespeare(60_000, start=500_000))]
    run_check(fn, "bigram_loss", ["train_ids", "test_ids", "vocab_size"], cases,
              reference=_bigram, mistakes=_BIGRAM_MISTAKES, dtype=torch.float32)


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
