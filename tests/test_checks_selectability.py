"""Chapter 2's checks pass right answers (visible and hidden inputs), name every known
mistake with a wrong answer written here, judge the ellipsoid query by its property,
and treat twin keys as the chapter does."""

import math

import numpy as np
import pytest
import torch
from scipy.optimize import linprog

from answers import RIGHT, WRONG
from conftest import assert_check_passes, raised_message
from lncourse import checks
from lncourse.checks import selectability as module

FUNCTIONS = ["hull_vertices_2d", "unselectable_lp", "ellipsoid_query", "braid_reflect"]
MISTAKES = {"hull_vertices_2d": module._HULL_MISTAKES, "unselectable_lp": module._LP_MISTAKES,
            "ellipsoid_query": module._ELLIPSOID_MISTAKES, "braid_reflect": module._WALK_MISTAKES}


# --------------------------------------------------------------- reference solutions
def hull_vertices_2d(points):
    pts = points.double()
    order = sorted(range(len(pts)), key=lambda j: (float(pts[j, 0]), float(pts[j, 1])))

    def cross(o, a, b):
        return float((pts[a, 0] - pts[o, 0]) * (pts[b, 1] - pts[o, 1])
                     - (pts[a, 1] - pts[o, 1]) * (pts[b, 0] - pts[o, 0]))

    def half(indices):
        stack = []
        for j in indices:
            while len(stack) >= 2 and cross(stack[-2], stack[-1], j) <= 0:
                stack.pop()
            stack.append(j)
        return stack

    out = torch.zeros(len(pts), dtype=torch.bool)
    out[sorted(set(half(order)) | set(half(order[::-1])))] = True
    return out


def unselectable_lp(keys):
    K = keys.double().numpy()
    out = torch.zeros(len(K), dtype=torch.bool)
    for i in range(len(K)):
        others = K[np.abs(K - K[i]).max(1) > 0]          # twins are the same point
        if len(others) == 0:
            continue
        res = linprog(np.zeros(len(others)), A_eq=np.vstack([others.T, np.ones(len(others))]),
                      b_eq=np.append(K[i], 1.0), bounds=(0, None), method="highs")
        out[i] = res.status == 0
    return out


def ellipsoid_query(keys, gamma, beta, i):
    return (keys[i] - beta) / gamma ** 2


def braid_reflect(keys, i, steps):
    q = keys[i].clone()
    for _ in range(steps):
        scores = keys @ q
        scores[i] = -math.inf
        j = int(torch.argmax(scores))
        if float(keys[i] @ q) > float(scores[j]):
            return q
        w = keys[j] - keys[i]
        q = q - 2 * (q @ w) / (w @ w) * w
    return q


SOLUTIONS = [hull_vertices_2d, unselectable_lp, ellipsoid_query, braid_reflect]
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


def test_any_winning_query_passes_the_ellipsoid_check():
    """Queries the proof does not give, found by a generic search, pass too: the check
    judges whether key i wins, not whether the query equals one formula."""
    def by_linear_program(keys, gamma, beta, i):
        # maximise the margin t of key i over the others: (k_j - k_i) . q + t <= 0, |q| <= 1
        K = keys.numpy()
        rivals = np.abs(K - K[i]).max(1) > 0
        A = np.hstack([K[rivals] - K[i], np.ones((int(rivals.sum()), 1))])
        res = linprog(np.r_[np.zeros(K.shape[1]), -1.0], A_ub=A, b_ub=np.zeros(len(A)),
                      bounds=[(-1, 1)] * K.shape[1] + [(0, None)], method="highs")
        return torch.from_numpy(res.x[:-1])
    checks.check_ellipsoid_query(by_linear_program, hidden=True)


def test_twin_keys_are_selectable_as_in_the_chapter():
    """selectability() calls a key with a twin selectable when the point is a vertex;
    the LP exercise must agree, and its check contains twins."""
    from lncourse.selectability import selectability
    keys = torch.tensor([[0.0, 0.0], [2.0, 0.0], [0.0, 2.0], [2.0, 0.0]], dtype=torch.float64)
    assert selectability(keys).selectable.tolist() == [True, True, True, True]
    assert unselectable_lp(keys).tolist() == [False] * 4
    with pytest.raises(AssertionError, match="twin"):
        checks.check_unselectable_lp(WRONG["unselectable_lp"][0].fn)
