"""Chapter 1's comparative sentences (lncourse.evidence.geometry.claims), checked on what
the lesson computes: each test calls the course function the lesson calls, with the
lesson's inputs, requires the claim its sentence rests on, and shows that the claim fails
on contrary numbers. The lesson itself imports no claim; these tests guard its prose."""

from __future__ import annotations

import ast
from pathlib import Path

import numpy as np
import pytest
import torch

from lncourse.evidence.geometry.claims import (epsilon_claim, folding_claim, require,
                                               two_pass_bfloat16_claim, variance_claim)
from lncourse.folding import folding_gaps
from lncourse.geometry.numerics import epsilon_errors, mean_index, variance_errors
from lncourse.layernorm import GeometryConfig
from lncourse.minilm import load_minilm
from lncourse.text import sample_sentences

from myst import read_page          # scripts/ (tests/conftest.py puts it on the path)

LESSON = Path(__file__).resolve().parents[2] / "book" / "01_layernorm_geometry.md"
LESSON_SEED = 0


def lesson_code() -> tuple[dict, list[ast.Call]]:
    """The lesson's parameters (its first code cell, run) and every call in its code."""
    cells = [c.source for c in read_page(LESSON).cells if c.cell_type == "code"]
    parameters: dict = {}
    exec(cells[0], parameters)
    calls = [node for source in cells
             for node in ast.walk(ast.parse("\n".join(
                 line for line in source.splitlines() if not line.startswith(("%", "!")))))
             if isinstance(node, ast.Call)]
    return parameters, calls


def call_of(calls: list[ast.Call], name: str) -> str:
    found = [ast.unparse(c) for c in calls
             if isinstance(c.func, ast.Name) and c.func.id == name]
    assert len(found) == 1, f"the lesson calls {name} {len(found)} times: {found}"
    return found[0]


def test_the_lesson_calls_the_course_functions_with_these_tests_inputs():
    """What the tests below recompute is what the lesson shows: its seed, the functions'
    own defaults, and its fast-mode sentences."""
    parameters, calls = lesson_code()
    assert parameters["SEED"] == LESSON_SEED and parameters["FULL"] is False
    assert call_of(calls, "epsilon_errors") == "epsilon_errors(seed=SEED)"
    assert call_of(calls, "variance_errors") == "variance_errors(seed=SEED)"
    assert call_of(calls, "mean_index") == "mean_index(means)"
    assert call_of(calls, "folding_gaps") == "folding_gaps(minilm, cache, mask, n_heads=12)"
    assert call_of(calls, "sample_sentences") == "sample_sentences(N_SENTENCES, seed=SEED)"
    assert "GeometryConfig.quick()" in [ast.unparse(c) for c in calls]


# ------------------------------------------------------------------------------- ε
@pytest.mark.parametrize("seed", [LESSON_SEED, 1])
def test_epsilon_claim_holds_for_the_lesson_and_fails_when_d_does_not_matter(seed):
    errors = epsilon_errors(seed=seed)
    assert list(errors) == [(4, 1.0), (64, 1.0), (64, 1e-3)]
    assert require(epsilon_claim(errors)).holds
    flat = dict(errors)
    flat[(64, 1.0)] = flat[(4, 1.0)]          # had d = 64 been as bad as d = 4
    assert epsilon_claim(flat).holds is False
    swapped = {k: v[::-1] for k, v in errors.items()}   # the two slips' roles exchanged
    assert epsilon_claim(swapped).holds is False
    spread = dict(errors)                     # had small spread been no worse than 1
    spread[(64, 1e-3)] = (5 * errors[(64, 1.0)][0], errors[(64, 1e-3)][1])
    assert epsilon_claim(spread).holds is False


# ------------------------------------------------------------------------- variance
@pytest.fixture(scope="module")
def lesson_variance():
    """The lesson's variance cell: means, errors, the index of the mean it prints at."""
    means, errors = variance_errors(seed=LESSON_SEED)
    return means, errors, mean_index(means)


def test_variance_claim_holds_for_the_lesson_and_fails_if_two_pass_also_loses(
        lesson_variance):
    means, errors, at = lesson_variance
    assert means[at] == pytest.approx(100.0)
    claim = require(variance_claim(means, errors, at))
    assert claim.values["one_pass_worst_low_precision"] >= 0.5
    swapped = {k.replace("one-pass", "x").replace("two-pass", "one-pass")
               .replace("x", "two-pass"): v for k, v in errors.items()}
    assert variance_claim(means, swapped, at).holds is False
    kept = {k: v.copy() for k, v in errors.items()}   # had one pass kept a digit
    kept["one-pass, bfloat16"][at] = 0.05
    assert variance_claim(means, kept, at).holds is False
    lost = {k: v.copy() for k, v in errors.items()}   # had two passes lost them too
    lost["two-pass, bfloat16"][at] = 0.5
    assert variance_claim(means, lost, at).holds is False


def test_two_pass_bfloat16_claim_holds_for_the_lesson_and_fails_if_its_error_stays_flat(
        lesson_variance):
    means, errors, at = lesson_variance
    assert require(two_pass_bfloat16_claim(means, errors, at)).holds
    flat = dict(errors)
    flat["two-pass, bfloat16"] = np.full(len(means), 1e-3)
    assert two_pass_bfloat16_claim(means, flat, at).holds is False


# -------------------------------------------------------------------------- folding
@pytest.fixture(scope="module")
def lesson_folding():
    """The lesson's fast-mode MiniLM cell: the folding gaps on its sentences."""
    minilm = load_minilm("cpu")
    sentences = sample_sentences(GeometryConfig.quick().n_sentences, seed=LESSON_SEED)
    ids, mask = minilm.tokenize(sentences)
    with torch.no_grad():
        _, cache = minilm(ids, mask, return_cache=True)
    return folding_gaps(minilm, cache, mask, n_heads=12)


def test_folding_claim_holds_for_the_lesson_and_fails_beyond_round_off(lesson_folding):
    gaps = lesson_folding
    assert len(gaps.scores) == len(gaps.queries) == len(gaps.score_scales) == 6
    assert require(folding_claim(gaps.scores, max(gaps.score_scales))).holds
    worse = [*gaps.scores[:-1], 1e-3 * max(gaps.score_scales)]  # one layer not folded right
    bad = folding_claim(worse, max(gaps.score_scales))
    assert bad.holds is False
    with pytest.raises(AssertionError, match="folding_round_off"):
        require(bad)
