"""Every check rejects an answer with a NaN or an infinity in it, on visible and hidden
inputs: the first reference solution of each exercise, with one value of its answer
replaced (answers with no floating value, such as a boolean mask, are skipped)."""

import math

import pytest
import torch

from answers import RIGHT
from lncourse import checks
from lncourse.checks.key import layernorm, layernorm_grad, majority, majority_stats, nope, selectability
from stored_results_plugin import marked

FUNCTIONS = [f for m in (layernorm, layernorm_grad, selectability, majority, majority_stats,
                         nope) for f in m.MISTAKES]


def spoil(value, bad):
    """``value`` with its first floating entry replaced by ``bad``; (value, spoiled?)."""
    if isinstance(value, torch.Tensor) and value.is_floating_point() and value.numel():
        out = value.clone()
        out.view(-1)[0] = bad
        return out, True
    if isinstance(value, float):
        return bad, True
    if isinstance(value, (tuple, list)):
        items, done = [], False
        for v in value:
            if not done:
                v, done = spoil(v, bad)
            items.append(v)
        return type(value)(items), done
    return value, False


@pytest.mark.parametrize("bad", [math.nan, math.inf, -math.inf], ids=["nan", "inf", "-inf"])
@pytest.mark.parametrize("hidden", [False, True], ids=["visible", "hidden"])
@pytest.mark.parametrize("function", [marked(f, getattr(checks, f"check_{f}"), f)
                                      for f in FUNCTIONS])
def test_every_check_rejects_nan_and_inf(function, hidden, bad):
    right = RIGHT[function][0].fn
    spoiled = []

    def answer(*args, **kwargs):
        out, done = spoil(right(*args, **kwargs), bad)
        spoiled.append(done)
        return out
    answer.__signature__ = __import__("inspect").signature(right)
    try:
        getattr(checks, f"check_{function}")(answer, hidden=hidden)
    except AssertionError:
        return
    assert not any(spoiled), f"check_{function} accepted an answer holding {bad}"


def test_uniform_query_weights_rejects_weights_that_overflow():
    def huge(d):
        w = torch.zeros(d, d, dtype=torch.float64)
        w[:, 0] = 1e200
        return w, w.clone()
    with pytest.raises(AssertionError, match="overflow|inf|NaN"):
        checks.check_uniform_query_weights(huge)
