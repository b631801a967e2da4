"""Chapter 4's checks pass right answers (visible and hidden inputs) and name every
known mistake with a wrong answer written here, not taken from the checks."""

import pytest
import torch

from answers import RIGHT, WRONG
from conftest import assert_check_passes, raised_message
from lncourse import checks
from lncourse.checks import nope as module

FUNCTIONS = ["running_mean", "sample_covariance", "fit_loglog_slope", "masked_attention",
             "effective_tokens"]
MISTAKES = {"running_mean": module._RUNNING_MEAN_MISTAKES,
            "sample_covariance": module._COVARIANCE_MISTAKES,
            "fit_loglog_slope": module._SLOPE_MISTAKES,
            "masked_attention": module._MASK_MISTAKES,
            "effective_tokens": module._EFFECTIVE_MISTAKES}


# --------------------------------------------------------------- reference solutions
def running_mean(v):
    m = torch.arange(1, v.shape[-2] + 1, dtype=v.dtype)
    return v.cumsum(dim=-2) / m[:, None]


def sample_covariance(samples):
    centred = samples - samples.mean(dim=0, keepdim=True)
    return centred.T @ centred / (samples.shape[0] - 1)


def fit_loglog_slope(variance, m_min):
    m = torch.arange(1, variance.numel() + 1, dtype=torch.float64)
    keep = m >= m_min
    x, y = m[keep].log(), variance.double()[keep].log()
    x, y = x - x.mean(), y - y.mean()
    return float((x * y).sum() / (x * x).sum())


def masked_attention(scores, causal):
    if causal:
        T = scores.shape[-1]
        allowed = torch.ones(T, T, dtype=torch.bool).tril()
        scores = scores.masked_fill(~allowed, float("-inf"))
    return scores.softmax(dim=-1)


def effective_tokens(weights):
    return 1.0 / weights.pow(2).sum(dim=-1)


SOLUTIONS = [running_mean, sample_covariance, fit_loglog_slope, masked_attention,
             effective_tokens]
ALL_RIGHT = [(f.__name__, f) for f in SOLUTIONS] + [
    (a.function, a.fn) for f in FUNCTIONS for a in RIGHT.get(f, [])]


@pytest.mark.parametrize("hidden", [False, True], ids=["visible", "hidden"])
@pytest.mark.parametrize("function, solution", ALL_RIGHT, ids=lambda v: getattr(v, "__name__", v))
def test_right_answers_pass_and_print_one_line(function, solution, hidden, capsys):
    assert_check_passes(getattr(checks, f"check_{function}"), solution, capsys, hidden)


@pytest.mark.parametrize("answer", [a for f in FUNCTIONS for a in WRONG[f]],
                         ids=lambda a: a.fn.__name__)
def test_wrong_answer_fails_with_its_message(answer):
    message = raised_message(getattr(checks, f"check_{answer.function}"), answer)
    assert message.startswith(f"{answer.function}: ")


@pytest.mark.parametrize("function", FUNCTIONS)
def test_every_known_mistake_has_a_wrong_answer_that_triggers_it(function):
    check = getattr(checks, f"check_{function}")
    raised = [raised_message(check, a) for a in WRONG[function]]
    for message, _ in MISTAKES[function]:
        assert any(message in r for r in raised), f"no wrong answer triggers: {message}"


def test_the_slope_reference_is_the_packages():
    """The check's reference is lncourse.nope.loglog_slope itself, not a copy of it."""
    from lncourse.nope import loglog_slope
    v = 0.5 / torch.arange(1, 33, dtype=torch.float64) ** 0.8
    assert abs(fit_loglog_slope(v, 4) - loglog_slope(v, m_min=4)) < 1e-12
    assert abs(loglog_slope(v, m_min=4) + 0.8) < 1e-12
