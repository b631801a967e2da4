"""The teacher-only inputs (``--hidden``) of every exercise: drawn from the grader's key
(``--hidden-key``), so that nobody answers them from a lookup table built from the
course's public code, and never echoed in a failing answer's feedback, so that
resubmitting under one key does not leak them one by one (issue 60, item 9)."""

from __future__ import annotations

import contextlib
import math
import sys

import numpy as np
import pytest
import torch

import lncourse.checks as checks
from lncourse.checks import _core
from lncourse.grading.exercises import CHAPTERS

# the checks of 2.5 and 3.5 read stored runs (their inputs are a real run's numbers)
pytestmark = pytest.mark.replay

EXERCISES = [e for ch in CHAPTERS for e in ch.exercises]
KEYS = ("a key the teacher keeps", "another teacher's key")


def _modules():
    return [m for name, m in list(sys.modules.items())
            if name.startswith("lncourse.checks") and hasattr(m, "run_check")]


@contextlib.contextmanager
def _cases_of(runs: list):
    """While active, every check's ``run_check`` appends its cases to ``runs`` and returns
    without calling anything."""
    saved = {m: m.run_check for m in _modules()}
    for m in saved:
        m.run_check = lambda fn, name, params, cases, **kw: runs.extend(cases)
    try:
        yield
    finally:
        for m, f in saved.items():
            m.run_check = f


def cases(exercise, hidden: bool, key: str | None) -> list:
    """The inputs ``exercise``'s check gives the learner's function."""
    runs: list = []
    _core.configure(hidden_key=key)
    try:
        with _cases_of(runs):
            getattr(checks, exercise.check)(lambda *a, **k: None, hidden=hidden)
    finally:
        _core.configure(hidden_key=None)
    return runs


def _plain(value):
    if isinstance(value, torch.Tensor):
        return ("tensor", tuple(value.shape), value.detach().double().flatten().tolist())
    if isinstance(value, np.ndarray):
        return ("array", value.shape, value.astype(float).flatten().tolist())
    if isinstance(value, (list, tuple)):
        return tuple(_plain(v) for v in value)
    if isinstance(value, dict):
        return tuple((k, _plain(v)) for k, v in value.items())
    return repr(value)


def teacher_only(exercise, key: str) -> list:
    """The inputs that ``hidden=True`` under ``key`` adds to the public ones."""
    public = [_plain(c) for c in cases(exercise, False, None)]
    return [c for c in cases(exercise, True, key) if _plain(c) not in public]


@pytest.mark.parametrize("exercise", EXERCISES, ids=[e.number for e in EXERCISES])
def test_teacher_only_inputs_depend_on_the_key(exercise):
    first, second = (teacher_only(exercise, k) for k in KEYS)
    assert first, f"exercise {exercise.number} has no teacher-only inputs"
    assert [_plain(c) for c in first] != [_plain(c) for c in second], (
        f"exercise {exercise.number}'s teacher-only inputs are the same under two keys: "
        "draw them from lncourse.checks._core.generator (or drawn_ints, numpy_rng)")


# ------------------------------------------------------------ nothing echoed in feedback
def _numbers(value) -> list[float]:
    """The numbers a teacher-only input holds."""
    if isinstance(value, torch.Tensor):
        return value.detach().double().flatten().tolist()
    if isinstance(value, np.ndarray):
        return value.astype(float).flatten().tolist()
    if isinstance(value, (list, tuple)):
        return [x for v in value for x in _numbers(v)]
    if isinstance(value, dict):
        return [x for v in value.values() for x in _numbers(v)]
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return [float(value)]
    return []


def _echoes(message: str, inputs: list) -> list[str]:
    """The spellings of the inputs' numbers that ``message`` holds: Python's repr, the
    four decimals tensors print with, and an integer's digits where it has three or more
    (two-digit integers are too common in any message to tell)."""
    found = []
    for args, kwargs in inputs:
        for x in _numbers((args, kwargs)):
            if not math.isfinite(x):
                continue
            if x == int(x):
                spellings = [str(int(x))] if abs(x) >= 100 else []
            else:
                spellings = [repr(x), f"{x:.4f}"]
            found += [s for s in spellings if s in message]
    return found


def _echo_back(*args, **kwargs):
    """A wrong answer that tries to get its inputs into the feedback: by its error's
    message, by what it prints, and by the name of its error's class."""
    text = repr([_numbers(a) for a in args]) + repr(torch.tensor(_numbers(args)))
    print(text)
    raise type("E" + "_".join(f"{x:.4f}".replace(".", "_").replace("-", "m")
                              for x in _numbers(args)[:3]), (ValueError,), {})(text)


def _shape_of_input(*args, **kwargs):
    """A wrong answer that encodes an input's value in its output's shape and values."""
    x = _numbers(args)
    n = int(abs(x[0]) * 1000) % 5000 + 1 if x else 1
    return torch.full((n,), x[0] if x else 0.0, dtype=torch.float64)


@pytest.mark.parametrize("wrong", [_echo_back, _shape_of_input], ids=["raises", "shape"])
@pytest.mark.parametrize("exercise", EXERCISES, ids=[e.number for e in EXERCISES])
def test_a_failure_on_a_teacher_only_input_does_not_echo_it(exercise, wrong, capsys):
    """Each exercise's check, run on its teacher-only inputs only under a key, fails a
    wrong answer with a message that holds none of those inputs' numbers."""
    key = KEYS[0]
    hidden = teacher_only(exercise, key)
    public = [_plain(c) for c in cases(exercise, False, None)]
    saved = {m: m.run_check for m in _modules()}
    real = saved[_core]

    def only_hidden(fn, name, params, cases_, **kw):   # the grader's second pass
        return real(fn, name, params,
                               [c for c in cases_ if _plain(c) not in public], **kw)
    for m in saved:
        m.run_check = only_hidden
    _core.configure(hidden_key=key)
    try:
        with pytest.raises(AssertionError) as failed:
            getattr(checks, exercise.check)(wrong, hidden=True)
    finally:
        _core.configure(hidden_key=None)
        for m, f in saved.items():
            m.run_check = f
    message = str(failed.value)
    assert "teacher-only input" in message, message
    assert not _echoes(message, hidden), (message, _echoes(message, hidden)[:5])


DRAWN_SIZES = ("centering_matrix", "uniform_query_weights", "projection_main_effect",
               "chance_abs_cos")   # their teacher-only inputs came from no key before


@pytest.mark.parametrize("key", KEYS)
@pytest.mark.parametrize("function", DRAWN_SIZES)
def test_right_answers_pass_the_inputs_drawn_from_a_key(function, key, capsys):
    from tests.answers import RIGHT

    _core.configure(hidden_key=key)
    try:
        for answer in RIGHT[function]:
            getattr(checks, f"check_{function}")(answer.fn, hidden=True)
    finally:
        _core.configure(hidden_key=None)
