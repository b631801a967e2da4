"""The stored measurements of chapter 5 (results/norms/real_paper.json) come out of today's
code: a test recomputes the first and the last passage of both models, every statistic at
every norm, and every reported summary (means and intervals over passages) is recomputed
from the stored per-passage values. The slow test recomputes every passage."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from lncourse.evidence.norms import real
from lncourse.norms.hidden import STATS
from lncourse.results import load_result, today_command

pytest.importorskip("gguf")


@pytest.fixture(scope="module")
def stored():
    return load_result("norms/real_paper")


def _compare(stored: dict, passages: list[int]) -> None:
    cfg = real.RealConfig(**stored["config"])
    got = real.measure(cfg, only=passages)
    for model, m in got.items():
        want = stored["models"][model]
        assert m["names"] == want["names"] and m["d"] == want["d"]
        for s in STATS:
            rows = np.asarray(want["per_passage"][s])[passages]
            # float32 activations of a dequantised model; a statistic near 0 keeps only
            # the absolute precision of its terms (1.6e-7 moved in the perturbed pass),
            # so 1e-5 absolute beside 2e-3 relative
            np.testing.assert_allclose(np.asarray(m["per_passage"][s]), rows, rtol=2e-3,
                                       atol=1e-5, err_msg=f"{model} {s}")


def test_first_and_last_passage_recompute(stored):
    n = stored["config"]["n_passages"]
    _compare(stored, [0, n - 1])


@pytest.mark.slow
def test_every_passage_recomputes(stored):
    _compare(stored, list(range(stored["config"]["n_passages"])))


def test_summaries_are_the_per_passage_means_and_intervals(stored):
    for model, m in stored["models"].items():
        assert set(m["summary"]) == set(STATS)
        for s in STATS:
            per = np.asarray(m["per_passage"][s])
            assert per.shape == (stored["config"]["n_passages"], len(m["names"]))
            want = real.summarize(per)
            for key in ("mean", "low", "high"):
                np.testing.assert_allclose(m["summary"][s][key], want[key], rtol=1e-12,
                                           err_msg=f"{model} {s} {key}")


def test_config_is_the_paper_preset(stored):
    assert stored["config"] == dataclasses.asdict(real.RealConfig.paper())
    assert today_command(stored["provenance"]["command"]).startswith(
        "python -m lncourse.evidence.norms.real")


def test_passages_are_fixed_and_start_at_a_line():
    a, b = real.passages(5, 300), real.passages(5, 300)
    assert a == b and len(set(a)) == 5 and all(len(p) == 300 for p in a)
    with pytest.raises(ValueError):
        real.passages(0)


def test_the_chapters_claims_hold_on_the_stored_measurements(stored):
    from lncourse.evidence.norms.claims import claims
    failed = [c for c, ok in claims(stored).items() if not ok]
    assert not failed, failed
