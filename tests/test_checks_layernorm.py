"""Every chapter-1 check passes the reference and names at least three plausible mistakes."""

import math

import pytest
import torch

from lncourse import checks
from lncourse.checks._core import assert_signature, run_check

from conftest import assert_check_passes


# --------------------------------------------------------------- reference solutions
def layer_norm_fgh(x, gamma, beta, eps):
    c = x - x.mean(-1, keepdim=True)
    return c / torch.sqrt((c * c).mean(-1, keepdim=True) + eps) * gamma + beta


def centering_matrix(d):
    return torch.eye(d, dtype=torch.float64) - torch.ones(d, d, dtype=torch.float64) / d


def layer_norm_on_plane(s, t, v):
    return math.sqrt(v.shape[-1]) * torch.sign(s)[:, None] * v


def fold_into_linear(W, b, gamma, beta):
    d = W.shape[1]
    P = torch.eye(d, dtype=W.dtype) - torch.ones(d, d, dtype=W.dtype) / d
    return (W * gamma) @ P, W @ beta + b


def rms_norm_gain(x, gain, eps):
    return x / torch.sqrt((x * x).mean(-1, keepdim=True) + eps) * gain


def layer_norm_jacobian(x):
    d = x.shape[-1]
    c = x - x.mean()
    sigma = torch.sqrt((c * c).mean())
    y = c / sigma
    P = torch.eye(d, dtype=x.dtype) - torch.ones(d, d, dtype=x.dtype) / d
    return (P - torch.outer(y, y) / d) / sigma


REFERENCES = [
    (checks.check_layer_norm_fgh, layer_norm_fgh),
    (checks.check_centering_matrix, centering_matrix),
    (checks.check_layer_norm_on_plane, layer_norm_on_plane),
    (checks.check_fold_into_linear, fold_into_linear),
    (checks.check_rms_norm, rms_norm_gain),
    (checks.check_layer_norm_jacobian, layer_norm_jacobian),
]


@pytest.mark.parametrize("check, solution", REFERENCES, ids=lambda f: getattr(f, "__name__", ""))
def test_reference_passes_and_prints_one_line(check, solution, capsys):
    assert_check_passes(check, solution, capsys)


# ------------------------------------------------------------------- wrong answers
def _ln(x, eps, unbiased=False, outside=False, centre=True, dim=-1):
    c = x - x.mean(dim, keepdim=True) if centre else x
    var = x.var(dim, keepdim=True, unbiased=unbiased)
    return c / (var.sqrt() + eps) if outside else c / torch.sqrt(var + eps)


WRONG = {
    checks.check_layer_norm_fgh: [
        (lambda x, gamma, beta, eps: _ln(x, eps, unbiased=True) * gamma + beta, "unbiased"),
        (lambda x, gamma, beta, eps: _ln(x, eps, outside=True) * gamma + beta, "outside the square root"),
        (lambda x, gamma, beta, eps: _ln(x, eps, centre=False) * gamma + beta, "no centring"),
        (lambda x, gamma, beta, eps: _ln(x, eps, dim=0) * gamma + beta, "wrong axis"),
        (lambda x, gamma, beta, eps: _ln(x, eps) * beta + gamma, "swapped"),
        (lambda x, gamma, beta, eps: _ln(x, 0.0) * gamma + beta, "epsilon is ignored"),
    ],
    checks.check_centering_matrix: [
        (lambda d: torch.eye(d, dtype=torch.float64) - torch.ones(d, d, dtype=torch.float64), "divide the all-ones"),
        (lambda d: torch.ones(d, d, dtype=torch.float64) / d, "complement"),
        (lambda d: torch.eye(d, dtype=torch.float64) - torch.ones(d, d, dtype=torch.float64) / (d - 1), "d - 1"),
        (lambda d: torch.eye(d, dtype=torch.float64) * (1 - 1 / d), "only the diagonal"),
    ],
    checks.check_layer_norm_on_plane: [
        (lambda s, t, v: math.sqrt(len(v)) * v.expand(len(s), -1), "sign of s"),
        (lambda s, t, v: torch.sign(s)[:, None] * v, "radius"),
        (lambda s, t, v: math.sqrt(len(v)) * torch.sign(s)[:, None] * v + t[:, None], "t 1 component"),
        (lambda s, t, v: math.sqrt(len(v)) * s[:, None] * v, "size of s"),
    ],
    checks.check_fold_into_linear: [
        (lambda W, b, gamma, beta: (W * gamma, W @ beta + b), "centring is missing"),
        (lambda W, b, gamma, beta: ((W - W.mean(1, keepdim=True)) * gamma, W @ beta + b), "wrong order"),
        (lambda W, b, gamma, beta: (fold_into_linear(W, b, gamma, beta)[0], b), "forgets beta"),
        (lambda W, b, gamma, beta: (fold_into_linear(W, b, gamma, beta)[0], W @ (gamma * beta) + b), "multiplies beta by gamma"),
    ],
    checks.check_rms_norm: [
        (lambda x, gain, eps: _ln(x, eps) * gain, "that is LayerNorm"),
        (lambda x, gain, eps: x / ((x * x).mean(-1, keepdim=True).sqrt() + eps) * gain, "outside the square root"),
        (lambda x, gain, eps: x / torch.sqrt((x * x).sum(-1, keepdim=True) + eps) * gain, "Euclidean norm"),
        (lambda x, gain, eps: x / torch.sqrt((x * x).mean(-1, keepdim=True) + eps), "gain is missing"),
    ],
    checks.check_layer_norm_jacobian: [
        (lambda x: layer_norm_jacobian(x) * x.var(unbiased=False).sqrt(), "1 / sigma is missing"),
        (lambda x: centering_matrix(len(x)).to(x.dtype) / x.var(unbiased=False).sqrt(), "y y\\^T / d term is missing"),
        (lambda x: layer_norm_jacobian(x) - torch.ones(len(x), len(x), dtype=x.dtype) / len(x) / x.var(unbiased=False).sqrt() * -1, "P is missing"),
        (lambda x: (centering_matrix(len(x)) - torch.outer(x - x.mean(), x - x.mean()) / x.var(unbiased=False)) / x.var(unbiased=False).sqrt(), "not divided by d"),
    ],
}


@pytest.mark.parametrize("check", list(WRONG), ids=lambda f: f.__name__)
def test_wrong_answers_fail_with_named_mistake(check):
    assert len(WRONG[check]) >= 3
    for wrong, expected_message in WRONG[check]:
        with pytest.raises(AssertionError, match=expected_message):
            check(wrong)


def test_stub_error_propagates():
    def stub(x, gamma, beta, eps):
        raise NotImplementedError
    with pytest.raises(NotImplementedError):
        checks.check_layer_norm_fgh(stub)


def test_signature_and_crash_and_mutation_are_reported():
    with pytest.raises(AssertionError, match="should take parameters"):
        checks.check_layer_norm_fgh(lambda x, g, b, eps: x)
    with pytest.raises(AssertionError, match="raised ZeroDivisionError"):
        checks.check_centering_matrix(lambda d: 1 / 0)

    def in_place(x, gamma, beta, eps):
        x -= x.mean(-1, keepdim=True)
        return x / torch.sqrt((x * x).mean(-1, keepdim=True) + eps) * gamma + beta
    with pytest.raises(AssertionError, match="in place"):
        checks.check_layer_norm_fgh(in_place)


def test_unknown_mistake_gets_generic_message_with_difference():
    with pytest.raises(AssertionError, match="differs from the reference.*largest difference"):
        checks.check_centering_matrix(lambda d: torch.zeros(d, d, dtype=torch.float64))
    with pytest.raises(AssertionError, match="shape"):
        checks.check_centering_matrix(lambda d: torch.zeros(d, dtype=torch.float64))
    with pytest.raises(AssertionError, match="NaN"):
        checks.check_centering_matrix(lambda d: torch.full((d, d), float("nan"), dtype=torch.float64))


def test_run_check_sequences_and_signature_helper():
    cases = [((torch.tensor([1.0, 2.0]),), {})]
    run_check("pair", lambda x: (x, x.sum()), cases, lambda x: (x, x.sum()))
    with pytest.raises(AssertionError, match="item 1"):
        run_check("pair", lambda x: (x, x.sum() + 1), cases, lambda x: (x, x.sum()))
    with pytest.raises(AssertionError, match="should take parameters"):
        assert_signature(lambda a: a, ["x"])
