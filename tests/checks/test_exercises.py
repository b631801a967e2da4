"""Every exercise's check, in every chapter: the reference solutions and the other right
answers in ``answers.py`` pass (on visible and hidden inputs) and print one line; every
wrong answer fails with its own message; and every mistake a check knows by name is
triggered by at least one wrong answer written independently of the check."""

import importlib
import sys

import pytest

from answers import RIGHT, WRONG
from conftest import assert_check_passes, raised_message
from stored_results_plugin import marked
from lncourse import checks
from lncourse.checks import (layernorm, layernorm_grad, majority, majority_stats, nope, norms,
                             selectability)

MODULES = [layernorm, layernorm_grad, selectability, majority, majority_stats, nope, norms]
# each check module's key (its references and known mistakes): the teacher's
KEYS = {m: importlib.import_module(f"lncourse.checks.key.{m.__name__.rsplit('.', 1)[-1]}")
        for m in MODULES}
FUNCTIONS = [f for module in MODULES for f in KEYS[module].MISTAKES]


@pytest.fixture
def without_key(monkeypatch):
    """The install a learner has: the teacher's key cannot be imported, so the checks
    judge the visible inputs against their stored outputs alone."""
    for name in ["lncourse.checks.key", *(k.__name__ for k in KEYS.values())]:
        monkeypatch.setitem(sys.modules, name, None)


def _param(answer):
    """An answer as a parameter; ``replay`` where its check reads a stored result."""
    return marked(answer, getattr(checks, f"check_{answer.function}"),
                  f"{answer.function}-{answer.fn.__name__}")


@pytest.mark.parametrize("module", MODULES, ids=lambda m: m.__name__.rsplit(".", 1)[-1])
def test_every_check_has_its_mistakes_and_answers_on_both_sides(module):
    functions = {name.removeprefix("check_") for name in module.__all__}
    assert set(KEYS[module].MISTAKES) == functions
    assert set(KEYS[module].REFERENCES) <= functions
    for function in functions:
        assert RIGHT.get(function), f"no right answer for {function}"
        assert WRONG.get(function), f"no wrong answer for {function}"


@pytest.mark.parametrize("hidden", [False, True], ids=["visible", "hidden"])
@pytest.mark.parametrize("answer", [_param(a) for f in FUNCTIONS for a in RIGHT[f]])
def test_right_answers_pass_and_print_one_line(answer, hidden, capsys, request):
    if not hidden:      # the visible inputs: from the stored outputs alone
        request.getfixturevalue("without_key")
    assert_check_passes(getattr(checks, f"check_{answer.function}"), answer.fn, capsys, hidden)


@pytest.mark.parametrize("answer", [_param(a) for f in FUNCTIONS for a in WRONG[f]])
def test_wrong_answer_fails_with_its_message(answer, without_key):
    message = raised_message(getattr(checks, f"check_{answer.function}"), answer)
    assert message.startswith(f"{answer.function}: ")


@pytest.mark.parametrize("module, function",
                         [pytest.param(m, f, marks=marked(f, getattr(checks, f"check_{f}")).marks,
                                       id=f"-{f}") for m in MODULES for f in KEYS[m].MISTAKES])
def test_every_known_mistake_has_a_wrong_answer_that_triggers_it(module, function,
                                                                 without_key):
    check = getattr(checks, f"check_{function}")
    raised = [raised_message(check, a) for a in WRONG[function]]
    for message, _ in KEYS[module].MISTAKES[function]:
        assert any(message in r for r in raised), f"no wrong answer triggers: {message}"
