"""The chapter 3 checks accept the reference solutions and name plausible mistakes."""

from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F

from lncourse.checks import majority as checks


# ------------------------------------------------------------------ margin rule
def has_clear_majority(counts, min_margin):
    top2 = counts.topk(2, dim=1).values
    return (top2[:, 0] - top2[:, 1] >= min_margin) & (top2[:, 1] > 0)


def test_has_clear_majority(capsys):
    checks.check_has_clear_majority(has_clear_majority)
    assert capsys.readouterr().out.startswith("check_has_clear_majority passed")


@pytest.mark.parametrize("wrong, message", [
    (lambda counts, min_margin: (lambda t: (t[:, 0] - t[:, 1] > min_margin) & (t[:, 1] > 0))(
        counts.topk(2, 1).values), "use >="),
    (lambda counts, min_margin: (lambda t: t[:, 0] - t[:, 1] >= min_margin)(
        counts.topk(2, 1).values), "single class"),
    (lambda counts, min_margin: (counts[:, 0] - counts[:, 1] >= min_margin)
     & (counts[:, 1] > 0), "two largest"),
    (lambda counts, min_margin: counts.sum(1) > 1000, "differs from the reference"),
])
def test_has_clear_majority_mistakes(wrong, message):
    with pytest.raises(AssertionError, match=message):
        checks.check_has_clear_majority(wrong)


def test_signature_is_checked():
    with pytest.raises(AssertionError, match="parameters"):
        checks.check_has_clear_majority(lambda c, m: None)


def test_stub_reads_as_unfinished():
    def stub(counts, min_margin):
        raise NotImplementedError("your code here")

    with pytest.raises(NotImplementedError):
        checks.check_has_clear_majority(stub)


# ------------------------------------------------- LayerNorm without projection
def norm_without_projection(x):
    return math.sqrt(x.shape[-1]) * x / x.norm(dim=-1, keepdim=True)


def test_norm_without_projection():
    checks.check_norm_without_projection(norm_without_projection)


@pytest.mark.parametrize("wrong, message", [
    (lambda x: x / x.norm(dim=-1, keepdim=True) / math.sqrt(x.shape[-1]), "released code"),
    (lambda x: F.layer_norm(x, x.shape[-1:], eps=1e-12), "subtracted the mean"),
    (lambda x: x / x.norm(dim=-1, keepdim=True), "norm sqrt\\(d\\), not 1"),
    (lambda x: math.sqrt(x.shape[-1]) * x / x.norm(), "last axis"),
])
def test_norm_without_projection_mistakes(wrong, message):
    with pytest.raises(AssertionError, match=message):
        checks.check_norm_without_projection(wrong)


def test_in_place_modification_is_caught():
    def in_place(x):
        x /= x.norm(dim=-1, keepdim=True)
        return x * math.sqrt(x.shape[-1])

    with pytest.raises(AssertionError, match="in place"):
        checks.check_norm_without_projection(in_place)


# ----------------------------------------------------------------- query angle
def query_angle(queries):
    cos = F.cosine_similarity(queries, torch.ones_like(queries), dim=-1)
    return torch.rad2deg(torch.acos(cos.abs().clamp(max=1.0)))


def test_query_angle_accepts_acos_and_atan2():
    checks.check_query_angle(query_angle)
    from lncourse.majority import query_angles
    checks.check_query_angle(lambda queries: query_angles(queries))


@pytest.mark.parametrize("wrong, message", [
    (lambda queries: torch.rad2deg(torch.acos(F.cosine_similarity(
        queries, torch.ones_like(queries), dim=-1).clamp(-1, 1))), "fold"),
    (lambda queries: torch.acos(F.cosine_similarity(
        queries, torch.ones_like(queries), dim=-1).abs().clamp(max=1)), "radians"),
    (lambda queries: torch.rad2deg(torch.acos(
        (queries.sum(-1).abs() / queries.norm(dim=-1)).clamp(max=1))), "sqrt\\(d\\)"),
    (lambda queries: torch.rad2deg(torch.acos(
        (queries[..., 0].abs() / queries.norm(dim=-1)).clamp(max=1))), "first axis"),
])
def test_query_angle_mistakes(wrong, message):
    with pytest.raises(AssertionError, match=message):
        checks.check_query_angle(wrong)


# ---------------------------------------------------------- multiset attention
def attend_counts(scores, counts, values):
    logits = scores.unsqueeze(0) + torch.log(counts.to(scores.dtype)).unsqueeze(1)
    return torch.softmax(logits, dim=-1) @ values


def attend_counts_loop(scores, counts, values):
    """A second correct solution, written differently: explicit weights."""
    w = torch.exp(scores - scores.max(dim=1, keepdim=True).values)      # (C, C)
    w = w.unsqueeze(0) * counts.unsqueeze(1).to(scores.dtype)           # (B, C, C)
    return (w / w.sum(-1, keepdim=True)) @ values


def test_attend_counts():
    checks.check_attend_counts(attend_counts)
    checks.check_attend_counts(attend_counts_loop)


@pytest.mark.parametrize("wrong, message", [
    (lambda scores, counts, values: torch.softmax(scores, -1).unsqueeze(0).expand(
        counts.shape[0], -1, -1) @ values, "weighted by how often"),
    (lambda scores, counts, values: torch.softmax(
        scores.unsqueeze(0) + torch.log((counts > 0).to(scores.dtype)).unsqueeze(1), -1)
     @ values, "once to each present class"),
    (lambda scores, counts, values: (torch.softmax(scores, -1).unsqueeze(0)
                                     * counts.unsqueeze(1).to(scores.dtype)) @ values,
     "renormalising"),
    (lambda scores, counts, values: torch.softmax(
        scores.unsqueeze(0) * counts.unsqueeze(1).to(scores.dtype), -1) @ values,
     "do not multiply"),
])
def test_attend_counts_mistakes(wrong, message):
    with pytest.raises(AssertionError, match=message):
        checks.check_attend_counts(wrong)


# --------------------------------------------------- queries parallel to 1
def uniform_query_weights(d):
    w = torch.zeros(d)
    w[0] = 1.0
    return torch.outer(torch.ones(d), w), torch.eye(d)


def test_uniform_query_weights_accepts_any_valid_solution():
    checks.check_uniform_query_weights(uniform_query_weights)
    # another valid choice: W_K = I, W_Q = 1 w^T with a random w, scaled
    g = torch.Generator().manual_seed(0)
    checks.check_uniform_query_weights(
        lambda d: (3.0 * torch.outer(torch.ones(d), torch.randn(d, generator=g)), torch.eye(d)))


@pytest.mark.parametrize("wrong, message", [
    (lambda d: (torch.eye(d), torch.eye(d)), "orthogonal to 1"),
    (lambda d: (torch.ones(d, d), torch.eye(d)), "query is 0"),
    (lambda d: (torch.zeros(d, d), torch.eye(d)), "trivially"),
    (lambda d: (torch.randn(d, d), torch.randn(d, d)), "scores differ"),
    (lambda d: torch.eye(d), "pair"),
])
def test_uniform_query_weights_mistakes(wrong, message):
    with pytest.raises(AssertionError, match=message):
        checks.check_uniform_query_weights(wrong)
