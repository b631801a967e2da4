"""Checks for the exercises of chapter 5 (today's normalisations through the lenses).
Their references and known mistakes are the teacher's key (:mod:`lncourse.checks.key.norms`)."""

from __future__ import annotations

from collections.abc import Callable

import torch
from torch import Tensor

from lncourse.checks._core import Key, case, drawn_ints, generator, run_check

__all__ = ["check_dyt", "check_chance_abs_cos", "check_qk_norm_scores",
           "check_fraction_along_ones", "check_peak_ratio", "check_qk_logit_bound",
           "check_bigram_loss"]


def check_dyt(fn: Callable, *, hidden: bool = False) -> None:
    """``dyt(x, alpha, gamma, beta)``: x (..., d), alpha a number, gamma and beta (d,)
    -> (..., d), dynamic tanh (DyT) over the last axis of x."""
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
    run_check(fn, "dyt", ["x", "alpha", "gamma", "beta"], cases, key=Key(__name__, hidden))


def check_chance_abs_cos(fn: Callable[[int], float], *, hidden: bool = False) -> None:
    """``chance_abs_cos(d)``: an int -> a float, the exact E|cos(u, 1)| for u uniform on
    the unit sphere in d dimensions."""
    cases = [case(1), case(2), case(3), case(384), case(576)]
    if hidden:
        # sizes drawn from the grader's key: small, a model's, and very large
        cases += [case(d) for d in (*drawn_ints(50, 4, 60), *drawn_ints(51, 600, 5000),
                                    *drawn_ints(52, 10_000, 200_000))]
    # exact routes lose a few hundred epsilons at large d (the key says which)
    run_check(fn, "chance_abs_cos", ["d"], cases,
              key=Key(__name__, hidden), slack=lambda eps: 1e4 * eps)


def check_qk_norm_scores(fn: Callable, *, hidden: bool = False) -> None:
    """``qk_norm_scores(q, k, eps)``: q (..., Tq, dh), k (..., Tk, dh), eps a number ->
    (..., Tq, Tk), the attention logits of one head with QK-norm."""
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
    run_check(fn, "qk_norm_scores", ["q", "k", "eps"], cases, key=Key(__name__, hidden))


def check_fraction_along_ones(fn: Callable[[Tensor], Tensor], *, hidden: bool = False) -> None:
    """``fraction_along_ones(h)``: (..., d) -> (...), the share of each vector's squared
    length that the projection P removes."""
    g = generator(52)
    cases = [case(torch.randn(6, 5, generator=g, dtype=torch.float64) + 0.7),
             case(torch.ones(2, 3, dtype=torch.float64)),
             case(torch.tensor([[1.0, -1.0, 0.0, 2.0]], dtype=torch.float64))]
    if hidden:
        cases += [case(torch.randn(2, 3, 576, generator=g, dtype=torch.float64)),
                  case(torch.randn(4, 8, generator=g) * 50 + 3),
                  case(torch.randn(7, generator=g, dtype=torch.float64))]
    run_check(fn, "fraction_along_ones", ["h"], cases, key=Key(__name__, hidden))


# --- the peak ratio of a vector (a massive activation) -------------------------------
def _spiked(g: torch.Generator, rows: int, d: int, size: float) -> Tensor:
    """Gaussian vectors of width d (odd, so the median is one entry) with one entry of
    ``size`` (either sign) in a random channel of the first vector."""
    h = torch.randn(rows, d, generator=g, dtype=torch.float64)
    c = int(torch.randint(d, (1,), generator=g))
    h[0, c] = size * (1 if torch.rand(1, generator=g) < 0.5 else -1)
    return h


def check_peak_ratio(fn: Callable[[Tensor], Tensor], *, hidden: bool = False) -> None:
    """``peak_ratio(h)``: (..., d) -> (...), how far each vector's largest entry in
    absolute value stands above its median absolute entry (every d here is odd, so the
    median is the middle entry under any convention)."""
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
    run_check(fn, "peak_ratio", ["h"], cases, key=Key(__name__, hidden))


def check_qk_logit_bound(fn: Callable, *, hidden: bool = False) -> None:
    """``qk_logit_bound(g_q, g_k)``: the gains (..., dh) of the queries and of the keys
    -> (...), the largest logit a QK-normed head with those gains can produce."""
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
    run_check(fn, "qk_logit_bound", ["g_q", "g_k"], cases, key=Key(__name__, hidden))


def _shakespeare(chars: int, start: int = 0) -> tuple[Tensor, Tensor, int]:
    """Consecutive training and test ids from the plays chapter 5's models read."""
    from lncourse.text import CharTokenizer, load_shakespeare, split_text

    text = load_shakespeare()[start:start + chars]
    train, test = split_text(text)
    tok = CharTokenizer.from_text(text)
    return (torch.as_tensor(tok.encode(train)), torch.as_tensor(tok.encode(test)),
            tok.vocab_size)


def check_bigram_loss(fn: Callable, *, hidden: bool = False) -> None:
    """``bigram_loss(train_ids, test_ids, vocab_size)``: two 1-D tensors of ids and an
    int -> a float, the bigram table's loss on test_ids in nats (its counts, plus one,
    from train_ids)."""
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
              key=Key(__name__, hidden), dtype=torch.float32)
