"""Chapter 3's checks pass right answers (visible and hidden inputs), name every known
mistake with a wrong answer written here, and judge the query weights by the property
the exercise asks for."""

import math

import pytest
import torch

from answers import RIGHT, WRONG
from conftest import assert_check_passes, raised_message
from lncourse import checks
from lncourse.checks import majority as module

FUNCTIONS = ["has_clear_majority", "uniform_query_weights", "attend_counts",
             "norm_without_projection", "query_angle"]
MISTAKES = {"has_clear_majority": module._MARGIN_MISTAKES,
            "uniform_query_weights": module._UNIFORM_MISTAKES,
            "attend_counts": module._ATTEND_MISTAKES,
            "norm_without_projection": module._NO_PROJECTION_MISTAKES,
            "query_angle": module._ANGLE_MISTAKES}


# --------------------------------------------------------------- reference solutions
def has_clear_majority(counts, min_margin):
    top2 = counts.topk(2, dim=1).values
    return (top2[:, 0] - top2[:, 1] >= min_margin) & (top2[:, 1] > 0)


def uniform_query_weights(d):
    w = torch.zeros(d)
    w[0] = 1.0
    return torch.outer(torch.ones(d), w), torch.eye(d)


def attend_counts(scores, counts, values):
    logits = scores.unsqueeze(0) + torch.log(counts.to(scores.dtype)).unsqueeze(1)
    return torch.softmax(logits, dim=-1) @ values


def norm_without_projection(x):
    return math.sqrt(x.shape[-1]) * x / x.norm(dim=-1, keepdim=True)


def query_angle(queries):
    cos = queries.sum(-1) / (queries.norm(dim=-1) * math.sqrt(queries.shape[-1]))
    return torch.rad2deg(torch.acos(cos.abs().clamp(max=1.0)))


SOLUTIONS = [has_clear_majority, uniform_query_weights, attend_counts, norm_without_projection,
             query_angle]
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


def test_query_weights_are_judged_for_almost_every_token():
    """W_Q = 1 w^T gives a zero query to the tokens orthogonal to w (no choice avoids
    that: a linear map from the hyperplane onto a line has a kernel). The check accepts
    it, since the exercise asks for almost every token, and it really is almost every:
    random LayerNorm'd tokens all get nonzero queries parallel to 1."""
    d = 8
    W_Q, W_K = uniform_query_weights(d)
    h = torch.nn.functional.layer_norm(torch.randn(1000, d), (d,))
    q = h @ W_Q.T @ W_K / math.sqrt(d)
    assert (q - q.mean(-1, keepdim=True)).abs().max() < 1e-6 and q.abs().min() > 0
    blind = torch.zeros(d)
    blind[1], blind[2] = 1.0, -1.0                       # orthogonal to 1 and to w = e_0
    assert (blind @ W_Q.T @ W_K).abs().max() == 0
    checks.check_uniform_query_weights(uniform_query_weights)
